"""The job table: the one writer of job records, their views and their logs.

Everything that changes a job goes through this small interface (engine thread):

    transition(job, dst, reason, ...)   a state change: checked, persisted, shown, logged
    end(job, dst, reason)               a terminal transition; ``on_end`` listeners first
    progress(job, ...)                  step / loss / throughput (memory only)
    record_checkpoint(job, step, ...)   the one writer of ``CheckpointRecord``s
    save(job) / refresh(job) / log(job, message)

Reads (any thread) go through ``describe`` / ``list`` / ``job_logs``: views are
replaced whole on every change, never mutated in place.

A job's status is the typed ``JobStatus`` below; the store keeps it as JSON
(``JobRecord.status``) so a new field never needs a migration.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Final, Literal

from podfleet.control.accounting import accrue
from podfleet.control.ids import new_id
from podfleet.control.lifecycle import TERMINAL, JobState, check_job_transition
from podfleet.control.logbuf import LogBuffer, rfc3339
from podfleet.control.placement import Allocation
from podfleet.errors import NotFoundError
from podfleet.store.protocol import StoreProtocol
from podfleet.store.records import CheckpointRecord, JobRecord


@dataclass
class Progress:
    step: int = 0
    steps: int = 0
    loss: float | None = None
    tokens_per_s: float | None = 0.0
    step_time_s: float | None = None  # measured by process fabrics, modelled by the twin

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"step": self.step, "steps": self.steps, "loss": self.loss,
                             "tokens_per_s": self.tokens_per_s}
        if self.step_time_s is not None:
            d["step_time_s"] = self.step_time_s
        return d


@dataclass
class SchedulingInfo:
    """What the scheduler and balancer learned about a job (DescribeTrainingJob ``scheduling``)."""

    queue_wait_s: float | None = None
    team: str | None = None
    preemptions: int = 0
    rebalances: int = 0
    last_rebalance: dict[str, str] | None = None
    balance_degree: float | None = None
    # The split the fabric was given (Rebalanceable): per-rank shares, ring order, applied or not.
    work_split: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        # Only what happened: no "preemptions: 0" on a job never preempted.
        # (Built field by field: ``asdict``'s recursion was a hot spot of view rendering.)
        out: dict[str, Any] = {}
        d = self.__dict__  # the fields by name: a dict lookup, not ``getattr``
        for name in _SCHEDULING_FIELDS:
            v = d[name]
            if v is None or (name in _COUNTERS and v == 0):
                continue
            out[name] = _plain_copy(v) if isinstance(v, dict) else v
        return out


_SCHEDULING_FIELDS = tuple(f.name for f in fields(SchedulingInfo))
_COUNTERS = frozenset(("preemptions", "rebalances"))
_SCALARS = frozenset((int, float, str, bool, type(None)))


def _plain_copy(v: Any) -> Any:
    """``copy.deepcopy`` of JSON-like data (plain dicts and lists of scalars: the balancer's
    work split is re-rendered at nearly every tick) without its memo and dispatch, which
    cost most of a view's rendering; anything else still goes through ``deepcopy``."""
    t = type(v)
    if t is dict:
        return {k: x if type(x) in _SCALARS else _plain_copy(x) for k, x in v.items()}
    if t is list:
        return list(v) if _SCALARS.issuperset(map(type, v)) else [_plain_copy(x) for x in v]
    if t in _SCALARS:
        return v
    return copy.deepcopy(v)


@dataclass
class RunCounts:
    """A process fabric's attempts and failures for the job (DescribeTrainingJob ``runtime``)."""

    attempt: int = 0
    infra_failures: int = 0
    user_failures: int = 0
    max_retries: int = 0
    launches: int = 0
    recoveries: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class JobStatus:
    progress: Progress
    reason: str = ""
    allocation: dict[str, Any] | None = None  # chips (rank order), shape, reason, offset, pod...
    checkpoint_step: int = 0  # the newest persisted checkpoint: where a relaunch resumes
    params: float | None = None  # the twin's model size
    plan: dict[str, Any] | None = None  # the layout (tp, pp, dp, ...) and its predicted figures
    timestamps: dict[str, str] = field(default_factory=dict)  # state -> when it was entered
    scheduling: SchedulingInfo = field(default_factory=SchedulingInfo)
    recovery: dict[str, Any] | None = None  # the recovery journal (podfleet.recovery.model.Recovery)
    runtime: RunCounts | None = None  # process fabrics only
    failed_chip: int | None = None
    # Accounting (``control.accounting``): chip-seconds by kind over closed intervals, when
    # the open one began (unix s), and who submitted the job.
    usage: dict[str, float] = field(default_factory=dict)
    usage_from: float | None = None
    submitted_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        d["progress"] = self.progress.to_dict()
        d["scheduling"] = self.scheduling.to_dict()
        d["runtime"] = self.runtime.to_dict() if self.runtime is not None else None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobStatus:
        prog = dict(d.get("progress") or {})
        known_p = {f.name for f in fields(Progress)}
        sched = dict(d.get("scheduling") or {})
        known_s = {f.name for f in fields(SchedulingInfo)}
        runtime = d.get("runtime")
        known_r = {f.name for f in fields(RunCounts)}
        return cls(
            progress=Progress(**{k: v for k, v in prog.items() if k in known_p}),
            reason=str(d.get("reason") or ""),
            allocation=d.get("allocation"),
            checkpoint_step=int(d.get("checkpoint_step") or 0),
            params=d.get("params"),
            plan=d.get("plan"),
            timestamps=dict(d.get("timestamps") or {}),
            scheduling=SchedulingInfo(**{k: v for k, v in sched.items() if k in known_s}),
            recovery=d.get("recovery"),
            runtime=RunCounts(**{k: v for k, v in runtime.items() if k in known_r})
            if isinstance(runtime, Mapping) else None,
            failed_chip=d.get("failed_chip"),
            usage={str(k): float(v) for k, v in (d.get("usage") or {}).items()},
            usage_from=d.get("usage_from"),
            submitted_by=d.get("submitted_by"),
        )


@dataclass
class Job:
    """One training job as the control plane holds it (the table is its only writer)."""

    id: str
    cluster_id: str
    state: JobState
    spec: dict[str, Any]
    status: JobStatus
    created_at: float = 0.0
    updated_at: float = 0.0

    @property
    def chips(self) -> tuple[int, ...]:
        """Its allocation's chips in rank order (empty while it waits)."""
        return tuple(int(c) for c in (self.status.allocation or {}).get("chips", ()))

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL

    def record(self) -> JobRecord:
        return JobRecord(self.id, self.cluster_id, self.state.value, self.spec, self.status.to_dict(),
                         self.created_at, self.updated_at)

    @classmethod
    def from_record(cls, rec: JobRecord) -> Job:
        return cls(rec.id, rec.cluster_id, JobState(rec.state), dict(rec.spec), JobStatus.from_dict(rec.status),
                   rec.created_at, rec.updated_at)


class _Keep(Enum):
    KEEP = "keep"


_KEEP: Final = _Keep.KEEP  # transition(...): leave this status field as it is


class JobTable:
    def __init__(self, store: StoreProtocol, now: Callable[[], float]) -> None:
        self.store = store
        self.now = now
        self._jobs: dict[str, Job] = {}
        self._views: dict[str, dict[str, Any]] = {}
        self._logs: dict[str, LogBuffer] = {}
        self._waiting: dict[str, dict[str, None]] = {}  # cluster id -> PENDING / RECOVERING job ids
        self._on_end: list[Callable[[Job], None]] = []
        self._on_checkpoint: list[Callable[[Job, int], None]] = []

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
                   allocation: Allocation | dict[str, Any] | Literal[_Keep.KEEP] | None = _KEEP,
                   recovery: dict[str, Any] | Literal[_Keep.KEEP] | None = _KEEP) -> None:
        """Change state (enforced transitions), persist before anyone can see it, log it."""
        check_job_transition(job.state, dst)
        now = self.now()
        st = job.status
        # Chip-seconds of the state it leaves (``control.accounting``), before anything changes.
        if st.usage_from is not None:
            p = st.progress
            redone = (max(0, p.step - st.checkpoint_step) * p.step_time_s) if p.step_time_s else 0.0
            accrue(st.usage, job.state, dst, len(job.chips), now - st.usage_from, redone)
        st.usage_from = now
        job.state = dst
        self._index(job)
        job.updated_at = now
        st.reason = reason
        st.timestamps = {**st.timestamps, dst.value: rfc3339(now)}
        if allocation is not _KEEP:
            st.allocation = allocation.to_dict() if isinstance(allocation, Allocation) else allocation
        if recovery is not _KEEP:
            st.recovery = recovery
        self.save(job)
        self.log(job, f"{dst.value}: {reason}")

    def end(self, job: Job, dst: JobState, reason: str) -> None:
        for fn in self._on_end:
            fn(job)
        self.transition(job, dst, reason)
        self._logs[job.id].closed = True

    def progress(self, job: Job, *, step: int | None = None, loss: float | None = None,
                 tokens_per_s: float | None = None, step_time_s: float | None = None) -> None:
        """Memory only: progress between checkpoints is not persisted (a restart resumes
        from the last checkpoint, as a real job would)."""
        p = job.status.progress
        if step is not None:
            p.step = int(step)
        if loss is not None:
            p.loss = float(loss)
        if tokens_per_s is not None:
            p.tokens_per_s = float(tokens_per_s)
        if step_time_s is not None:
            p.step_time_s = float(step_time_s)
        self.refresh(job)

    def record_checkpoint(self, job: Job, step: int, path: str, detail: Mapping[str, Any] | None = None) -> None:
        """Persist a checkpoint of ``job`` at ``step`` (the only place that writes one)."""
        plain = {k: v for k, v in (detail or {}).items() if isinstance(v, int | float | str)}
        self.store.add_checkpoint(CheckpointRecord(new_id("ckpt"), job.id, int(step), path, self.now(), plain))
        job.status.checkpoint_step = max(int(step), job.status.checkpoint_step)
        for fn in self._on_checkpoint:
            fn(job, int(step))

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

    def save(self, job: Job) -> None:
        self.store.save_job(job.record())
        self.refresh(job)

    def refresh(self, job: Job) -> None:
        """Re-render the job's view after a memory-only change."""
        self._views[job.id] = self.view_of(job)

    def refresh_scheduling(self, job: Job) -> None:
        """Re-render only the ``scheduling`` part of the job's view, after a change to
        ``status.scheduling`` alone (the balancer's degree moves at nearly every tick): the
        rest of the view is the last one's (every other change re-rendered it already).
        A new view object all the same: views are replaced, never mutated."""
        view = self._views.get(job.id)
        if view is None:
            self.refresh(job)
            return
        self._views[job.id] = {**view, "scheduling": job.status.scheduling.to_dict()}

    def log(self, job: Job, message: str) -> None:
        self._logs.setdefault(job.id, LogBuffer()).append(self.now(), message)

    def close_log(self, job: Job) -> None:
        self._logs[job.id].closed = True

    # --- reads (any thread) ----------------------------------------------------------------
    @property
    def views(self) -> Mapping[str, dict[str, Any]]:
        return self._views

    def describe(self, job_id: str) -> dict[str, Any]:
        view = self._views.get(job_id)
        if view is None:
            raise NotFoundError(f"job {job_id!r} not found", field="job")
        return view

    def list(self, *, cluster_id: str | None = None, state: str | None = None,
             next_token: str | None = None, max_results: int = 100) -> tuple[list[dict[str, Any]], str | None]:
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
    def view_of(job: Job) -> dict[str, Any]:
        """DescribeTrainingJob's object for ``job``."""
        st = job.status
        return {
            "id": job.id, "cluster_id": job.cluster_id, "state": job.state.value, **job.spec,
            "progress": st.progress.to_dict(), "allocation": st.allocation,
            "reason": st.reason, "checkpoint_step": st.checkpoint_step,
            "plan": st.plan,
            "recovery": st.recovery,
            "runtime": st.runtime.to_dict() if st.runtime is not None else None,
            "scheduling": st.scheduling.to_dict(),
            "usage": {k: round(v, 3) for k, v in st.usage.items()},  # chip-seconds, closed intervals
            "submitted_by": st.submitted_by,
            "timestamps": dict(st.timestamps),
            "created_at": rfc3339(job.created_at), "updated_at": rfc3339(job.updated_at),
        }
