"""What a link fault costs the jobs whose traffic crossed it: a rerouted job that runs
measurably slower over the detour is shown degraded, with the link in its reason, until
the link is repaired (``LinkImpact``, fed by ``recovery.service``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from podfleet.control.jobtable import JobTable
from podfleet.control.lifecycle import JobState

if TYPE_CHECKING:
    from podfleet.control.runtime import ClusterRuntime

_OURS = (JobState.RUNNING, JobState.CHECKPOINTING)
# A job more than this much slower than before a link fault is reported degraded: the
# same 5% a rerouted job must stay within to count as running at its healthy rate.
DEGRADED_SLOWDOWN = 0.05
DEGRADED_REASON = "degraded: link"  # how a reason set by ``LinkImpact`` starts


def positive(v: Any) -> float | None:
    """A reported figure as a float, or None when missing or not a positive number."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f > 0 else None


@dataclass
class _Detour:
    """One faulted link's watch: its name "A-B", its state word, the step time and rate
    of each job that crossed it before the fault, and since when it is up again (None:
    down or degraded now)."""

    name: str
    word: str
    jobs: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    up_since: float | None = None


class LinkImpact:
    """What a link fault costs the jobs whose traffic crossed it.

    A reroute keeps a job running, but on the twin's performance model a tensor-parallel
    job spends a third to a half of each step communicating, so a detour of a few hops
    can cost it tens of percent: "rerouted" alone would hide that from the operator. At
    the fault the job's step time is noted (its last progress report, before any step
    ran over the detour); each later progress report is compared with it, and a job more
    than ``DEGRADED_SLOWDOWN`` slower is shown degraded with the link(s) and the cost in
    its reason. The reason goes back to a plain one when the job is back within the
    tolerance (it moved off the link, the detour got cheaper) or the link is repaired.

    A flapping link goes down and up several times within a minute, shorter than a step:
    its "up" moments are not a repair, so the time noted at its first fault stays until
    the job has run a whole step with the link up (then the watch ends; a later fault
    notes the time afresh).

    Only the reason is written (``JobTable.set_reason``): the state stays RUNNING, and a
    job being recovered or checkpointed keeps the reason its flow gives it until its
    next progress report as a running job. Watches live in memory; the time noted at the
    fault is also kept with the job (``JobTable.set_link_baseline``) while the link is
    not up. A restarted control plane sets its down and degraded links again
    (``control.events.restore_links``), and the link event that makes rebuilds the watch
    from what each job kept: the relaunched job's step times are then compared with the
    ones from before the fault, not with its own on the detour.
    """

    def __init__(self, table: JobTable, rt: ClusterRuntime) -> None:
        self.table, self.rt = table, rt
        self.watches: dict[int, _Detour] = {}  # link index -> its watch

    def link_fault(self, link: int, state: str) -> None:
        """Note the step time of every live job holding both ends of the link (the flows
        between its ranks that crossed it now take the detour)."""
        links = self.rt.topology.links
        if not 0 <= link < len(links):
            return
        lk = links[link]
        w = self.watches.get(link)
        if w is None:
            w = self.watches[link] = _Detour(f"{lk.src}-{lk.dst}", state)
        w.word, w.up_since = state, None
        for job in self.table.on_cluster(self.rt.id):
            kept = job.status.link_baselines.get(str(link))
            if job.id in w.jobs:
                # Watched already (a flap's next fault): it keeps the time from before the
                # first one, kept with the job again (a moment up let it go).
                self.table.set_link_baseline(job, link, w.jobs[job.id])
                continue
            if kept is not None:
                # Noted before a restart (the link stayed down): wherever the job runs now.
                w.jobs[job.id] = (positive(kept[0]), positive(kept[1]))
                continue
            if job.state not in (*_OURS, JobState.RECOVERING):
                continue
            chips = set(job.chips)
            if lk.src not in chips or lk.dst not in chips:
                continue
            p = job.status.progress
            st, tps = positive(p.step_time_s), positive(p.tokens_per_s)
            if st is not None or tps is not None:  # a job with no step done yet has no rate to lose
                w.jobs[job.id] = (st, tps)
                self.table.set_link_baseline(job, link, (st, tps))

    def link_up(self, link: int) -> None:
        """The link is up again (repaired, or a flap's moment up): its jobs no longer
        name it; the watch stays until each has run a whole step on the direct path."""
        w = self.watches.get(link)
        if w is None:
            return
        w.up_since = self.table.now()
        for jid in list(w.jobs):
            job = self.table.find(jid)
            if job is None or job.ended:  # no progress report will come to end its watch
                w.jobs.pop(jid)
                continue
            # A plane restarted from now on finds the link up: nothing to compare with.
            self.table.set_link_baseline(job, link, None)
            if job.state != JobState.RUNNING or not job.status.reason.startswith(DEGRADED_REASON):
                continue
            slowed = self._slowed(jid, None, None)
            if slowed:  # another link still costs it: name only what is still down
                self.table.set_reason(job, self._reason(slowed))
            else:
                self.table.set_reason(job, f"link {w.name} up again: traffic back on the direct path")
        if not w.jobs:
            self.watches.pop(link, None)

    def progress(self, job_id: str, step_time_s: float | None, tokens_per_s: float | None) -> None:
        """A progress report of a job: show it degraded, or no longer."""
        mine = [(link, w) for link, w in self.watches.items() if job_id in w.jobs]
        if not mine:
            return
        job = self.table.find(job_id)
        now = self.table.now()
        for link, w in mine:
            step = step_time_s or 0.0
            # Gone, or a whole step ran since the link came back: nothing left to compare.
            if job is None or job.ended or (w.up_since is not None and now - step >= w.up_since):
                w.jobs.pop(job_id, None)
                if not w.jobs and w.up_since is not None:
                    self.watches.pop(link, None)
        if job is None or job.ended or job.state != JobState.RUNNING:
            return  # a recovery or a checkpoint owns the reason now
        slowed = self._slowed(job_id, step_time_s, tokens_per_s)
        if slowed:
            self.table.set_reason(job, self._reason(slowed))
        elif job.status.reason.startswith(DEGRADED_REASON):
            self.table.set_reason(job, f"running within {DEGRADED_SLOWDOWN:.0%} of its step time before the "
                                       "link fault")

    def _slowed(self, job_id: str, step_time_s: float | None,
                tokens_per_s: float | None) -> list[tuple[str, str, float]]:
        """(link name, state, slowdown) of every link not up whose detour costs the job
        more than the tolerance. With no figures given, the job's last reported ones."""
        if step_time_s is None and tokens_per_s is None:
            job = self.table.find(job_id)
            if job is None:
                return []
            step_time_s, tokens_per_s = job.status.progress.step_time_s, job.status.progress.tokens_per_s
        out: list[tuple[str, str, float]] = []
        for w in self.watches.values():
            base = w.jobs.get(job_id)
            if base is None or w.up_since is not None:
                continue
            st0, tps0 = base
            # The step time if both reports carry it (a shrink changes tokens per step, not
            # what a step costs); else the rate, whose ratio is the same for a fixed batch.
            if st0 and step_time_s and step_time_s > 0:
                slow = step_time_s / st0 - 1.0
            elif tps0 and tokens_per_s and tokens_per_s > 0:
                slow = tps0 / tokens_per_s - 1.0
            else:
                continue
            if slow > DEGRADED_SLOWDOWN:
                out.append((w.name, w.word, slow))
        return out

    @staticmethod
    def _reason(slowed: list[tuple[str, str, float]]) -> str:
        links = ", ".join(f"{name} {word}" for name, word, _ in slowed)
        worst = max(s for _, _, s in slowed)
        return (f"{DEGRADED_REASON} {links}, rerouted over a detour; step time +{worst:.0%} against before the fault "
                "(back to normal when repaired)")
