"""Replies for job metrics, job arrays, priority classes, presets, reservations, usage, tokens
and the audit trail."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from podfleet.sdk.models.reply import Envelope, PageBody, Reply


# --- job metrics, job arrays, priority classes -------------------------------------------------
class JobMetricPoint(Reply):
    time: str
    t_start: float
    resolution_s: float
    step_first: int | None = None
    step_last: int | None = None
    samples: int = 0
    loss: float | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None


class JobMetricsOut(Reply):
    job_id: str
    resolution_s: float
    points: list[JobMetricPoint]


class JobArrayMember(Reply):
    id: str
    index: int | None = None
    state: str
    reason: str = ""


class JobArray(Reply):
    id: str
    size: int
    limit: int | None = None
    state: str = Field(..., description="RUNNING while any member runs, PENDING while the rest wait, else the "
                                        "worst end: FAILED, STOPPED or SUCCEEDED")
    ended: bool
    counts: dict[str, int]
    cluster_id: str
    jobs: list[JobArrayMember]


class PriorityClass(Reply):
    name: str
    value: int
    preemption: str


class PriorityClassList(Envelope):
    priority_classes: list[PriorityClass]


# --- presets, reservations, usage, tokens, audit -----------------------------------------------
class ModelPreset(Reply):
    name: str
    params: int = Field(..., description="parameters")
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    trainer: bool = Field(..., description="local and ray clusters can train it (the built-in PyTorch loop); "
                                           "every preset runs on the twin")


class Presets(Envelope):
    """What the server knows by name, for a client to offer rather than copy: the model
    presets (PlanParallelism, SubmitTrainingJob) and the state vocabularies."""

    models: list[ModelPreset]
    job_states: list[str] = Field(..., description="every state a job can be in, in lifecycle order")
    terminal_job_states: list[str] = Field(..., description="the states a job ends in")
    chip_states: list[str] = Field(..., description="every state a chip can be in")
    chip_types: list[str] = Field(..., description="PlanParallelism's chip_type values")


class Reservation(Reply):
    id: str
    name: str
    cluster_id: str
    cluster: str
    chips: int
    chip_ids: list[int] = Field(..., description="the chips held (chosen when it was made)")
    queue: str | None = None
    start: str
    end: str
    duration_s: float
    state: str = Field(..., description="pending (before the start), active (in the window), ended, or deleted")
    created_at: str
    jobs: list[str] = Field([], description="jobs holding its chips now")


class ReservationList(Envelope):
    reservations: list[Reservation]


class UsageRow(Reply):
    busy: float = Field(..., description="chip-seconds training (less work a failure threw away)")
    reserved: float = Field(..., description="chip-seconds held while placing or checkpointing")
    lost: float = Field(..., description="chip-seconds held while recovering, plus work a failure threw away")
    chip_hours: float
    jobs: int


class UsageGroup(Reply):
    name: str = Field(..., description="the user, queue or team")
    chip_hours: list[float] = Field(..., description="chip-hours held in each bucket (busy + reserved + lost)")


class UsageSeries(Envelope):
    bucket_s: int
    t: list[float] = Field(..., description="each bucket's start, unix s (the newest 1000 buckets at most)")
    groups: list[UsageGroup]


class UsageReport(Envelope):
    by: str
    since: float | None = None
    cluster_id: str | None = None
    rows: list[UsageRow]
    total: dict[str, float]
    jobs: int
    series: UsageSeries | None = Field(None, description="usage over time, with ?bucket= only")


class AccessToken(Reply):
    id: str
    name: str
    role: str
    revoked: bool = False
    created_at: str
    token: str | None = Field(None, description="only in the CreateAccessToken response")


class AccessTokenList(Envelope):
    tokens: list[AccessToken]


class AuditEvent(Envelope):
    seq: int
    time: str
    actor: str
    action: str
    target: str
    result: str
    detail: dict[str, Any]
    prev_hash: str
    hash: str


class AuditList(PageBody):
    events: list[AuditEvent]


class AuditVerify(Envelope):
    ok: bool
    first_bad_seq: int | None = None
    message: str

