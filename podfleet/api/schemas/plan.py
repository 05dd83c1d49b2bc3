"""PlanParallelism's body."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from podfleet.api.schemas.base import PresetName, RequestBody
from podfleet.hardware.catalog import TOPOLOGY_NAMES

PLAN_CHIP_TYPES = ("trn2", "trn1", "a100", "h100", "h200")
PlanChipType = Literal[PLAN_CHIP_TYPES]  # type: ignore[valid-type]
TOPOLOGY_PATTERN = rf"^({'|'.join(sorted(TOPOLOGY_NAMES))})(:[1-9][0-9]{{0,3}})?$"


class PlanRequest(RequestBody):
    model: PresetName = Field(..., description="preset name")
    chips: int = Field(..., ge=1, le=65536)
    chip_type: PlanChipType = "trn2"
    topology: str | None = Field(None, max_length=64, pattern=TOPOLOGY_PATTERN,
                                 description="a topology, or NAME:COUNT for a fleet of COUNT (1-9999): e.g. "
                                             "trn2-ultraserver, trn2-ultraserver:4")
    tp: int | None = Field(None, ge=1, le=4096, description="fix the tensor-parallel degree")
    pp: int | None = Field(None, ge=1, le=4096)
    dp: int | None = Field(None, ge=1, le=65536)
