"""Replies for health (alerts, telemetry, recoveries, firmware, maintenance), operations
(verify, diagnose, advise, reports, guides) and the administrative routes (users, plans,
deletes, keys, code)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from podfleet.sdk.models.reply import Envelope, Reply
from podfleet.sdk.models.tenancy import PriorityClass

# --- health: alerts, telemetry, recoveries, firmware; maintenance ------------------------------


class Telemetry(Envelope):
    cluster_id: str
    scope: str
    metric: str
    target: int | None
    range: str
    resolution_s: float | None
    t: list[float]
    avg: list[float | None]
    min: list[float | None]
    max: list[float | None]


class RecoveryList(Envelope):
    recoveries: list[dict[str, Any]]


class FirmwareRollout(Reply):
    id: str
    cluster_id: str
    version: str
    state: str
    progress: float


class FirmwareRolloutList(Envelope):
    rollouts: list[FirmwareRollout]
    unavailable: str | None = Field(None, description="why this cluster can have no rollouts (its fabric cannot "
                                    "update firmware online); null where it can")


class MaintenanceRollout(Reply):
    id: str
    cluster_id: str
    state: str
    progress: float


class MaintenanceList(Envelope):
    rollouts: list[MaintenanceRollout]
    unavailable: str | None = Field(None, description="why the cluster's fabric has no maintenance rollouts "
                                    "(it cannot run commands on its hosts); null where it can")


# --- operations: verify, diagnose, advise, reports, the knowledge base -------------------------
class Verification(Reply):
    cluster_id: str
    passed: bool
    status: str
    checks: list[dict[str, Any]]


class Diagnosis(Reply):
    cluster_id: str
    healthy: bool
    findings: list[dict[str, Any]]


class Recommendations(Envelope):
    cluster_id: str
    recommendations: list[dict[str, Any]]
    candidates: int
    min_gain: float
    horizon_s: float


class ReportList(Envelope):
    cluster_id: str
    reports: list[dict[str, Any]]


class GuideList(Envelope):
    guides: list[dict[str, str]]


class Guide(Envelope):
    topic: str
    title: str
    text: str


# --- the replies that were open objects: users, plans, deletes, keys, code, alerts, ... --------
# Each route declares its model with ``response_model_exclude_unset``: a field is sent only
# where the engine's reply holds it, so the JSON is what the route answered before it had a
# model (no nulls added for keys it leaves out), in the same key order.
class User(Reply):
    name: str
    policies: list[str] = Field(..., description="built-in policies attached")
    inline_policies: list[str] = Field(..., description="the names of its inline policy documents")
    mfa: bool = Field(..., description="a TOTP secret is enrolled")
    recovery_codes_left: int
    mfa_locked: bool
    mfa_failures: int
    recovery_failures: int
    created_at: str


class UserList(Envelope):
    users: list[User]


class MfaEnrolment(User):
    """EnableMfa: shown in this reply only."""

    otpauth_uri: str
    recovery_codes: list[str]


class UnlockedUser(User):
    was_locked: bool


class PlanCandidate(Reply):
    """One layout the planner estimated (perf.Plan's fields and its StepEstimate)."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    num_micro_batches: int
    recompute: str
    zero_stage: int
    interleave: int
    sequence_parallel: bool
    global_batch: int
    step_time_s: float
    tokens_per_s: float
    tflops_per_chip: float
    mfu: float
    hfu: float
    memory_per_chip_bytes: int
    hbm_bytes: int
    fits: bool
    breakdown_s: dict[str, float] = Field(..., description="compute, tp_comm, pp_comm, bubble, dp_comm_exposed, "
                                          "optimizer, microbatch_overhead, grad_codec")
    memory_bytes: dict[str, float] = Field(..., description="params, grads, optimizer, activations, reserved, total")


class PlanRejection(Reply):
    tp: int
    pp: int
    dp: int
    reason: str
    memory_per_chip_bytes: int | None = Field(None, description="the least memory any variant needed")


class ParallelismPlan(PlanCandidate):
    """PlanParallelism: the best candidate's fields, then the search's."""

    model: str
    chips: int
    topology: str
    chip_type: str
    seq_len: int
    evaluated: int = Field(..., description="plans whose step time was estimated")
    grad_compression: str
    uncompressed_step_time_s: float | None = Field(None, description="with grad_compression only")
    compression_speedup: float | None = None
    dp_comm_exposed_uncompressed_s: float | None = None
    grad_codec_s: float | None = None
    candidates: list[PlanCandidate] = Field(..., description="fitting plans, fastest first (5 at most)")
    rejected: list[PlanRejection]


class DeletedQueue(Reply):
    name: str
    nominal: int | None = None
    cohort: str | None = None
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    weight: float | None = None
    reclaim: str | None = None
    id: str
    cluster_id: str
    state: Literal["deleted"]


class DeletedPriorityClass(PriorityClass):
    created_at: float | None = None
    state: Literal["deleted"]


class KeyRotation(Reply):
    cluster: str
    key: str
    version: str = Field(..., description="the version new checkpoints use (v1, v2, ...)")
    versions: list[str]
    retired: list[str]


class CodeArtifact(Reply):
    digest: str = Field(..., description="hex SHA-256 of the tarball")
    bytes: int
    files: int
    unpacked_bytes: int
    created: bool = Field(..., description="false: the same content was pushed before")
    ref: str = Field(..., description="code:<sha256>/: an entrypoint is this plus a path in it")


class Alert(Reply):
    id: str
    cluster_id: str
    target: str = Field(..., description="chip:12, link:3-7, job:job-...")
    rule: str
    severity: str
    message: str
    state: str = Field(..., description="firing, acknowledged or resolved")
    first_seen: float
    last_seen: float
    count: int
    value: float | None = None
    acknowledged_by: str | None = None
    resolved_at: str | None = None
    detail: dict[str, Any] = {}
    jobs: list[str] = []
    first_seen_at: str | None = None
    last_seen_at: str | None = None
    resolved_t: float | None = None


class AlertList(Envelope):
    alerts: list[Alert]


class AppliedRecommendation(Reply):
    id: str
    applied: dict[str, Any] = Field(..., description="the action carried out")
    result: dict[str, Any]


class HealthReport(Reply):
    id: str
    cluster_id: str
    cluster: str
    created_at: str
    period_s: float
    availability: dict[str, Any]
    faults: dict[str, Any]
    recoveries: dict[str, Any]
    alerts: dict[str, Any]
    chips_off_baseline: list[dict[str, Any]]
    links_off_baseline: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    chip_temperature_c: list[float]


class Liveness(Reply):
    ok: bool
    role: str = Field(..., description="leader or follower")
    instance: str
    term: int | None = None
    leader: str | None = Field(None, description="the leader's URL")
    clusters: int | None = None
    timeline_s: float
    time: str
    speed: float | None = None
    starting: bool = Field(False, description="a leader still reloading the store: /v1 answers 503 starting until it is done")
    twin_time: str | None = Field(None, description="the twin's clock, on a plane paced at a speed other than 1")


class Readiness(Reply):
    ready: bool
    role: str
    store: str = Field(..., description="ok or unreachable")
    leader: str | None = None
    reason: str | None = Field(None, description="why it is not ready (with the 503 only)")
