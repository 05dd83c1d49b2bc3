"""PlanParallelism: the planner's best layouts for a model on N chips (pure; no state), and
GetPresets: the model presets and state names a client offers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from podfleet.api.schemas import (
    JOB_STATE_NAMES,
    PLAN_CHIP_TYPES,
    TERMINAL_JOB_STATES,
    ParallelismPlan,
    PlanRequest,
    Presets,
)
from podfleet.control.planning import plan_parallelism
from podfleet.fabric.base import ChipState
from podfleet.perf.models import MODELS, TRAINER_PRESETS

router = APIRouter(prefix="/v1", tags=["planner"])


@router.post("/plan", operation_id="PlanParallelism", response_model=ParallelismPlan,
             response_model_exclude_unset=True)
def plan(body: PlanRequest) -> dict[str, Any]:
    """TP/PP/DP and micro-batching with predicted step time, tokens/s, MFU and memory per chip."""
    return plan_parallelism(body.model, body.chips, chip_type=body.chip_type, topology=body.topology,
                            tp=body.tp, pp=body.pp, dp=body.dp)


@router.get("/presets", operation_id="GetPresets", response_model=Presets)
def presets() -> dict[str, Any]:
    """The model presets (with their shapes and parameter counts) and the job and chip state
    names, from the tables the server itself uses: the console offers these, never a copy."""
    return {"models": [{"name": m.name, "params": m.params, "layers": m.layers, "hidden": m.hidden,
                        "heads": m.heads, "vocab": m.vocab, "seq_len": m.seq_len,
                        "trainer": m.name in TRAINER_PRESETS} for m in MODELS.values()],
            "job_states": list(JOB_STATE_NAMES), "terminal_job_states": list(TERMINAL_JOB_STATES),
            "chip_states": [s.value for s in ChipState], "chip_types": list(PLAN_CHIP_TYPES)}
