"""Score: the block shape whose links suit the job's communication pattern.

Cost model (per block shape; translation-invariant on a torus, so cached per shape):
ranks follow the block's ring walk (``blocks.ring_walk``); a hop along axis k costs ``max_bw / bw_k`` (1 on
trn2's x/y NeuronLinks, 2 on the slower inter-instance z links). A ring collective
runs at the pace of its slowest step, so a ring's cost is its largest step (closing
step included) plus 0.1 x its mean step (latency). Then

    cost = 4 * mean over TP groups (consecutive ``tp`` ranks) of ring cost
         + mean over data-parallel rings (ranks r, r+tp, ...) of ring cost
           (or, for ``comm="all-to-all"``, the mean pairwise cost over the block)

TP traffic is weighted 4x because it runs every layer. Score = 100 * best cost / cost,
so TP groups land on the fastest axis and rings close over torus wrap links. A block
holding a down or degraded link has its cost multiplied by ``links.link_penalty``, so
an equal block without bad links wins (only computed while some link is not up).
A block whose ring would cross links other jobs' rings already load has its cost
multiplied by ``traffic.candidate_traffic`` (only computed while some pod reports
traffic: ``Scheduler.set_link_traffic``).

``parallelism="auto"``: where the scheduler was given a planner (its ``ShapePlanner``
port, ``Handle.planner``: the composition root wires ``planner.adapter.PlannerAdapter``),
each candidate shape is planned (``plan_shape(model, chips, grid, shape, compression)``)
and scored by predicted step time instead; the plan travels with the placement. Without a
planner the comm cost is used and the cycle state says so.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from podfleet.errors import InvalidInputError, PodfleetError
from podfleet.hardware.topology import GridTopology
from podfleet.scheduler import status as st
from podfleet.scheduler.blocks import local_distance, ring_cost, ring_walk
from podfleet.scheduler.extension import Candidates, CycleState, Handle, ShapePlan, ShapePlanner
from podfleet.scheduler.links import candidate_penalty
from podfleet.scheduler.status import Status
from podfleet.scheduler.traffic import candidate_traffic
from podfleet.scheduler.types import JobRequest

NAME = "topology_block"
TP_WEIGHT = 4.0


@functools.lru_cache(maxsize=4096)
def comm_cost(grid: GridTopology, shape: tuple[int, ...], tp: int = 1, comm: str = "ring") -> float:
    """The rule: communication cost of a job on a block of ``shape`` (lower is better)."""
    local = ring_walk(grid, shape)
    n = len(local)
    d = local_distance(grid, local)
    ranks = np.arange(n)
    tp_cost = float(np.mean([ring_cost(d, ranks[g : g + tp]) for g in range(0, n, tp)])) if tp > 1 else 0.0
    if comm == "all-to-all":
        dp_cost = float(d.sum() / max(n * (n - 1), 1))
    else:
        dp_cost = float(np.mean([ring_cost(d, ranks[j::tp]) for j in range(tp)]))
    return TP_WEIGHT * tp_cost + dp_cost


@functools.lru_cache(maxsize=1024)
def _shape_costs(grid: GridTopology, size: int, tp: int, comm: str) -> np.ndarray:
    """comm_cost per shape id of the pod's block index (inf for shapes of another size)."""
    from podfleet.scheduler.blocks import block_index

    idx = block_index(grid)
    out = np.full(len(idx.shapes), np.inf)
    for sid in idx.shape_ids_for(size):
        out[sid] = comm_cost(grid, idx.shapes[sid].shape, tp, comm)
    out.setflags(write=False)
    return out


def preferred_shape(grid: GridTopology, size: int, tp: int = 1, comm: str = "ring") -> tuple[int, ...]:
    """The block shape of ``size`` chips with the lowest communication cost."""
    from podfleet.scheduler.blocks import block_index

    costs = _shape_costs(grid, size, tp, comm)
    return block_index(grid).shapes[int(np.argmin(costs))].shape


def _planned(planner: ShapePlanner, model: Any, chips: int, grid: GridTopology,
             shape: tuple[int, ...], comp: str = "none") -> tuple[ShapePlan | None, str | None]:
    """(plan, None) or (None, why the shape cannot run the model). Plans are pure
    functions of their inputs (a frozen result): a fleet placing many jobs of one model
    plans each shape once, not once per job. ``comp``: the job's gradient compression
    (``perf.compression``), so the plan's step time is the one the job will run at."""
    try:
        return _planned_cached(planner, model, chips, grid, shape, comp)
    except TypeError:  # an unhashable model or planner: planned without the cache
        return _plan_shape(planner, model, chips, grid, shape, comp)


@functools.lru_cache(maxsize=1024)
def _planned_cached(planner: ShapePlanner, model: Any, chips: int, grid: GridTopology,
                    shape: tuple[int, ...], comp: str = "none") -> tuple[ShapePlan | None, str | None]:
    return _plan_shape(planner, model, chips, grid, shape, comp)


def _plan_shape(planner: ShapePlanner, model: Any, chips: int, grid: GridTopology,
                shape: tuple[int, ...], comp: str = "none") -> tuple[ShapePlan | None, str | None]:
    try:
        p = planner.plan_shape(model, chips, grid, shape, comp)
        float(p.step_time_s)  # a plan without a step time cannot be ranked: the port says it has one
        return p, None
    except (PodfleetError, ValueError) as exc:
        return None, str(exc)


class TopologyBlock:
    name = NAME

    def __init__(self, planner: ShapePlanner | None = None) -> None:
        self.planner = planner

    def score(self, state: CycleState, job: JobRequest, cands: Candidates) -> tuple[Status, np.ndarray]:
        pod0 = cands.cluster.pods[0]
        if pod0.uniform_hops:
            return st.SKIP, np.zeros(len(cands))
        idx = cands.cluster.blocks
        cost: dict[int, float] = {}
        if job.parallelism == "auto":
            sids = np.unique(cands.shape_id)
            cost = self._plan_costs(state, job, pod0.grid, [idx.shapes[s].shape for s in sids], sids)
        if cost:
            costs = np.array([cost[int(s)] for s in cands.shape_id])
        else:
            costs = _shape_costs(pod0.grid, job.chips, job.tp, job.comm)[cands.shape_id]
        penalty = candidate_penalty(cands)  # None while every link is up
        if penalty is not None:
            costs = np.where(costs > 0, costs * penalty, costs)
        traffic = candidate_traffic(cands)  # None while no running ring reported its links
        if traffic is not None:
            costs = np.where(costs > 0, costs * traffic, costs)
        best = costs.min()
        if best <= 0:
            return st.SUCCESS, np.where(costs <= 0, 100.0, 0.0)
        return st.SUCCESS, 100.0 * best / costs

    def _plan_costs(self, state: CycleState, job: JobRequest, grid: GridTopology, shapes: list[tuple[int, ...]], sids: np.ndarray) -> dict[int, float]:
        planner = self.planner
        if planner is None:
            state["plan_note"] = "planner not available; shape chosen by communication cost"
            return {}
        plans, out = state.setdefault("plans", {}), {}
        for shape, sid in zip(shapes, sids, strict=True):
            p, err = _planned(planner, job.model, job.chips, grid, shape, job.grad_compression)
            if p is not None:
                out[int(sid)] = float(p.step_time_s)
                plans[shape] = p
            else:
                # This shape cannot run the model (memory, divisibility): rank it last.
                out[int(sid)] = float("inf")
                state.setdefault("plan_errors", {})[shape] = err
        finite = [v for v in out.values() if np.isfinite(v)]
        if not finite:
            return {}
        worst = max(finite) * 1e3
        return {k: (v if np.isfinite(v) else worst) for k, v in out.items()}


def factory(handle: Handle, args: dict[str, Any]) -> TopologyBlock:
    if args:  # the planner comes through the handle (the scheduler's port), not from config
        raise InvalidInputError(f"scheduler plugin {NAME} takes no arguments, got {', '.join(sorted(args))}",
                                field="plugins")
    return TopologyBlock(handle.planner)
