"""Adapter to the parallelism planner (``podfleet.planner``), used by PlanParallelism
and by job submission (``parallelism: auto`` is resolved here; an explicit TP/PP/DP is
checked to fit). Plans are pure functions of (model, chips, topology): cached."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

from podfleet.errors import InfeasibleError, InvalidInputError
from podfleet.hardware.topology import Topology
from podfleet.perf.models import ModelSpec
from podfleet.planner import plan
from podfleet.wire import JsonObject

PLAN_FIELDS = ("tp", "pp", "dp", "micro_batch", "num_micro_batches", "recompute", "zero_stage",
               "step_time_s", "tokens_per_s", "mfu", "memory_per_chip_bytes", "fits")
# perf.Plan's fields: what the twin's perf-based step time reads from options["plan"].
PERF_PLAN_FIELDS = ("tp", "pp", "dp", "micro_batch", "num_micro_batches", "recompute", "zero_stage",
                    "interleave", "sequence_parallel")


@dataclass(frozen=True)
class Plan:
    """A job's layout as the control plane records it (DescribeTrainingJob ``plan``): the
    degrees, the planner's ``perf.Plan`` fields and its predicted figures, or the degrees
    with a ``note`` saying why there is no prediction. Fields left None are not shown."""

    tp: int
    pp: int
    dp: int
    micro_batch: int | None = None
    num_micro_batches: int | None = None
    recompute: str | None = None
    zero_stage: int | None = None
    interleave: int | None = None
    sequence_parallel: bool | None = None
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    memory_per_chip_bytes: int | None = None
    fits: bool | None = None
    note: str | None = None  # no planner prediction, and why
    grad_compression: str | None = None  # planned with the job's gradient compression
    uncompressed_step_time_s: float | None = None
    block_shape: tuple[int, ...] | None = None  # the block the scheduler chose it with

    def on_block(self, shape: Sequence[int]) -> Plan:
        return replace(self, block_shape=tuple(int(k) for k in shape))

    @property
    def predicted(self) -> bool:
        """A planner's prediction (not the fallback degrees of a job it could not plan)."""
        return self.note is None

    def perf_fields(self) -> JsonObject:
        """The ``perf.Plan`` fields and figures the twin's step time reads (``options["plan"]``)."""
        d = self.to_dict()
        return {k: d[k] for k in PERF_PLAN_FIELDS if k in d}

    def to_dict(self) -> JsonObject:
        d = {f.name: v for f in fields(self) if (v := self.__dict__[f.name]) is not None}
        if self.block_shape is not None:
            d["block_shape"] = list(self.block_shape)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Plan | None:
        """A stored plan back; None for one without the three degrees."""
        if not {"tp", "pp", "dp"} <= set(d):
            return None
        vals = {k: _plain(v) for k, v in d.items() if k in _FIELDS}
        if vals.get("block_shape") is not None:
            vals["block_shape"] = tuple(int(k) for k in vals["block_shape"])
        return cls(**vals)


def plan_parallelism(model: str, chips: int, *, chip_type: str = "trn2", topology: str | None = None,
                     tp: int | None = None, pp: int | None = None, dp: int | None = None) -> JsonObject:
    """The PlanParallelism payload: best plan, candidates and rejected ones."""
    return plan(model, chips, topology=topology, chip_type=None if topology else chip_type,
                tp=tp, pp=pp, dp=dp).to_dict()


def plan_for_job(topology: Topology, model: ModelSpec, chips: int,
                 parallelism: str | tuple[int, int, int]) -> Plan:
    """The layout a job runs with and its predicted step time / memory per chip."""
    fixed: tuple[int | None, int | None, int | None] = \
        (None, None, None) if isinstance(parallelism, str) else parallelism
    try:
        return _cached(topology, model, chips, fixed)
    except (InfeasibleError, InvalidInputError) as exc:
        # Advisory, never a refusal: the planner searches grid blocks and fixed batch
        # sizes, while the job may run scattered (e.g. 30 chips on a 4x4x4) with its own
        # batch. The job runs data-parallel (or as given) and says why there is no plan.
        return Plan(fixed[0] or 1, fixed[1] or 1, fixed[2] or chips, note=f"no planner prediction: {exc.message}")


@lru_cache(maxsize=256)
def _cached(topology: Topology, model: ModelSpec, chips: int,
            fixed: tuple[int | None, ...]) -> Plan:
    tp, pp, dp = fixed
    best = plan(model, chips, topology=topology, tp=tp, pp=pp, dp=dp, top=1).to_dict()
    return Plan(**{k: _plain(best[k]) for k in PLAN_FIELDS if k in best})


def _plain(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v


_FIELDS = frozenset(f.name for f in fields(Plan))
