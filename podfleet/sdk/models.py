"""The API's replies for the main nouns (cluster, job, queue) as typed models, shared by
both edges: the server declares them as its response models (``api/schemas`` re-exports
them, so ``/openapi.json`` describes exactly these) and ``PodfleetClient`` returns them.

A reply keeps every field the server sent (``extra="allow"``: a newer server's fields
reach an older client), and reads like the dict the SDK returned before, so
``job["state"]``, ``job.get("reason")`` and ``"plan" in job`` keep working beside
``job.state``; ``to_dict()`` is its JSON form (what ``--output json`` prints)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

# control/lifecycle.JobState's values (tests/api/test_presets.py checks they agree): the
# SDK stands above the wire, not on the engine.
JOB_STATE_NAMES = ("PENDING", "PLACING", "RUNNING", "CHECKPOINTING", "RECOVERING", "SUCCEEDED", "FAILED", "STOPPED")
JobStateName = Literal[JOB_STATE_NAMES]  # type: ignore[valid-type]


class Reply(BaseModel):
    """A reply's fields by attribute, and read as a mapping too (the SDK's dicts of before)."""

    model_config = ConfigDict(extra="allow")

    # The keys as the server sent them, in its order (``keep_order``): a model's fields come
    # in declaration order, so a reply rendered outside its model (DescribeClusterHardware's
    # snapshot) would otherwise print with its keys reordered.
    _sent: tuple[str, ...] = PrivateAttr(default=())

    def _fields(self) -> dict[str, Any]:
        # The fields it holds (a reply kept unvalidated may lack some) and the undeclared ones,
        # in the order the server sent them where it is known.
        fields = {**{k: v for k, v in self.__dict__.items() if k in type(self).model_fields}, **(self.model_extra or {})}
        if not self._sent:
            return fields
        return {**{k: fields[k] for k in self._sent if k in fields}, **fields}

    def __getitem__(self, key: str) -> Any:
        fields = self._fields()
        if key not in fields:
            raise KeyError(key)
        return fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._fields().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._fields()

    def keys(self) -> list[str]:
        return list(self._fields())

    def items(self) -> list[tuple[str, Any]]:
        return list(self._fields().items())

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # a mapping's keys, as the dict's were
        return iter(self._fields())

    def keep_order(self, data: Any) -> None:
        """Remember the order of ``data``'s keys (the JSON this reply was read from), and its
        nested replies theirs, for ``to_dict``, ``keys`` and ``items``."""
        if not isinstance(data, dict):
            return
        self._sent = tuple(data)
        for key in _nested_fields(type(self)):
            value, sent = self.__dict__.get(key), data.get(key)
            if isinstance(value, Reply):
                value.keep_order(sent)
            elif isinstance(value, list) and isinstance(sent, list):
                for item, item_sent in zip(value, sent, strict=False):
                    if isinstance(item, Reply):
                        item.keep_order(item_sent)

    def in_sent_order(self, dumped: dict[str, Any]) -> dict[str, Any]:
        """``dumped`` (this reply's JSON form) with its keys, and its nested replies', in the
        order the server sent them (``keep_order``); unchanged where they already are."""
        if self._sent:
            sent = [k for k in self._sent if k in dumped]
            if sent != list(dumped)[:len(sent)]:
                dumped = {**{k: dumped[k] for k in sent}, **dumped}
        for key in _nested_fields(type(self)):
            value, out = self.__dict__.get(key), dumped.get(key)
            if isinstance(value, Reply) and isinstance(out, dict):
                dumped[key] = value.in_sent_order(out)
            elif isinstance(value, list) and isinstance(out, list):
                dumped[key] = [v.in_sent_order(d) if isinstance(v, Reply) and isinstance(d, dict) else d
                               for v, d in zip(value, out, strict=False)]
        return dumped

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the server sent it: no defaults added for fields it left out,
        and its keys in the order it sent them."""
        return self.in_sent_order(self.model_dump(mode="json", exclude_unset=True))

    def __eq__(self, other: object) -> bool:
        # Equal to the dict it was read from, as the SDK's dicts were to their JSON.
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dicts it stands for


@cache
def _nested_fields(model: type[Reply]) -> tuple[str, ...]:
    """The fields of ``model`` that hold replies (``progress: Progress``, ``chips: list[ChipOut]``)."""
    def holds_reply(annotation: Any) -> bool:
        if isinstance(annotation, type) and issubclass(annotation, Reply):
            return True
        return any(holds_reply(a) for a in get_args(annotation))

    return tuple(name for name, f in model.model_fields.items() if holds_reply(f.annotation))


class PageBody(Reply):
    """A page of a list: ``next_token`` asks for the next one. ``nextToken`` repeats it for
    one release, for clients written against the camelCase spelling."""

    model_config = ConfigDict(extra="ignore")  # a page is its items and its token, nothing else

    next_token: str | None = None
    nextToken: str | None = Field(None, json_schema_extra={"deprecated": True},
                                  description="deprecated spelling of next_token; sent for one release")

    @model_validator(mode="before")
    @classmethod
    def _both_spellings(cls, data: Any) -> Any:
        if isinstance(data, dict) and "next_token" in data:
            return {**data, "nextToken": data["next_token"]}
        return data




class DeploymentStep(Reply):
    name: str
    state: str


class Deployment(Reply):
    state: str
    percent: int
    steps: list[DeploymentStep]


class Cluster(Reply):
    id: str
    name: str
    state: str
    type: str | None = None
    chips: int | None = None
    spares: list[int] = []
    deployment: Deployment | None = None
    fabric: str | None = Field(None, description="sim, local, ray or neuron")
    spec: dict[str, Any] | None = Field(None, description="what it was created with (pods, pods_per_block, ...)")
    scheduler: dict[str, Any] = Field({}, description="pods (utilization, free_chips, largest_free_block, "
                                      "fragmentation), utilization, fragmentation, pending_jobs, running_jobs, "
                                      "queue_wait_p50_s, queue_wait_p95_s, balance_degree (per job)")


class ClusterList(PageBody):
    clusters: list[Cluster]


class Progress(Reply):
    step: int
    steps: int
    loss: float | None = None
    tokens_per_s: float | None = None


class AllocationOut(Reply):
    chips: list[int]
    shape: list[int]
    reason: str


class Job(Reply):
    id: str
    cluster_id: str
    state: JobStateName
    model: str
    chips: int
    progress: Progress
    allocation: AllocationOut | None = None
    reason: str = ""
    name: str | None = None
    queue: str | None = Field(None, description="the cluster queue it was admitted through")
    scheduling: dict[str, Any] = Field({}, description="queue_wait_s, balance_degree, preemptions, rebalances")
    timestamps: dict[str, str] = {}


class JobList(PageBody):
    jobs: list[Job]


class Queue(Reply):
    name: str
    cluster_id: str
    nominal: int | None = Field(None, description="chips it owns (none: the implicit, unlimited default queue)")
    cohort: str | None = None
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    weight: float = 1.0
    reclaim: str = "any"
    used: int = Field(0, description="chips its jobs hold now")
    borrowed: int = Field(0, description="chips it uses above nominal")
    lent: int = Field(0, description="chips of its nominal quota other queues use now")
    capacity: int | None = Field(None, description="the most chips it can ever hold")
    share: float = Field(0.0, description="dominant share: chips held over the cohort's nominal chips, per "
                                          "normalized weight")
    usage: float = Field(0.0, description="decayed chip-seconds (fair-share history)")
    fair_share: float = Field(0.0, description="Slurm's fair-share factor 2^(-usage/shares), 0-1 (1: unused)")
    defined: bool = Field(True, description="false for the implicit default queue")
    jobs: dict[str, int] = Field({}, description="its jobs by scheduler phase")


class QueueList(Reply):
    model_config = ConfigDict(extra="ignore")

    queues: list[Queue]


class Envelope(Reply):
    """A reply that is its declared fields and nothing else: the server drops anything more
    its route returns (as the plain models these were did), so the schema says no more."""

    model_config = ConfigDict(extra="ignore")


class LogLine(Reply):
    offset: int
    time: str
    message: str


class Logs(Envelope):
    lines: list[LogLine]
    next: int


class FaultOut(Reply):
    cluster_id: str
    kind: str


# --- hardware (DescribeClusterHardware) and a chip's lifecycle ---------------------------------
class ChipOut(Reply):
    index: int
    coords: list[int]
    state: str
    spare: bool
    metrics: dict[str, Any]


class LinkOut(Reply):
    src: int
    dst: int
    axis: str
    state: str
    metrics: dict[str, Any]


class Hardware(Reply):
    cluster_id: str
    chips: list[ChipOut]
    links: list[LinkOut]


class PodSummary(Reply):
    pod: int
    block: int
    chips: int
    healthy: int
    failed: int
    spare: int
    busy: int
    utilization: float
    jobs: list[str]


class BlockSummary(Reply):
    block: int
    pods: list[int]
    chips: int
    healthy: int
    failed: int
    spare: int
    busy: int
    utilization: float


class HardwareSummary(Reply):
    """DescribeClusterHardware with ``summary=true``: counts per pod and per network block."""

    cluster_id: str
    pods: list[PodSummary]
    blocks: list[BlockSummary]


class ChipLifecycleOut(Reply):
    cluster_id: str
    cluster: str
    chip: int
    state: str = Field(..., description="the fabric's: healthy, degraded, failed, isolated, updating")
    mode: str = Field(..., description="the operator's: schedulable, cordoned, draining; or unavailable: left "
                      "schedulable, but its state (not healthy) keeps placement off it")
    spare: bool
    job: str | None = None


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
    twin_time: str | None = Field(None, description="the twin's clock, on a plane paced at a speed other than 1")


class Readiness(Reply):
    ready: bool
    role: str
    store: str = Field(..., description="ok or unreachable")
    leader: str | None = None
    reason: str | None = Field(None, description="why it is not ready (with the 503 only)")
