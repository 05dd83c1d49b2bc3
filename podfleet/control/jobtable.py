"""The job table: the one writer of job records, their views and their logs.

Everything that changes a job goes through this small interface (engine thread):

    transition(job, dst, reason, ...)   a state change: checked, persisted, shown, logged
    end(job, dst, reason)               a terminal transition; ``on_end`` listeners first
    progress(job, ...)                  step / loss / throughput (memory only)
    record_checkpoint(job, step, ...)   the one writer of ``CheckpointRecord``s
    amend(job, ...)                     status fields without a transition (reason,
                                        allocation, plan, checkpoint step, recovery ...)
    scheduled(job, ...)                 ``status.scheduling`` (waits, preemptions, balance)
    run_counts(job) / count_run(job, ...) / add_run_recovery(job, rec)   ``status.runtime``
    save(job) / refresh(job) / log(job, message)

No other module writes ``job.status`` (``tests/test_architecture.py`` checks it).

Reads (any thread) go through ``describe`` / ``list`` / ``job_logs``: views are
replaced whole on every change, never mutated in place.

A job's status is the typed ``JobStatus`` (``control.jobstatus``); the store keeps it as JSON
(``JobRecord.status``) so a new field never needs a migration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from typing import Any, Final, Literal

from podfleet.control.accounting import accrue, add_span
from podfleet.control.ids import new_id
from podfleet.control.jobstatus import Job, JobStatus, Progress, RunCounts, SchedulingInfo
from podfleet.control.lifecycle import JobState, check_job_transition
from podfleet.control.logbuf import LogBuffer, rfc3339
from podfleet.control.placement import Allocation
from podfleet.control.planning import Plan
from podfleet.errors import NotFoundError
from podfleet.store.protocol import StoreProtocol
from podfleet.store.records import CheckpointRecord
from podfleet.wire import JsonObject

# Job and its status are values of their own module; imported from here as well.
__all__ = ["Job", "JobStatus", "JobTable", "Progress", "RunCounts", "SchedulingInfo"]


class _Keep(Enum):
    KEEP = "keep"


_KEEP: Final = _Keep.KEEP  # transition(...): leave this status field as it is


class JobTable:
    def __init__(self, store: StoreProtocol, now: Callable[[], float]) -> None:
        self.store = store
        self.now = now
        self._jobs: dict[str, Job] = {}
        self._views: dict[str, JsonObject] = {}
        self._logs: dict[str, LogBuffer] = {}
        self._waiting: dict[str, dict[str, None]] = {}  # cluster id -> PENDING / RECOVERING job ids
        self._on_end: list[Callable[[Job], None]] = []
        self._on_checkpoint: list[Callable[[Job, int], None]] = []
        # Inside ``views_deferred``: the ids whose view is to be rendered when it ends.
        self._deferred: set[str] | None = None

    # --- listeners (declared at composition) -----------------------------------------------
    def on_end(self, fn: Callable[[Job], None]) -> None:
        """``fn(job)`` runs before a job's terminal transition: stop its workers, free its chips."""
        self._on_end.append(fn)

    def on_checkpoint(self, fn: Callable[[Job, int], None]) -> None:
        """``fn(job, step)`` runs after a checkpoint is persisted (the scheduler's resume step)."""
        self._on_checkpoint.append(fn)

    # --- lookups (engine thread) -------------------------------------------------------------
    def find(self, job_id: str | None) -> Job | None:
        return self._jobs.get(job_id) if job_id else None

    def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id!r} not found", field="job")
        return job

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._jobs.values()))

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def on_cluster(self, cluster_id: str, *, live: bool = True) -> list[Job]:
        return [j for j in list(self._jobs.values()) if j.cluster_id == cluster_id and not (live and j.ended)]

    def waiting(self, cluster_id: str) -> list[Job]:
        """PENDING and RECOVERING jobs of a cluster."""
        return [self._jobs[i] for i in self._waiting.get(cluster_id, {})]

    # --- writes (engine thread) --------------------------------------------------------------
    def add(self, job: Job) -> None:
        self._jobs[job.id] = job
        self._index(job)
        self._logs.setdefault(job.id, LogBuffer())
        self.refresh(job)

    def transition(self, job: Job, dst: JobState, reason: str, *,
                   allocation: Allocation | Literal[_Keep.KEEP] | None = _KEEP,
                   recovery: JsonObject | Literal[_Keep.KEEP] | None = _KEEP) -> None:
        """Change state (enforced transitions), persist before anyone can see it, log it."""
        check_job_transition(job.state, dst)
        now = self.now()
        st = job.status
        # Chip-seconds of the state it leaves (``control.accounting``), before anything changes.
        if st.usage_from is not None:
            p = st.progress
            redone = (max(0, p.step - st.checkpoint_step) * p.step_time_s) if p.step_time_s else 0.0
            accrue(st.usage, job.state, dst, len(job.chips), now - st.usage_from, redone)
            add_span(st.usage_spans, job.state, st.usage_from, now, len(job.chips))
        st.usage_from = now
        job.state = dst
        self._index(job)
        job.updated_at = now
        st.reason = reason
        st.timestamps = {**st.timestamps, dst.value: rfc3339(now)}
        if allocation is not _KEEP:
            st.allocation = allocation
        if recovery is not _KEEP:
            st.recovery = recovery
        self.save(job)
        self.log(job, f"{dst.value}: {reason}")

    def end(self, job: Job, dst: JobState, reason: str) -> None:
        for fn in self._on_end:
            fn(job)
        job.status.pod_wait = None  # an ended job waits for no pod
        self.transition(job, dst, reason)
        self._logs[job.id].closed = True

    def progress(self, job: Job, *, step: int | None = None, loss: float | None = None,
                 tokens_per_s: float | None = None, step_time_s: float | None = None, view: bool = True) -> None:
        """Memory only: progress between checkpoints is not persisted (a restart resumes
        from the last checkpoint, as a real job would). ``view``: False when a transition
        follows at once (it re-renders the view)."""
        p = job.status.progress
        if step is not None:
            p.step = int(step)
        if loss is not None:
            p.loss = float(loss)
        if tokens_per_s is not None:
            p.tokens_per_s = float(tokens_per_s)
        if step_time_s is not None:
            p.step_time_s = float(step_time_s)
        if view:
            self.refresh(job)

    def record_checkpoint(self, job: Job, step: int, path: str, detail: Mapping[str, Any] | None = None) -> None:
        """Persist a checkpoint of ``job`` at ``step`` (the only place that writes one)."""
        plain = {k: v for k, v in (detail or {}).items() if isinstance(v, int | float | str)}
        self.store.add_checkpoint(CheckpointRecord(new_id("ckpt"), job.id, int(step), path, self.now(), plain))
        job.status.checkpoint_step = max(int(step), job.status.checkpoint_step)
        for fn in self._on_checkpoint:
            fn(job, int(step))

    def amend(self, job: Job, *, reason: str | Literal[_Keep.KEEP] = _KEEP,
              allocation: Allocation | Literal[_Keep.KEEP] | None = _KEEP,
              plan: Plan | Literal[_Keep.KEEP] | None = _KEEP,
              recovery: JsonObject | Literal[_Keep.KEEP] | None = _KEEP,
              failed_chip: int | Literal[_Keep.KEEP] | None = _KEEP,
              pod_wait: int | Literal[_Keep.KEEP] | None = _KEEP,
              checkpoint_step: int | None = None, persist: bool = False, view: bool = True) -> None:
        """Status fields without a transition (``_KEEP``: left as they are). The newest
        checkpoint step only grows. ``persist``: saved now; else memory only, the view
        re-rendered unless ``view`` is False (a transition follows at once)."""
        st = job.status
        given = {"reason": reason, "allocation": allocation, "plan": plan, "recovery": recovery,
                 "failed_chip": failed_chip, "pod_wait": pod_wait}
        for name, value in given.items():  # typed by the signature; each a JobStatus field
            if value is not _KEEP:
                setattr(st, name, value)
        if checkpoint_step is not None:
            st.checkpoint_step = max(st.checkpoint_step, int(checkpoint_step))
        if persist:
            self.save(job)
        elif view:
            self.refresh(job)

    def scheduled(self, job: Job, *, queue_wait_s: float | None = None, team: str | None = None,
                  preempted: bool = False, rebalance: tuple[str, str] | None = None,
                  balance_degree: float | None = None,
                  work_split: dict[str, object] | Literal[_Keep.KEEP] | None = _KEEP,
                  view: Literal["whole", "scheduling", "none"] = "whole") -> None:
        """``status.scheduling``: the queue wait, the team, one preemption more, one
        rebalance (action, reason) more, the load-balance degree, the work split. ``view``:
        re-render the whole view, only its ``scheduling`` part, or nothing yet (a
        transition follows)."""
        s = job.status.scheduling
        if queue_wait_s is not None:
            s.queue_wait_s = queue_wait_s
        if team is not None:
            s.team = team
        if preempted:
            s.preemptions += 1
        if rebalance is not None:
            s.rebalances += 1
            s.last_rebalance = {"action": rebalance[0], "reason": rebalance[1]}
        if balance_degree is not None:
            s.balance_degree = balance_degree
        if work_split is not _KEEP:
            s.work_split = work_split
        if view == "whole":
            self.refresh(job)
        elif view == "scheduling":
            self.refresh_scheduling(job)

    def run_counts(self, job: Job) -> RunCounts:
        """A process fabric's attempts and failures for the job (made on first use). Read
        it; change it through ``count_run`` and ``add_run_recovery``."""
        if job.status.runtime is None:
            job.status.runtime = RunCounts(max_retries=job.spec.max_retries)
        return job.status.runtime

    def count_run(self, job: Job, *, launches: int = 0, infra_failures: int = 0, user_failures: int = 0,
                  hang_restarts: int = 0, at_least: RunCounts | None = None) -> RunCounts:
        """Add to the job's run counts; ``at_least``: what the fabric counted itself (each
        count is then the larger of the two, ``max_retries`` the fabric's when it says).
        Memory only: persisted with the job's next save."""
        c = self.run_counts(job)
        c.launches += launches
        c.infra_failures += infra_failures
        c.user_failures += user_failures
        c.hang_restarts += hang_restarts
        if at_least is not None:
            c.attempt = max(c.attempt, at_least.attempt)
            c.infra_failures = max(c.infra_failures, at_least.infra_failures)
            c.user_failures = max(c.user_failures, at_least.user_failures)
            c.max_retries = at_least.max_retries or c.max_retries
        return c

    def add_run_recovery(self, job: Job, rec: JsonObject) -> None:
        """One closed recovery of a process fabric's job (``runtime.recoveries``; memory only)."""
        self.run_counts(job).recoveries.append(rec)

    def set_reason(self, job: Job, reason: str, *, persist: bool = True, log: bool = True) -> None:
        """A new reason without a transition (waiting for chips, a recovery step)."""
        if job.status.reason == reason:
            return
        job.status.reason = reason
        if persist:
            self.save(job)
        else:
            self.refresh(job)
        if log:
            self.log(job, reason)

    def set_link_baseline(self, job: Job, link: int, base: tuple[float | None, float | None] | None) -> None:
        """The job's (step time, tokens/s) from before link ``link`` went down, or None
        once it is up again; persisted now (a restart may come before the next save)."""
        key, bl = str(link), job.status.link_baselines
        if base is None:
            if bl.pop(key, None) is None:
                return
        elif bl.get(key) == list(base):
            return
        else:
            bl[key] = list(base)
        self.save(job)

    def save(self, job: Job) -> None:
        self.store.save_job(job.record())
        self.refresh(job)

    def refresh(self, job: Job) -> None:
        """Re-render the job's view after a memory-only change."""
        if self._deferred is not None:
            self._deferred.add(job.id)
            return
        self._views[job.id] = self.view_of(job)

    @contextmanager
    def views_deferred(self) -> Iterator[None]:
        """Render each view changed inside once, when the block ends. A reload (a restart,
        a new leader's takeover) adds, amends and moves every job before anything reads
        them: rendered at each of those steps, 800 jobs took a third of the reload."""
        if self._deferred is not None:
            yield  # nested: the outer block renders
            return
        self._deferred = set()
        try:
            yield
        finally:
            dirty, self._deferred = self._deferred, None
            for job_id in sorted(dirty):
                job = self._jobs.get(job_id)
                if job is not None:
                    self._views[job_id] = self.view_of(job)

    def refresh_scheduling(self, job: Job) -> None:
        """Re-render only the ``scheduling`` part of the job's view, after a change to
        ``status.scheduling`` alone (the balancer's degree moves at nearly every tick): the
        rest of the view is the last one's (every other change re-rendered it already).
        A new view object all the same: views are replaced, never mutated."""
        view = self._views.get(job.id)
        if view is None or self._deferred is not None:
            self.refresh(job)
            return
        self._views[job.id] = {**view, "scheduling": job.status.scheduling.to_dict()}

    def log(self, job: Job, message: str) -> None:
        self._logs.setdefault(job.id, LogBuffer()).append(self.now(), message)

    def close_log(self, job: Job) -> None:
        self._logs[job.id].closed = True

    # --- reads (any thread) ----------------------------------------------------------------
    @property
    def views(self) -> Mapping[str, JsonObject]:
        return self._views

    def describe(self, job_id: str) -> JsonObject:
        view = self._views.get(job_id)
        if view is None:
            raise NotFoundError(f"job {job_id!r} not found", field="job")
        return view

    def list(self, *, cluster_id: str | None = None, state: str | None = None,
             next_token: str | None = None, max_results: int = 100) -> tuple[list[JsonObject], str | None]:
        views = self._views
        ids = sorted(
            i for i, v in list(views.items())
            if (cluster_id is None or v["cluster_id"] == cluster_id)
            and (state is None or v["state"] == state) and (next_token is None or i > next_token)
        )
        page = ids[:max_results]
        return [views[i] for i in page], (page[-1] if len(ids) > max_results else None)

    def job_logs(self, job_id: str) -> LogBuffer:
        self.describe(job_id)
        return self._logs[job_id]

    # --- internals -----------------------------------------------------------------------------
    def _index(self, job: Job) -> None:
        ids = self._waiting.setdefault(job.cluster_id, {})
        if job.state in (JobState.PENDING, JobState.RECOVERING):
            ids[job.id] = None
        else:
            ids.pop(job.id, None)

    @staticmethod
    def view_of(job: Job) -> JsonObject:
        """DescribeTrainingJob's object for ``job``."""
        st = job.status
        return {
            "id": job.id, "cluster_id": job.cluster_id, "state": job.state.value, **job.spec.view,
            "progress": st.progress.to_dict(),
            "allocation": st.allocation.to_dict() if st.allocation is not None else None,
            "reason": st.reason, "checkpoint_step": st.checkpoint_step,
            "plan": st.plan.to_dict() if st.plan is not None else None,
            "recovery": st.recovery,
            "runtime": st.runtime.to_dict() if st.runtime is not None else None,
            "scheduling": st.scheduling.to_dict(),
            "usage": {k: round(v, 3) for k, v in st.usage.items()},  # chip-seconds, closed intervals
            "submitted_by": st.submitted_by,
            "timestamps": dict(st.timestamps),
            "created_at": rfc3339(job.created_at), "updated_at": rfc3339(job.updated_at),
        }
