"""The planner behind the scheduler's ``ShapePlanner`` port (``scheduler.extension``).

The scheduler declares what it asks of a planner; this adapter answers it with
``planner.plan`` and is handed to the scheduler by the composition root
(``podfleet.compose``). It implements the port structurally, so the planner, a pure
model below the control plane, imports nothing of the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass

from podfleet.hardware.topology import GridTopology, Topology
from podfleet.perf.models import ModelSpec
from podfleet.planner.result import PlanResult
from podfleet.planner.search import plan


@dataclass(frozen=True)
class PlannerAdapter:
    """Stateless (every instance is equal): the scheduler's per-shape plan cache, keyed on
    the planner, is shared by every plane and scheduler of a process."""

    def plan_shape(self, model: str | ModelSpec, chips: int, grid: GridTopology, shape: tuple[int, ...],
                   grad_compression: str = "none") -> PlanResult:
        # Only a compressed job passes the mode: the result then also holds the best
        # plan's uncompressed estimate (what compression changed).
        comp = grad_compression if grad_compression != "none" else None
        return plan(model, chips, topology=grid, block_shape=shape, grad_compression=comp)

    def plan_topology(self, model: str | ModelSpec, chips: int, topology: Topology,
                      grad_compression: str = "none") -> PlanResult:
        """A gang across pods: TP/PP/DP for ``chips`` chips of ``topology`` (a fleet of the
        gang's pods, priced at the network level its ring crosses)."""
        comp = grad_compression if grad_compression != "none" else None
        return plan(model, chips, topology=topology, grad_compression=comp)
