"""A job's parallelism plan from the options it was launched with (pure): the plan the
control plane chose, a manual TP/PP/DP layout completed with the default batch, or the
default plan for the model on its chips."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podfleet.hardware.topology import Topology
from podfleet.perf import Plan, default_global_batch, default_plan
from podfleet.perf.layout import job_topology, resolve_topology
from podfleet.perf.models import ModelSpec

PLAN_FIELDS = ("tp", "pp", "dp", "micro_batch", "num_micro_batches", "recompute", "zero_stage", "interleave",
               "sequence_parallel")


def plan_from_options(model: ModelSpec, n: int, options: Mapping[str, Any], topology: Topology) -> Plan:
    """``options["plan"]`` (or ``["parallelism"]``) as a ``Plan`` for ``n`` chips of ``topology``."""
    given: Any = options.get("plan") or options.get("parallelism")
    if isinstance(given, Mapping) and {"tp", "pp", "dp"} <= set(given):
        fields = {k: given[k] for k in PLAN_FIELDS if given.get(k) is not None}
        if "micro_batch" not in fields or "num_micro_batches" not in fields:
            gb = default_global_batch(model, n)
            fields.setdefault("micro_batch", 1)
            fields.setdefault("num_micro_batches", max(1, gb // (int(fields["dp"]) * fields["micro_batch"])))
        return Plan(**fields)
    topo = job_topology(resolve_topology(topology, n), n, None)
    return default_plan(model, n, default_global_batch(model, n), topo)
