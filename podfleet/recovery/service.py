"""Recovery inside the control plane: one orchestrator per cluster whose fabric declares
``RankMoves`` (the twin; a process fabric once it declares it), sharing the
cluster's chip owners with the job manager, which hands it chip faults (the twin job
driver asks ``on_event`` first) and lets it own the jobs it is recovering.

Each step is shown on the job through the job table: state ``RECOVERING``, ``recovery``
(the journal with its sub-steps) and a reason naming the current step; the journal is
saved with the job, so a restarted control plane can see (and close) what was in flight.
Link flows mark the link degraded on the fabric; placement reads link states from the
fabric (``control.scheduling.sync``), so new jobs avoid it. A job whose traffic takes the
detour and runs measurably slower for it (its step time after the fault against before)
is shown degraded, with the link in its reason, until the link is repaired
(``LinkImpact``).

Only fabrics with ``RankMoves`` (a run can be paused, have a rank moved and resume) get an
orchestrator; elsewhere the process driver and the fabric recover jobs.

Built by the composition root (``podfleet.compose``), which also runs ``housekeep`` on the
timeline (journals a previous control plane left open; orchestrators of deleted
clusters) and hands the health service ``drain_chip`` for its predicted failures.

    svc.recoveries(cluster_ref)     journals, oldest first (timeline seconds)
    svc.list_recoveries(cluster_ref)  ListRecoveries: the same as the API shows them (RFC 3339)
    svc.finished_counts()           (kind, state) -> recoveries finished (``/metrics``)
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Collection

from podfleet.control.jobtable import JobTable
from podfleet.control.lifecycle import JobState
from podfleet.control.logbuf import rfc3339
from podfleet.control.placement import Allocation
from podfleet.control.runtime import ClusterRuntime
from podfleet.control.specs import JobSpec
from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import FabricEvent, Introspection
from podfleet.recovery.context import RecoveryFabric
from podfleet.recovery.linkimpact import LinkImpact, positive
from podfleet.recovery.model import JobPolicy, Recovery, RecoveryState, Step, Timings
from podfleet.recovery.orchestrator import RecoveryOrchestrator
from podfleet.wire import JsonObject

_OURS = (JobState.RUNNING, JobState.CHECKPOINTING)
_MOVE_EVENTS = ("job-paused", "rank-moved", "job-resumed")  # RankMoves' events of a flow's calls


_UNIX_FROM = 1e9  # a number at least this is unix seconds (2001 on); below, timeline seconds
_TIMES = ("t_start", "t_end", "detected_t")


# Unix seconds -> timeline seconds, and back (``Timeline.timeline_at`` and ``wall_at``).
Clock = Callable[[float], float]


def _seconds(t: object, timeline_at: Clock) -> float | None:
    """A record's time in timeline seconds: records hold timeline seconds (the
    orchestrator's journals), RFC 3339 or unix seconds (the process driver's)."""
    if isinstance(t, str):
        try:
            return timeline_at(dt.datetime.fromisoformat(t).timestamp())
        except ValueError:
            return None
    if isinstance(t, int | float) and not isinstance(t, bool):
        return timeline_at(float(t)) if t >= _UNIX_FROM else float(t)
    return None


def on_timeline(rec: JsonObject, timeline_at: Clock) -> JsonObject:
    """A recovery record with every time in timeline seconds (what code computes with)."""
    out = {**rec, **{k: _seconds(rec.get(k), timeline_at) for k in _TIMES}}
    out["steps"] = [{**st, "t_start": _seconds(st.get("t_start"), timeline_at),
                     "t_end": _seconds(st.get("t_end"), timeline_at)} for st in rec.get("steps") or ()]
    return out


def shown(rec: JsonObject, wall_at: Clock) -> JsonObject:
    """A recovery record (``on_timeline``'s) as the API shows it: ``t_start``, ``t_end``
    and each step's times in RFC 3339 like every time the API shows, beside them the
    timeline seconds (``t_start_s``, ``t_end_s``) and ``duration_s``."""
    def at(t: float | None) -> str | None:
        return None if t is None else rfc3339(wall_at(t))

    start, end = rec.get("t_start"), rec.get("t_end")
    return {**rec, "t_start": at(start), "t_end": at(end), "t_start_s": start, "t_end_s": end,
            "detected_t": at(rec.get("detected_t")),
            "duration_s": round(end - start, 6) if start is not None and end is not None else None,
            "steps": [{**st, "t_start": at(st.get("t_start")), "t_end": at(st.get("t_end")),
                       "t_start_s": st.get("t_start"), "t_end_s": st.get("t_end")} for st in rec.get("steps") or ()]}


def policy_for(spec: JobSpec, n_chips: int | None = None) -> JobPolicy:
    """A job's recovery policy from its spec: data-parallel degree from ``parallelism``.
    With ``n_chips`` (the chips it runs on now), the replicas it has now: a job shrunk by
    an earlier recovery and relaunched after a restart runs fewer than its spec says, and
    a next shrink must drop one whole replica of ``tp * pp`` chips, not a slice."""
    par = spec.parallelism
    dp = par[2] if isinstance(par, tuple) else 1
    if isinstance(par, tuple) and n_chips:
        group = max(par[0], 1) * max(par[1], 1)
        if n_chips % group == 0:
            dp = min(dp, n_chips // group)
    return JobPolicy(dp=max(dp, 1), on_no_spare="shrink" if dp > 1 else "wait")


class JobListener:
    """An orchestrator's journal, shown on the cluster's jobs through the job table."""

    def __init__(self, table: JobTable, timeline: Timeline, rt: ClusterRuntime,
                 render: Callable[[ClusterRuntime], None], now: Callable[[], float] | None = None) -> None:
        self.table, self.tl, self.rt, self.render = table, timeline, rt, render
        self.now = now or table.now
        self.audited: dict[str, str] = {}  # recovery id -> the last state written to the audit trail

    def _audit(self, rec: Recovery) -> None:
        """Automatic actions are audit records too: a recovery when it starts and ends."""
        if self.audited.get(rec.id) == rec.state.value:
            return
        self.audited[rec.id] = rec.state.value
        self.table.store.append_audit(
            time=self.now(), actor="system:recovery", action="Recovery", target=rec.job_id or rec.target,
            result="ok" if rec.state is not RecoveryState.FAILED else "error:recovery-failed",
            detail={"recovery": rec.id, "kind": rec.kind, "target": rec.target, "state": rec.state.value,
                    "reason": rec.reason, "cluster": self.rt.id})
        if rec.state in (RecoveryState.DONE, RecoveryState.FAILED):
            self.audited.pop(rec.id, None)

    def recovery_changed(self, rec: Recovery) -> None:
        self._audit(rec)
        table = self.table
        job = table.find(rec.job_id)
        if job is None or job.state not in (*_OURS, JobState.RECOVERING):
            return
        step = rec.steps[-1] if rec.steps else None
        reason = f"recovering ({rec.kind}): {step.name}: {step.reason}" if step else rec.reason
        if job.state in _OURS:
            if rec.state in (RecoveryState.RUNNING, RecoveryState.WAITING):
                table.transition(job, JobState.RECOVERING, reason, recovery=rec.to_dict())
            else:  # the closing journal of a recovery that already handed the job back
                table.amend(job, recovery=rec.to_dict(), persist=True)
            return
        table.amend(job, recovery=rec.to_dict(), reason=reason, persist=True)
        if step is not None:
            table.log(job, f"recovery {rec.id}: {step.name}: {step.reason}")

    def job_recovered(self, job_id: str, chips: tuple[int, ...], rec: Recovery) -> None:
        job = self.table.find(job_id)
        if job is None or job.state != JobState.RECOVERING:
            return
        took = (rec.t_end or rec.t_start) - (rec.detected_t or rec.t_start)
        alloc = Allocation(tuple(chips), (len(chips),), f"recovered by {rec.id}")
        fab = self.rt.fabric
        run = fab.run_status(job_id) if isinstance(fab, Introspection) else None
        if run is not None:  # restored from a checkpoint: the shown step goes back with it
            self.table.progress(job, step=run.step)
        self.table.transition(job, JobState.RUNNING, f"recovered from {rec.reason} in {took:.3f} s "
                              f"(state from {rec.restored_from or 'the chip itself'})", allocation=alloc,
                              recovery=rec.to_dict())
        self.render(self.rt)

    def link_changed(self, link: int, state: str, rec: Recovery) -> None:
        # Placement reads the link's state from the fabric at its next cycle.
        self.tl.emit("scheduler-link-notice", cluster_id=self.rt.id, link=link, state=state)


class RecoveryService:
    """Routes chip and link faults of clusters whose fabric declares ``RankMoves`` to their orchestrators."""

    def __init__(self, table: JobTable, timeline: Timeline, render: Callable[[ClusterRuntime], None],
                 resolve: Callable[[str], ClusterRuntime] | None = None, timings: Timings | None = None) -> None:
        self.table, self.tl, self.render = table, timeline, render
        self.timings = timings  # None: ``Timings()``; benchmarks vary it for their sensitivities
        self._resolve = resolve  # a cluster by id or name (the plane's), for the reads by ref
        self.orch: dict[str, RecoveryOrchestrator] = {}
        self.impact: dict[str, LinkImpact] = {}  # cluster id -> jobs slowed by its link faults

    def _impact(self, rt: ClusterRuntime) -> LinkImpact:
        got = self.impact.get(rt.id)
        if got is None or got.rt is not rt:
            got = self.impact[rt.id] = LinkImpact(self.table, rt)
        return got

    @staticmethod
    def supports(rt: ClusterRuntime) -> bool:
        """What the flows call: chip and link states (``Fabric``) and ``RankMoves``
        (pause, move a rank, resume; the run's status and spec)."""
        return isinstance(rt.fabric, RecoveryFabric)

    def for_cluster(self, rt: ClusterRuntime) -> RecoveryOrchestrator | None:
        fab = rt.fabric
        if not isinstance(fab, RecoveryFabric):
            return None
        o = self.orch.get(rt.id)
        if o is None:
            lis = JobListener(self.table, self.tl, rt, self.render)
            o = RecoveryOrchestrator(fab, self.tl, owner=rt.owners, listener=lis, subscribe=False,
                                     spares=tuple(rt.spares), timings=self.timings)
            o.cordoned = set(rt.modes)
            self.orch[rt.id] = o
        return o

    def orchestrator(self, cluster_id: str) -> RecoveryOrchestrator | None:
        """The cluster's orchestrator if one was made (reads only: ``for_cluster`` makes one)."""
        return self.orch.get(cluster_id)

    def forget(self, cluster_id: str) -> None:
        self.orch.pop(cluster_id, None)
        self.impact.pop(cluster_id, None)

    def owns(self, job_id: str) -> bool:
        return any(job_id in o.active for o in self.orch.values())

    def manage_running(self, rt: ClusterRuntime) -> RecoveryOrchestrator | None:
        """Put every job the fabric runs for this cluster under the orchestrator."""
        o = self.for_cluster(rt)
        fab = rt.fabric
        if o is None or not isinstance(fab, Introspection):
            return o
        for job in self.table.on_cluster(rt.id):
            if job.state in _OURS and job.id not in o.policies:
                run = fab.run_status(job.id)
                if run is not None and run.live:
                    o.manage(job.id, policy_for(job.spec, len(run.chips)))
        return o

    def let_go(self, rt: ClusterRuntime, job_id: str) -> None:
        """Stop managing the job, its chips kept as they are in the owner map (a pod-loss
        policy acts on the whole job: ``control.podloss``)."""
        o = self.orch.get(rt.id)
        if o is not None and job_id in o.policies:
            chips = rt.owners.chips_of(job_id)
            o.release(job_id)  # frees the job's chips in the shared owner map: given back below
            rt.owners.assign(job_id, chips)

    def adopt_restored(self, rt: ClusterRuntime, job_id: str) -> None:
        """A job reloaded RECOVERING after a control-plane restart, with the journal of a
        flow the previous plane did not finish: this plane's orchestrator adopts it (the
        flow goes on where the fabric still runs the job, else it deals with the flow's
        chips before the job manager relaunches the job from its checkpoint)."""
        job = self.table.find(job_id)
        journal = job.status.recovery if job is not None else None
        if job is None or job.state != JobState.RECOVERING or not journal \
                or journal.get("state") not in ("running", "waiting") or not journal.get("job_id"):
            return
        o = self.for_cluster(rt)
        if o is None:
            return
        fab = rt.fabric
        run = fab.run_status(job.id) if isinstance(fab, Introspection) else None
        if run is not None and run.live:
            o.adopt(journal, policy_for(job.spec, len(run.chips)))
        else:
            o.adopt_relaunch(journal)

    def on_event(self, rt: ClusterRuntime, ev: FabricEvent) -> bool:
        """Handle a fabric event; True when the orchestrator took the fault over."""
        if ev.kind == "job-started" and ev.job_id is not None:
            o = self.orch.get(rt.id)
            if o is not None:
                o.relaunched(ev.job_id)  # an adopted flow's job runs again: the flow ends
            return False
        if ev.kind == "progress" and ev.job_id is not None:
            o = self.orch.get(rt.id)
            if o is not None:
                o.step_ended(ev.job_id)  # a live move waiting for the step's end goes now
            imp = self.impact.get(rt.id)
            if imp is not None:
                d = ev.detail
                imp.progress(ev.job_id, positive(d.get("step_time_s")), positive(d.get("tokens_per_s")))
            return False  # and the job driver's
        if ev.kind in _MOVE_EVENTS and ev.job_id is not None and self.owns(ev.job_id):
            # The orchestrator's own pause, moves and resume of a job it is recovering: the
            # flow hands the job back once it runs (a process driver would take the job's
            # resume for its own recovery and end the flow's RECOVERING early).
            return True
        if not (ev.kind.startswith(("link-", "chip-")) or ev.kind in ("job-finished", "job-stopped")):
            return False  # checkpoints: the job driver's
        o = self.manage_running(rt)
        if o is None:
            return False
        if ev.kind in ("link-down", "link-degraded") and ev.link is not None:
            # Before the reroute: the job's last report is its rate on the direct path.
            self._impact(rt).link_fault(ev.link, ev.kind.removeprefix("link-"))
        elif ev.kind == "link-up" and ev.link is not None:
            self._impact(rt).link_up(ev.link)
        if ev.kind.startswith("link-") or ev.kind in ("chip-healthy", "job-finished", "job-stopped"):
            o.handle(ev)
            return False
        chip = ev.chip
        if chip is None:
            return False
        job_id = rt.owners.get(chip)
        thermal = ev.kind == "chip-degraded" and str(ev.detail.get("reason", "")).startswith("thermal-runaway")
        if ev.kind != "chip-failed" and not thermal:
            return False
        if job_id is None and ev.kind == "chip-failed" and \
                str(ev.detail.get("cause") or ev.detail.get("reason") or "") == "firmware-fault":
            # A firmware fault on a free chip is reset like one under a job (``ChipSteps.isolate``:
            # isolated, back after the reset); other faults of free chips wait for a repair.
            # The job driver then undoes any placement on it.
            o.handle(ev)
            return False
        if job_id is None or job_id not in o.policies:
            return False  # the job driver isolates free chips and undoes placements
        o.handle(ev)
        return True

    def drain(self, rt: ClusterRuntime, chip: int, reason: str) -> bool:
        """Live-migrate the rank on ``chip`` (the orchestrator's drain flow)."""
        o = self.manage_running(rt)
        job_id = rt.owners.get(chip)
        if o is None or job_id is None or job_id not in o.policies:
            return False
        return o.drain(chip, reason) is not None

    def set_cordoned(self, rt: ClusterRuntime, chips: list[int]) -> None:
        o = self.for_cluster(rt)
        if o is not None:
            o.cordoned = set(chips)

    def set_spares(self, rt: ClusterRuntime, spares: tuple[int, ...]) -> None:
        o = self.for_cluster(rt)
        if o is not None:
            o.spares = frozenset(spares)

    def drain_chip(self, rt: ClusterRuntime, chip: int, reason: str) -> Recovery | None:
        """A predicted failure (the health monitor's alarm): move the work off ``chip`` while
        it still works, where recovery can move a rank (the twin); None elsewhere."""
        o = self.manage_running(rt)
        return o.drain(chip, reason) if o is not None else None

    # --- reads --------------------------------------------------------------------------
    def recoveries(self, ref: str) -> list[JsonObject]:
        """The cluster's recovery journals, oldest first, times in timeline seconds: the
        orchestrator's flows, and on worker fabrics the recoveries the process driver
        recorded on each job (relaunches, and those the fabric made itself), in the same
        shape."""
        rt = self._cluster(ref)
        o = self.for_cluster(rt)
        flows = [] if o is None else [r.to_dict() for r in [*o.done, *o.active.values(), *o.link_active.values()]]
        worker = [on_timeline(dict(r), self.tl.timeline_at) for job in self.table.on_cluster(rt.id, live=False)
                  if job.status.runtime is not None for r in job.status.runtime.recoveries]
        return sorted([*flows, *worker], key=lambda r: (r.get("t_start") is None, r.get("t_start") or 0.0))

    def list_recoveries(self, ref: str) -> list[JsonObject]:
        """ListRecoveries: ``recoveries`` as the API shows them (RFC 3339 times, ``shown``)."""
        return [shown(r, self.tl.wall_at) for r in self.recoveries(ref)]

    def _cluster(self, ref: str) -> ClusterRuntime:
        if self._resolve is None:
            raise RuntimeError("RecoveryService was built without a resolver (compose.build gives it one)")
        return self._resolve(ref)

    def finished_counts(self) -> Counter[tuple[str, str]]:
        """(kind, state) -> recovery flows finished, over every cluster (any thread: copies)."""
        tally: Counter[tuple[str, str]] = Counter()
        for o in list(self.orch.values()):
            tally.update((r.kind, r.state.value) for r in list(o.done))
        return tally

    # --- housekeeping (on the timeline, every health interval: ``compose.build``) -------------
    def housekeep(self, live: Collection[str]) -> None:
        """Forget the orchestrators of clusters no longer ``live``; close stale journals."""
        for cid in [c for c in {*self.orch, *self.impact} if c not in live]:
            self.forget(cid)
        self.close_stale()

    def close_stale(self) -> None:
        """Journals left open by a previous control plane whose job runs again: closed.
        An adopted flow whose job ended before it ran again: failed."""
        for o in list(self.orch.values()):
            for job_id in o.relaunching_jobs():
                adopted = self.table.find(job_id)
                if adopted is None or adopted.ended:
                    o.abandon(job_id, "the job ended before it ran again")
        for job in self.table:
            j = job.status.recovery
            if not j or job.state != JobState.RUNNING or j.get("state") not in ("running", "waiting") \
                    or self.owns(job.id) or any(o.relaunching(job.id) for o in self.orch.values()):
                continue
            journal = Recovery.from_dict(j)
            now = self.tl.now
            journal.steps.append(Step("finished-after-restart", "the control plane restarted during the recovery; "
                                      "the job was relaunched from its checkpoint", now, now))
            journal.state = RecoveryState.DONE
            journal.t_end = now
            self.table.amend(job, recovery=journal.to_dict(), persist=True)
