"""Adapter to the parallelism planner (``podfleet.planner``), used by PlanParallelism
and by job submission (``parallelism: auto`` is resolved here; an explicit TP/PP/DP is
checked to fit). Plans are pure functions of (model, chips, topology): cached."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from podfleet.errors import InfeasibleError, InvalidInputError
from podfleet.hardware.topology import Topology
from podfleet.perf.models import ModelSpec
from podfleet.planner import plan

PLAN_FIELDS = ("tp", "pp", "dp", "micro_batch", "num_micro_batches", "recompute", "zero_stage",
               "step_time_s", "tokens_per_s", "mfu", "memory_per_chip_bytes", "fits")


def plan_parallelism(model: str, chips: int, *, chip_type: str = "trn2", topology: str | None = None,
                     tp: int | None = None, pp: int | None = None, dp: int | None = None) -> dict[str, Any]:
    """The PlanParallelism payload: best plan, candidates and rejected ones."""
    return plan(model, chips, topology=topology, chip_type=None if topology else chip_type,
                tp=tp, pp=pp, dp=dp).to_dict()


def plan_for_job(topology: Topology, model: ModelSpec, chips: int,
                 parallelism: str | tuple[int, int, int]) -> dict[str, Any]:
    """The layout a job runs with and its predicted step time / memory per chip."""
    fixed = (None, None, None) if parallelism == "auto" else tuple(parallelism)
    try:
        return dict(_cached(topology, model, chips, fixed))
    except (InfeasibleError, InvalidInputError) as exc:
        # Advisory, never a refusal: the planner searches grid blocks and fixed batch
        # sizes, while the job may run scattered (e.g. 30 chips on a 4x4x4) with its own
        # batch. The job runs data-parallel (or as given) and says why there is no plan.
        return {"tp": fixed[0] or 1, "pp": fixed[1] or 1, "dp": fixed[2] or chips,
                "note": f"no planner prediction: {exc.message}"}


@lru_cache(maxsize=256)
def _cached(topology: Topology, model: ModelSpec, chips: int,
            fixed: tuple[int | None, ...]) -> tuple[tuple[str, Any], ...]:
    tp, pp, dp = fixed
    best = plan(model, chips, topology=topology, tp=tp, pp=pp, dp=dp, top=1).to_dict()
    return tuple((k, _plain(best[k])) for k in PLAN_FIELDS if k in best)


def _plain(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v
