"""Wire payloads of the REST API (pydantic, at the edge only). New fields always have
defaults. Types and ranges are checked here; meaning is checked again by the engine."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    TypeAdapter,
    WithJsonSchema,
    model_validator,
)
from pydantic.config import JsonDict, JsonValue
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from podfleet.control.drivers.process import FABRIC_JOB_OPTIONS, JOB_OPTIONS
from podfleet.control.faults import POD_LOSS
from podfleet.control.specs import MAX_CLUSTER_CHIPS, POD_LOSS_POLICIES
from podfleet.hardware.catalog import TOPOLOGY_NAMES
from podfleet.hardware.faults import FAULT_KINDS, LINK_FAULTS
from podfleet.perf.models import MODELS
from podfleet.security.text import printable_pattern, unprintable
from podfleet.timespec import DURATION_PATTERN, MAX_S, TIME_PATTERN

ClusterType = Literal["trn2-ultraserver", "trn2-node", "trn1-node", "custom"]
FabricKind = Literal["sim", "local", "ray", "neuron"]
FaultKindName = Literal[FAULT_KINDS]  # type: ignore[valid-type]
PRESET_NAMES = tuple(sorted(MODELS))
PresetName = Literal[PRESET_NAMES]  # type: ignore[valid-type]
TOPOLOGY_PATTERN = rf"^({'|'.join(sorted(TOPOLOGY_NAMES))})(:[1-9][0-9]{{0,3}})?$"
JOB_MODEL_NAMES = (*PRESET_NAMES, "custom")  # custom: with model_dims
JobModelName = Literal[JOB_MODEL_NAMES]  # type: ignore[valid-type]
JOB_OPTION_NAMES = JOB_OPTIONS + FABRIC_JOB_OPTIONS
JobOptionName = Literal[JOB_OPTION_NAMES]  # type: ignore[valid-type]
JobStateName = Literal["PENDING", "PLACING", "RUNNING", "CHECKPOINTING", "RECOVERING",
                       "SUCCEEDED", "FAILED", "STOPPED"]
MAX_CHIPS = MAX_CLUSTER_CHIPS  # the most chips one cluster has (custom dims or chips): the absolute bound of an index
MAX_FLEET_CHIPS = 1024 * 64  # a fleet cluster: up to 1,024 pods of 64 chips (catalog.MAX_FLEET_PODS)
MAX_CHIP_INDEX = MAX_FLEET_CHIPS - 1
MAX_LINK_INDEX = 6 * MAX_FLEET_CHIPS - 1  # the most links: a 6-axis torus per pod
ClientToken = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$",
                    description="idempotency key: a retry with the same token returns the same object")


def _present(*fields: str) -> JsonDict:
    """JSON Schema: each of ``fields`` is given and not null (the server reads a null as absent)."""
    return {"required": list(fields), "properties": {f: {"not": {"type": "null"}} for f in fields}}


# What the engine checks across fields, said in the schema too, so a generated client (or an
# outside fuzzer) knows a request is refused before it sends it (issue 30, item 9).
_CLUSTER_FABRIC_OPTIONS: list[JsonValue] = [
    # rayAddress joins a Ray cluster: fabric ray, or no fabric (it then means ray).
    {"if": _present("rayAddress"),
     "then": {"properties": {"fabric": {"enum": ["ray", None]},
                             "neuronLs": {"type": "null"}, "neuronMonitor": {"type": "null"}}}},
    # neuronLs / neuronMonitor run neuron tools: fabric neuron, or no fabric (it then means neuron).
    {"if": {"anyOf": [_present("neuronLs"), _present("neuronMonitor")]},
     "then": {"properties": {"fabric": {"enum": ["neuron", None]}}}},
]
# Said with if/then, not a top-level anyOf: client generators (openapi-python-client) turn
# an object with a top-level anyOf into a union and drop its model class.
_JOB_MODEL_GIVEN: JsonDict = {"if": {"not": _present("model")},
                              "then": {"anyOf": [_present("model_dims"), _present("entrypoint")]}}
# model "custom" is the model_dims model: it needs them (control/presets.py; seed 29 found the 400).
_JOB_CUSTOM_DIMS: JsonDict = {"if": {"required": ["model"], "properties": {"model": {"const": "custom"}}},
                              "then": _present("model_dims")}
_LINK_KINDS: list[JsonValue] = [*sorted(str(k) for k in LINK_FAULTS)]
_CHIP_KINDS: list[JsonValue] = [*sorted(str(k) for k in FAULT_KINDS if k not in LINK_FAULTS)]
_NULL: JsonDict = {"type": "null"}


def _kind_takes(kinds: list[JsonValue], needs: tuple[str, ...], forbids: tuple[str, ...]) -> JsonDict:
    """if/then: faults of ``kinds`` need ``needs`` (not null) and take none of ``forbids``
    (absent or null), as ``control/faults.py`` checks."""
    props: JsonDict = {f: {"not": _NULL} for f in needs}
    props.update({f: _NULL for f in forbids})
    return {"if": {"required": ["kind"], "properties": {"kind": {"enum": kinds}}},
            "then": {"required": list(needs), "properties": props}}


_FAULT_TARGETS: list[JsonValue] = [
    _kind_takes(_LINK_KINDS, ("link",), ("chip", "rank", "jobId", "factor", "pod")),
    _kind_takes(_CHIP_KINDS, ("chip",), ("link", "rank", "jobId", "factor", "pod")),
    _kind_takes(["kill-worker"], ("rank",), ("chip", "link", "factor", "pod")),
    _kind_takes(["slow-worker"], ("rank", "factor"), ("chip", "link", "pod")),
    _kind_takes([POD_LOSS], ("pod",), ("chip", "link", "rank", "jobId", "factor")),
]


def keyed_schema(key: Any, value: Any) -> JsonDict:
    """The JSON schema of ``dict[key, value]`` for ``WithJsonSchema``: pydantic writes a
    key's pattern as patternProperties, which lets every other key through; propertyNames
    says each key matches, so a key the server refuses is one the schema refuses."""
    return {"type": "object", "propertyNames": TypeAdapter(key).json_schema(),
            "additionalProperties": TypeAdapter(value).json_schema()}


def _printable(value: str) -> str:
    bad = unprintable(value)
    if bad is not None:
        raise PydanticCustomError("unprintable", "contains {char}: names and commands are printable text (no "
                                  "control, bidirectional or other invisible characters)", {"char": bad})
    return value


class _Printable:
    """Free text an operator names something with (``security/text.py``): refused with a
    400 that names the character, and stated in the schema as a pattern, so a request
    the schema allows is never refused for it. (Fields with an ASCII pattern refuse such
    characters already.)"""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(_printable, handler(source))

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        out["pattern"] = printable_pattern()
        return out


Printable = _Printable()
# Lengths inside, so they are checked (and worded) as a string's before the characters are.
Name = Annotated[str, StringConstraints(min_length=1, max_length=63), Printable]
Command = Annotated[str, StringConstraints(min_length=1, max_length=1024), Printable]
Address = Annotated[str, StringConstraints(min_length=1, max_length=512), Printable]


def _has_int(annotation: Any) -> bool:
    """True when ``int`` is the annotation or one of its arguments (``int | None``, ``list[int]``...)."""
    return annotation is int or any(_has_int(a) for a in get_args(annotation))


def _integral(value: Any) -> Any:
    """JSON's 3.0 is the integer 3 (JSON Schema agrees); everything else is left to validation."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value


class _In(BaseModel):
    """A request body: unknown fields and loose types are refused, so the server accepts
    exactly what the schema says (``false`` is not an integer and ``"1"`` is not a number)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _integers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: _integral(v) if k in fields and _has_int(fields[k].annotation) else v for k, v in data.items()}


RequestBody = _In  # the base of request bodies declared beside their routes


TeamName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9_-]*$")]
QuotaChips = Annotated[int, Field(ge=0)]


class CreateClusterRequest(_In):
    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "pod-1", "type": "trn2-node", "spares": 1}],
                                                 "allOf": _CLUSTER_FABRIC_OPTIONS})

    name: str = Field(..., min_length=1, max_length=63, pattern=r"^[a-z][a-z0-9-]*$")
    type: ClusterType | None = Field(None, description="default trn2-ultraserver; custom (chips worker slots) "
                                                        "for fabric local or ray")
    dims: list[Annotated[int, Field(ge=1, le=64)]] | None = Field(
        None, min_length=1, max_length=6, description=f"custom only: 1-6 axes of 1-64 chips, at most {MAX_CHIPS} in all")
    chip_type: Literal["trn2", "trn1"] | None = Field(None, description="custom only")
    chips: int | None = Field(None, ge=1, le=MAX_CHIPS)
    hbm_gib: float | None = Field(None, gt=0, le=1024, description="per-chip memory")
    link_bw_gbps: float | None = Field(None, gt=0, le=10000, description="per link, GB/s")
    storage_nodes: int = Field(1, ge=0, le=16)
    spares: int = Field(0, ge=0, le=4, description="chips held out of placement for failover; "
                        "chosen where they keep the largest blocks free unless spare_chips names them")
    spare_chips: list[int] | None = Field(None, max_length=4, description="the spare chips, by index")
    restore_spares: bool = Field(True, description="a spare that takes a rank stops being a spare; "
                                 "restore the spare count from free or repaired chips")
    quotas: Annotated[dict[TeamName, QuotaChips], WithJsonSchema(keyed_schema(TeamName, QuotaChips))] | None = Field(
        None, description="team -> most chips its jobs may hold at once")
    encryption: bool = True
    network_isolation: bool = True
    fabric: FabricKind | None = Field(None, description="default: the server's (podfleet up --fabric)")
    rayAddress: Address | None = Field(None,
                                   description="fabric ray: HOST:6379, ray://HOST:10001 or auto; "
                                               "default PODFLEET_RAY_ADDRESS, else a private local instance")
    neuronLs: Command | None = Field(None,
                                 description="fabric neuron: the command that prints neuron-ls JSON, run once at "
                                             "create (default 'neuron-ls --json-output'; no shell)")
    neuronMonitor: Command | None = Field(None,
                                      description="fabric neuron: the command that streams neuron-monitor reports, "
                                                  "kept running (default 'neuron-monitor'; no shell)")
    pods: int | None = Field(None, ge=1, le=1024, description="a fleet: this many pods of type, joined by EFA "
                             "(twin); spares are then per pod")
    podsPerBlock: int | None = Field(None, ge=1, le=1024, description="fleet: pods behind one spine switch "
                                     "(a network block); default 16 or pods")
    clientToken: str | None = ClientToken


class Parallelism(_In):
    tp: int = Field(..., ge=1, le=4096)
    pp: int = Field(..., ge=1, le=4096)
    dp: int = Field(..., ge=1, le=65536)


class ModelDims(_In):
    layers: int = Field(..., ge=1, le=1000)
    hidden: int = Field(..., ge=1, le=1_000_000)
    heads: int = Field(..., ge=1, le=10_000)
    vocab: int = Field(..., ge=1, le=10_000_000)
    seq_len: int = Field(4096, ge=1, le=10_000_000)


QUEUE_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
JobOrArrayId = Annotated[str, Field(pattern=r"^(job|arr)-[a-z0-9-]{1,60}$")]


class SubmitJobRequest(_In):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"model": "llama3-8b", "chips": 4, "steps": 100000, "checkpoint_interval": 100}],
        # a preset (or custom) model, custom model_dims, or a script that defines its own model
        "allOf": [_JOB_MODEL_GIVEN, _JOB_CUSTOM_DIMS]})

    model: JobModelName | None = Field(None, description="a preset (local and ray clusters run debug, tiny, small and medium), "
                                       "or custom with model_dims")
    model_dims: ModelDims | None = None
    chips: int = Field(..., ge=1, le=65536)
    parallelism: Literal["auto"] | Parallelism = "auto"
    steps: int = Field(1000, ge=1, le=10**9)
    checkpoint_interval: int = Field(100, ge=0, le=10**9, description="steps; 0 = never")
    priority: Annotated[int, Field(ge=0, le=100)] | Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")] = Field(
        50, description="0-100, or the name of a priority class")
    entrypoint: str | None = Field(None, min_length=1, max_length=1024, pattern=r"^(/|code:[0-9a-f]{64}/).+$",
                                   description="local/ray: an absolute path in an allowed code directory, or "
                                               "code:<sha256>/<path> from UploadCode")
    name: Name | None = None
    team: str | None = Field(None, min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9_-]*$",
                             description="quota owner (the cluster's quotas); default 'default'")
    max_retries: int = Field(0, ge=0, le=100, description="local/ray: crashes in the job's own code allowed "
                                                          "(infrastructure failures never count)")
    options: dict[JobOptionName, Any] | None = Field(None, description="local/ray worker options: seed, global_batch, "
                                           "seq_len, lr, step_delay_s, threads, entrypoint_args, "
                                           "encrypt_checkpoints, key_file, checkpoint_dir, replica_peer")
    gradCompression: str | None = Field(None, min_length=1, max_length=32,
                                        pattern=r"^(none|bf16|lossless|powersgd:([1-9]|[1-5][0-9]|6[0-4]))$",
                                        description="gradient compression: none, bf16, powersgd:RANK (1-64) or "
                                                    "lossless (zstd; bit-identical training); the twin models it")
    queue: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN,
                              description="the cluster queue it is admitted through; default 'default'")
    after_ok: list[JobOrArrayId] | None = Field(None, min_length=1, max_length=100,
                                                description="start only after each of these jobs (or arrays) "
                                                            "succeeded; one that fails fails this job")
    after_any: list[JobOrArrayId] | None = Field(None, min_length=1, max_length=100,
                                                 description="start only after each of these jobs ended")
    pods: int | None = Field(None, ge=1, le=1024, description="a fleet cluster: run on exactly this many pods, "
                             "chips / pods on each (whole pods when that is a pod)")
    topologyRequired: Literal["pod", "block"] | None = Field(
        None, description="never cross this network level: pod (NeuronLink) or block (the pods behind one spine); "
                          "the job waits rather than cross it")
    topologyPreferred: Literal["pod", "block"] | None = Field(
        None, description="cross this level as little as possible (the default for a gang across pods: block)")
    onPodLoss: Literal[POD_LOSS_POLICIES] | None = Field(  # type: ignore[valid-type]
        None, description="a fleet job when a pod it spans is lost as a whole (power, switch): wait (for the pod, "
                          "or a free pod elsewhere), requeue (from its checkpoint; the default) or shrink (its "
                          "other pods, fewer data-parallel replicas, re-planned)")
    time_limit_s: float | None = Field(None, gt=0, le=10**9,
                                       description="Slurm's --time: seconds it may run once placed; past it the "
                                                   "job fails with 'time limit reached'. Only a job with a limit "
                                                   "that ends before a reservation starts may use its chips first")
    array: str | None = Field(None, min_length=1, max_length=200, pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*(%\d+)?$",
                              description="one job per index, e.g. 0-15 or 0-15%4 (at most 4 queued or running); "
                                          "each gets PODFLEET_ARRAY_INDEX")
    clientToken: str | None = ClientToken


class InjectFaultRequest(_In):
    model_config = ConfigDict(json_schema_extra={"allOf": _FAULT_TARGETS})

    kind: FaultKindName | Literal["kill-worker", "slow-worker", "pod-loss"]
    chip: int | None = Field(None, ge=0, le=65535)
    pod: int | None = Field(None, ge=0, le=1023, description="pod-loss (twin fleet clusters): the pod that loses "
                                                            "power or its switch, every chip at once")
    link: str | None = Field(None, pattern=r"^\d{1,5}-\d{1,5}$", description="A-B: the link between chips A and B")
    rank: int | None = Field(None, ge=0, le=65535, description="kill-worker: the rank whose worker is killed")
    jobId: str | None = Field(None, min_length=1, max_length=64,
                              description="kill-worker, slow-worker: the job (optional when one job runs on the "
                                          "cluster)")
    factor: float | None = Field(None, ge=1.0, le=100.0,
                                 description="slow-worker: the rank computes this many times slower per sample "
                                             "(1 restores it)")


class PlanRequest(_In):
    model: PresetName = Field(..., description="preset name")
    chips: int = Field(..., ge=1, le=65536)
    chip_type: Literal["trn2", "trn1", "a100", "h100", "h200"] = "trn2"
    topology: str | None = Field(None, max_length=64, pattern=TOPOLOGY_PATTERN,
                                 description="a topology, or NAME:COUNT for a fleet of COUNT (1-9999): e.g. "
                                             "trn2-ultraserver, trn2-ultraserver:4")
    tp: int | None = Field(None, ge=1, le=4096, description="fix the tensor-parallel degree")
    pp: int | None = Field(None, ge=1, le=4096)
    dp: int | None = Field(None, ge=1, le=65536)


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class DeploymentStep(_Out):
    name: str
    state: str


class Deployment(_Out):
    state: str
    percent: int
    steps: list[DeploymentStep]


class Cluster(_Out):
    id: str
    name: str
    state: str
    type: str | None = None
    chips: int | None = None
    spares: list[int] = []
    deployment: Deployment | None = None
    scheduler: dict[str, Any] = Field({}, description="pods (utilization, free_chips, largest_free_block, "
                                      "fragmentation), utilization, fragmentation, pending_jobs, running_jobs, "
                                      "queue_wait_p50_s, queue_wait_p95_s, balance_degree (per job)")


class ClusterList(BaseModel):
    clusters: list[Cluster]
    nextToken: str | None = None


class Progress(_Out):
    step: int
    steps: int
    loss: float | None = None
    tokens_per_s: float | None = None


class AllocationOut(_Out):
    chips: list[int]
    shape: list[int]
    reason: str


class Job(_Out):
    id: str
    cluster_id: str
    state: JobStateName
    model: str
    chips: int
    progress: Progress
    allocation: AllocationOut | None = None
    reason: str = ""
    scheduling: dict[str, Any] = Field({}, description="queue_wait_s, balance_degree, preemptions, rebalances")
    timestamps: dict[str, str] = {}


class JobList(BaseModel):
    jobs: list[Job]
    nextToken: str | None = None


class ChipOut(_Out):
    index: int
    coords: list[int]
    state: str
    spare: bool
    metrics: dict[str, Any]


class LinkOut(_Out):
    src: int
    dst: int
    axis: str
    state: str
    metrics: dict[str, Any]


class Hardware(_Out):
    cluster_id: str
    chips: list[ChipOut]
    links: list[LinkOut]


class PodSummary(_Out):
    pod: int
    block: int
    chips: int
    healthy: int
    failed: int
    spare: int
    busy: int
    utilization: float
    jobs: list[str]


class BlockSummary(_Out):
    block: int
    pods: list[int]
    chips: int
    healthy: int
    failed: int
    spare: int
    busy: int
    utilization: float


class HardwareSummary(_Out):
    """DescribeClusterHardware with ``summary=true``: counts per pod and per network block."""

    cluster_id: str
    pods: list[PodSummary]
    blocks: list[BlockSummary]


class LogLine(_Out):
    offset: int
    time: str
    message: str


class Logs(BaseModel):
    lines: list[LogLine]
    next: int


class JobMetricPoint(_Out):
    time: str
    t_start: float
    resolution_s: float
    step_first: int | None = None
    step_last: int | None = None
    samples: int = 0
    loss: float | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None


class JobMetricsOut(_Out):
    job_id: str
    resolution_s: float
    points: list[JobMetricPoint]


class ChipLifecycleOut(_Out):
    cluster_id: str
    cluster: str
    chip: int
    state: str = Field(..., description="the fabric's: healthy, degraded, failed, isolated, updating")
    mode: str = Field(..., description="the operator's: schedulable, cordoned, draining; or unavailable: left "
                      "schedulable, but its state (not healthy) keeps placement off it")
    spare: bool
    job: str | None = None


class FaultOut(_Out):
    cluster_id: str
    kind: str


class AuditEvent(BaseModel):
    seq: int
    time: str
    actor: str
    action: str
    target: str
    result: str
    detail: dict[str, Any]
    prev_hash: str
    hash: str


class AuditList(BaseModel):
    events: list[AuditEvent]
    nextToken: str | None = None


class AuditVerify(BaseModel):
    ok: bool
    first_bad_seq: int | None = None
    message: str


class Problem(BaseModel):
    type: str
    title: str
    status: int
    detail: str
    code: str
    field: str | None = None
    allowed: Any = None


class CreateAccessTokenRequest(_In):
    name: str = Field(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    role: Literal["admin", "operator", "viewer"]


class AccessToken(_Out):
    id: str
    name: str
    role: str
    revoked: bool = False
    created_at: str
    token: str | None = Field(None, description="only in the CreateAccessToken response")


class AccessTokenList(BaseModel):
    tokens: list[AccessToken]


# --- queues and job arrays (api/routes/queues.py) --------------------------------------------
ReclaimPolicy = Literal["never", "lower-priority", "any"]


class CreateQueueRequest(_In):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "team-a", "nominal": 32, "cohort": "research", "borrowing_limit": 16}]})

    name: str = Field(..., min_length=1, max_length=63, pattern=QUEUE_PATTERN)
    nominal: int = Field(..., ge=0, le=MAX_CLUSTER_CHIPS, description="chips the queue owns")
    cohort: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN,
                               description="queues of one cohort lend each other idle quota")
    borrowing_limit: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS,
                                        description="most chips above nominal it may borrow (none: no limit)")
    lending_limit: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS,
                                      description="most of its idle nominal chips it lends (none: all)")
    weight: float = Field(1.0, gt=0, le=1000, description="fair-share weight in its cohort")
    reclaim: ReclaimPolicy = Field("any", description="which borrowing jobs it may preempt to get its quota back")


class UpdateQueueRequest(_In):
    nominal: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS)
    cohort: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN)
    borrowing_limit: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS)
    lending_limit: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS)
    weight: float | None = Field(None, gt=0, le=1000)
    reclaim: ReclaimPolicy | None = None


class Queue(_Out):
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


class QueueList(BaseModel):
    queues: list[Queue]


# --- advance reservations (api/routes/reservations.py) -----------------------------------------
class CreateReservationRequest(_In):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "big-run", "chips": 32, "start": "2026-12-04T08:00:00Z", "duration": "6h", "queue": "team-a"}]})

    name: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN,
                             description="default: its id")
    chips: int = Field(..., ge=1, le=MAX_CLUSTER_CHIPS, description="chips held for the window")
    start: str = Field("now", min_length=1, max_length=64, pattern=TIME_PATTERN,
                       description="RFC 3339 (UTC unless it says), now, or now+DURATION (now+1h)")
    duration: Annotated[str, Field(min_length=1, max_length=32, pattern=DURATION_PATTERN)] | \
        Annotated[float, Field(gt=0, le=MAX_S)] = Field(..., description="seconds, or 2h, 30m, 1h30m, 1d, HH:MM:SS")
    queue: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN,
                              description="whose jobs may use the chips in the window (none: nobody's)")


class Reservation(_Out):
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


class ReservationList(BaseModel):
    reservations: list[Reservation]


class JobArrayMember(_Out):
    id: str
    index: int | None = None
    state: str
    reason: str = ""


class JobArray(_Out):
    id: str
    size: int
    limit: int | None = None
    state: str = Field(..., description="RUNNING while any member runs, PENDING while the rest wait, else the "
                                        "worst end: FAILED, STOPPED or SUCCEEDED")
    ended: bool
    counts: dict[str, int]
    cluster_id: str
    jobs: list[JobArrayMember]


class UsageRow(_Out):
    busy: float = Field(..., description="chip-seconds training (less work a failure threw away)")
    reserved: float = Field(..., description="chip-seconds held while placing or checkpointing")
    lost: float = Field(..., description="chip-seconds held while recovering, plus work a failure threw away")
    chip_hours: float
    jobs: int


class UsageGroup(_Out):
    name: str = Field(..., description="the user, queue or team")
    chip_hours: list[float] = Field(..., description="chip-hours held in each bucket (busy + reserved + lost)")


class UsageSeries(BaseModel):
    bucket_s: int
    t: list[float] = Field(..., description="each bucket's start, unix s (the newest 1000 buckets at most)")
    groups: list[UsageGroup]


class UsageReport(BaseModel):
    by: str
    since: float | None = None
    cluster_id: str | None = None
    rows: list[UsageRow]
    total: dict[str, float]
    jobs: int
    series: UsageSeries | None = Field(None, description="usage over time, with ?bucket= only")


class CreatePriorityClassRequest(_In):
    name: str = Field(..., min_length=1, max_length=63, pattern=r"^[a-z][a-z0-9-]*$")
    value: int = Field(..., ge=0, le=100, description="the priority its jobs get")
    preemption: Literal["lower", "never"] = Field("lower", description="lower: its jobs may preempt "
                                                  "lower-priority jobs; never: they wait")


class PriorityClass(_Out):
    name: str
    value: int
    preemption: str


class PriorityClassList(BaseModel):
    priority_classes: list[PriorityClass]
