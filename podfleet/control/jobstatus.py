"""A job as the control plane holds it: its record and its typed status.

``Job`` (id, cluster, state, spec, status) and ``JobStatus`` (progress, allocation,
reason, checkpoint step, plan, timestamps, scheduling, recovery journal, process-fabric
counts), with their JSON forms for the store. Values only: the job table
(``control.jobtable``) is their one writer.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from podfleet.control.lifecycle import TERMINAL, JobState
from podfleet.control.placement import Allocation
from podfleet.control.planning import Plan
from podfleet.control.specs import JobSpec
from podfleet.store.records import JobRecord
from podfleet.wire import JsonObject


@dataclass
class Progress:
    step: int = 0
    steps: int = 0
    loss: float | None = None
    tokens_per_s: float | None = 0.0
    step_time_s: float | None = None  # measured by process fabrics, modelled by the twin

    def to_dict(self) -> JsonObject:
        d: JsonObject = {"step": self.step, "steps": self.steps, "loss": self.loss,
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
    work_split: JsonObject | None = None

    def to_dict(self) -> JsonObject:
        # Only what happened: no "preemptions: 0" on a job never preempted.
        # (Built field by field: ``asdict``'s recursion was a hot spot of view rendering.)
        out: JsonObject = {}
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
    hang_restarts: int = 0  # relaunches after a rank stopped heartbeating (PODFLEET_HANG_RESTARTS)
    recoveries: list[JsonObject] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        return asdict(self)


@dataclass
class JobStatus:
    progress: Progress
    reason: str = ""
    allocation: Allocation | None = None  # chips (rank order), shape, reason, offset, pod...
    checkpoint_step: int = 0  # the newest persisted checkpoint: where a relaunch resumes
    params: float | None = None  # the twin's model size
    plan: Plan | None = None  # the layout (tp, pp, dp, ...) and its predicted figures
    timestamps: dict[str, str] = field(default_factory=dict)  # state -> when it was entered
    scheduling: SchedulingInfo = field(default_factory=SchedulingInfo)
    recovery: JsonObject | None = None  # the recovery journal (podfleet.recovery.model.Recovery)
    runtime: RunCounts | None = None  # process fabrics only
    failed_chip: int | None = None
    # Accounting (``control.accounting``): chip-seconds by kind over closed intervals, when
    # the open one began (unix s), the closed intervals as [start, end, chips] spans (one per
    # run of equal chips: usage over time), and who submitted the job.
    usage: dict[str, float] = field(default_factory=dict)
    usage_from: float | None = None
    usage_spans: list[list[float]] = field(default_factory=list)
    submitted_by: str | None = None
    # Link index -> [step time s, tokens/s] the job ran at before the link went down or
    # degraded (``recovery.linkimpact``), kept while the link is not up: a restarted plane
    # still compares the job's detour step time with its direct-path one.
    link_baselines: dict[str, list[float | None]] = field(default_factory=dict)
    # The lost pod a job waits for (on-pod-loss wait, ``control.podloss``), persisted with
    # the job: a restarted plane still waits for that pod (or the same block on another)
    # instead of moving the lost ranks chip by chip.
    pod_wait: int | None = None

    def to_dict(self) -> JsonObject:
        d: JsonObject = {f.name: getattr(self, f.name) for f in fields(self)}
        d["progress"] = self.progress.to_dict()
        d["scheduling"] = self.scheduling.to_dict()
        d["runtime"] = self.runtime.to_dict() if self.runtime is not None else None
        d["allocation"] = self.allocation.to_dict() if self.allocation is not None else None
        d["plan"] = self.plan.to_dict() if self.plan is not None else None
        d["usage_spans"] = [list(sp) for sp in self.usage_spans]  # a copy: the open run's span still grows
        d["link_baselines"] = {k: list(v) for k, v in self.link_baselines.items()}
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
            allocation=Allocation.from_dict(alloc) if isinstance(alloc := d.get("allocation"), Mapping) else None,
            checkpoint_step=int(d.get("checkpoint_step") or 0),
            params=d.get("params"),
            plan=Plan.from_dict(plan) if isinstance(plan := d.get("plan"), Mapping) else None,
            timestamps=dict(d.get("timestamps") or {}),
            scheduling=SchedulingInfo(**{k: v for k, v in sched.items() if k in known_s}),
            recovery=d.get("recovery"),
            runtime=RunCounts(**{k: v for k, v in runtime.items() if k in known_r})
            if isinstance(runtime, Mapping) else None,
            failed_chip=d.get("failed_chip"),
            usage={str(k): float(v) for k, v in (d.get("usage") or {}).items()},
            usage_from=d.get("usage_from"),
            usage_spans=[[float(a), float(b), float(c)] for a, b, c in d.get("usage_spans") or []],
            submitted_by=d.get("submitted_by"),
            link_baselines={str(k): [None if x is None else float(x) for x in v][:2]
                            for k, v in (d.get("link_baselines") or {}).items()},
            pod_wait=None if (pod := d.get("pod_wait")) is None else int(pod),
        )


@dataclass
class Job:
    """One training job as the control plane holds it (the table is its only writer)."""

    id: str
    cluster_id: str
    state: JobState
    spec: JobSpec
    status: JobStatus
    created_at: float = 0.0
    updated_at: float = 0.0

    @property
    def chips(self) -> tuple[int, ...]:
        """Its allocation's chips in rank order (empty while it waits)."""
        alloc = self.status.allocation
        return alloc.chips if alloc is not None else ()

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL

    def record(self) -> JobRecord:
        return JobRecord(self.id, self.cluster_id, self.state.value, self.spec.to_dict(), self.status.to_dict(),
                         self.created_at, self.updated_at)

    @classmethod
    def from_record(cls, rec: JobRecord, spec: JobSpec | None = None) -> Job:
        """``spec``: the record's spec already parsed (a follower's warm-up, ``control.warm``)."""
        return cls(rec.id, rec.cluster_id, JobState(rec.state), spec if spec is not None else JobSpec.from_dict(rec.spec),
                   JobStatus.from_dict(rec.status), rec.created_at, rec.updated_at)
