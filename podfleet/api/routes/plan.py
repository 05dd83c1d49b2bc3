"""PlanParallelism: the planner's best layouts for a model on N chips (pure; no state)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from podfleet.api.schemas import PlanRequest
from podfleet.control.planning import plan_parallelism

router = APIRouter(prefix="/v1", tags=["planner"])


@router.post("/plan", operation_id="PlanParallelism")
def plan(body: PlanRequest) -> dict[str, Any]:
    """TP/PP/DP and micro-batching with predicted step time, tokens/s, MFU and memory per chip."""
    return plan_parallelism(body.model, body.chips, chip_type=body.chip_type, topology=body.topology,
                            tp=body.tp, pp=body.pp, dp=body.dp)
