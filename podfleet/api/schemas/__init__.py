"""Wire payloads of the REST API (pydantic, at the edge only), one module per noun. New fields
always have defaults. Types and ranges are checked here; meaning is checked again by the engine.

The replies are the SDK's models (``podfleet.sdk.models``), so client and server read one
shape; everything is re-exported here, so ``from podfleet.api.schemas import Job`` keeps working."""

from __future__ import annotations

from podfleet.api.schemas.base import (
    MAX_CHIP_INDEX,
    MAX_CHIPS,
    MAX_FLEET_CHIPS,
    MAX_LINK_INDEX,
    PRESET_NAMES,
    QUEUE_PATTERN,
    Address,
    ClientToken,
    Command,
    Name,
    PresetName,
    Printable,
    Problem,
    RequestBody,
    ResponseBody,
    keyed_schema,
    old_spellings,
    present,
)
from podfleet.api.schemas.clusters import (
    ClusterType,
    CreateClusterRequest,
    FabricKind,
    QuotaChips,
    TeamName,
)
from podfleet.api.schemas.faults import (
    FaultKindName,
    InjectFaultRequest,
)
from podfleet.api.schemas.jobs import (
    JOB_MODEL_NAMES,
    JOB_OPTION_NAMES,
    TERMINAL_JOB_STATES,
    JobModelName,
    JobOptionName,
    JobOrArrayId,
    ModelDims,
    Parallelism,
    SubmitJobRequest,
)
from podfleet.api.schemas.plan import (
    PLAN_CHIP_TYPES,
    TOPOLOGY_PATTERN,
    PlanChipType,
    PlanRequest,
)
from podfleet.api.schemas.queues import (
    CreatePriorityClassRequest,
    CreateQueueRequest,
    ReclaimPolicy,
    UpdateQueueRequest,
)
from podfleet.api.schemas.reservations import (
    CreateReservationRequest,
)
from podfleet.api.schemas.tokens import (
    CreateAccessTokenRequest,
)
from podfleet.sdk import models as _replies

# The replies: every name podfleet.sdk.models exports (it lists them once).
from podfleet.sdk.models import *  # noqa: F403

__all__ = [
    "JOB_MODEL_NAMES",
    "JOB_OPTION_NAMES",
    "MAX_CHIPS",
    "MAX_CHIP_INDEX",
    "MAX_FLEET_CHIPS",
    "MAX_LINK_INDEX",
    "PLAN_CHIP_TYPES",
    "PRESET_NAMES",
    "QUEUE_PATTERN",
    "TERMINAL_JOB_STATES",
    "TOPOLOGY_PATTERN",
    "Address",
    "ClientToken",
    "ClusterType",
    "Command",
    "CreateAccessTokenRequest",
    "CreateClusterRequest",
    "CreatePriorityClassRequest",
    "CreateQueueRequest",
    "CreateReservationRequest",
    "FabricKind",
    "FaultKindName",
    "InjectFaultRequest",
    "JobModelName",
    "JobOptionName",
    "JobOrArrayId",
    "ModelDims",
    "Name",
    "Parallelism",
    "PlanChipType",
    "PlanRequest",
    "PresetName",
    "Printable",
    "Problem",
    "QuotaChips",
    "ReclaimPolicy",
    "RequestBody",
    "ResponseBody",
    "SubmitJobRequest",
    "TeamName",
    "UpdateQueueRequest",
    "keyed_schema",
    "old_spellings",
    "present",
]
__all__ += _replies.__all__
