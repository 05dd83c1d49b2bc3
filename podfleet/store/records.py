"""Plain records the store persists and the control plane uses (no SQLAlchemy here).

``spec`` holds what the operator asked for (immutable after create); ``status`` holds
what the control plane derived (state, progress, allocation, timestamps...). Both are
JSON-serialisable dicts so new fields never need a migration; columns that are queried
or constrained (ids, names, state, cluster_id, created_at) are first-class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ClusterStatus:
    """What the control plane derived about a cluster (``ClusterRecord.status``; the store
    keeps it as JSON, ``store.convert``). Written only through the cluster's owner
    (``control.clusterrecord.ClusterRecordOwner``: ``ClusterRuntime`` and
    ``ConnectingCluster``)."""

    reason: str = ""
    deployment: dict[str, Any] | None = None  # DescribeCluster ``deployment`` (state, percent, steps)
    spares: list[int] | None = None  # as chosen at create (None: a record from before they were stored)
    original_spares: list[int] | None = None  # the spares it started with (spare accounting)
    chip_modes: dict[str, Any] | None = None  # the operator's cordons and drains (control.chipmodes)
    fabric_connected: bool | None = None  # False: never connected (not retried at a restart)
    links: dict[str, str] | None = None  # links not up: index -> "down" | "degraded" (set again at a restart)


@dataclass
class ClusterRecord:
    id: str  # "cl-..."
    name: str  # unique among live clusters
    state: str  # ClusterState value (deploying, active, failed, deleting, deleted)
    spec: dict[str, Any]
    status: ClusterStatus = field(default_factory=ClusterStatus)
    created_at: float = 0.0  # unix seconds (UTC)
    updated_at: float = 0.0


@dataclass
class JobRecord:
    id: str  # "job-..."
    cluster_id: str
    state: str  # JobState value
    spec: dict[str, Any]
    status: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class ChipHealthRecord:
    cluster_id: str
    chip: int
    state: str  # ChipState value
    spare: bool
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckpointRecord:
    id: str  # "ckpt-..."
    job_id: str
    step: int
    path: str
    created_at: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class TokenRecord:
    id: str  # "tok-..."
    name: str
    role: str  # admin | operator | viewer
    token_hash: str  # never the token itself
    created_at: float
    revoked: bool = False


@dataclass
class AuditRecord:
    seq: int  # 1, 2, 3 ... gap-free
    time: float
    actor: str  # token id/name, or "anonymous"
    action: str  # operationId, e.g. "CreateTrainiumCluster"
    target: str  # resource id or ""
    result: str  # "allowed" / "denied" / "error:<code>" / "ok"
    detail: dict[str, Any]
    prev_hash: str  # hash of record seq-1 ("0"*64 for the first)
    hash: str  # HMAC-SHA256 (keyed) or SHA-256 over the fields and prev_hash, canonical JSON
    key_id: str | None = None  # the MAC key's id; None: a record from before the chain was keyed


@dataclass
class UserRecord:
    """A person or automation: owns the tokens named after it; its policies decide what
    they may do (``security/policy.py``)."""

    name: str
    policies: list[str]  # built-in policy names attached
    inline: dict[str, Any]  # policy name -> JSON document
    created_at: float
    mfa_secret: str | None = None  # sealed TOTP secret (base64), None: not enrolled
    mfa_last_step: int = 0  # the newest TOTP step accepted (replay guard)
    recovery: list[str] | None = None  # hashes of unused recovery codes
    # Failed second-factor attempts (security/mfa.Attempts): back-off and lockout.
    mfa_failures: int = 0
    recovery_failures: int = 0
    mfa_blocked_until: float = 0.0  # wall-clock seconds
    mfa_locked: bool = False


@dataclass
class RollupRecord:
    """One telemetry rollup bucket of one metric over a cluster's chips or links."""

    cluster_id: str
    scope: str  # "chip" | "link"
    metric: str
    resolution_s: float  # 60 or 3600
    t_start: float  # unix seconds (UTC) of the bucket's start
    avg: list[float]
    min: list[float]
    max: list[float]
    count: int


@dataclass
class JobMetricRecord:
    """One bucket of a job's training figures: steps ``step_first``..``step_last`` seen in
    ``[t_start, t_start + resolution_s)``; ``data`` holds avg/min/max of loss,
    tokens_per_s and step_time_s (``podfleet.control.jobmetrics``)."""

    job_id: str
    resolution_s: float
    t_start: float  # unix seconds (UTC)
    data: dict[str, Any]


@dataclass
class ReportRecord:
    """An archived health report (``podfleet.advisor.reports``): its JSON and its HTML (with
    charts) as generated, and the figures a listing shows. Pruned after the retention."""

    id: str  # "rp-..."
    cluster_id: str
    created_at: float  # unix seconds (UTC)
    period_s: float
    summary: dict[str, Any]
    json_text: str
    html_text: str


@dataclass
class QueueRecord:
    """A cluster queue (``podfleet.scheduler.queues.QueueSpec`` as ``spec``)."""

    id: str  # "q-..."
    cluster_id: str
    name: str
    spec: dict[str, Any]
    created_at: float
    updated_at: float


@dataclass
class ReservationRecord:
    """An advance reservation (``control.reservations``): ``spec`` holds its chips (count
    and ids), window (``start_at``, ``end_at``: unix seconds) and queue."""

    id: str  # "rsv-..."
    cluster_id: str
    name: str
    spec: dict[str, Any]
    created_at: float


@dataclass
class PriorityClassRecord:
    """A named priority (``control.priorities``): its value and whether its jobs preempt."""

    name: str
    value: int
    preemption: str  # "lower" (preempt lower-priority jobs) | "never"
    created_at: float
