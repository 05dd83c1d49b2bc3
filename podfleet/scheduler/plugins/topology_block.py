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

``parallelism="auto"``: if ``podfleet.planner`` is importable, each candidate shape is
planned (``plan(model, chips, topology=, block_shape=)``) and scored by predicted step
time instead; the plan travels with the placement. Without a planner the comm cost is
used and the cycle state says so.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from podfleet.errors import PodfleetError
from podfleet.hardware.topology import GridTopology
from podfleet.scheduler import status as st
from podfleet.scheduler.blocks import local_distance, ring_cost, ring_walk
from podfleet.scheduler.extension import Candidates, CycleState, Handle
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


def _planned(plan_fn: Callable[..., object], model: Any, chips: int, grid: GridTopology,
             shape: tuple[int, ...], comp: str = "none") -> tuple[Any, str | None]:
    """(plan, None) or (None, why the shape cannot run the model). Plans are pure
    functions of their inputs (a frozen result): a fleet placing many jobs of one model
    plans each shape once, not once per job. ``comp``: the job's gradient compression
    (``perf.compression``), so the plan's step time is the one the job will run at."""
    try:
        return _planned_cached(plan_fn, model, chips, grid, shape, comp)
    except TypeError:  # an unhashable model: planned without the cache
        return _plan_shape(plan_fn, model, chips, grid, shape, comp)


@functools.lru_cache(maxsize=1024)
def _planned_cached(plan_fn: Callable[..., object], model: Any, chips: int, grid: GridTopology,
                    shape: tuple[int, ...], comp: str = "none") -> tuple[Any, str | None]:
    return _plan_shape(plan_fn, model, chips, grid, shape, comp)


def _plan_shape(plan_fn: Callable[..., object], model: Any, chips: int, grid: GridTopology,
                shape: tuple[int, ...], comp: str = "none") -> tuple[Any, str | None]:
    try:
        # Only a compressed job passes the argument: a planner without it still plans the rest.
        kw = {"grad_compression": comp} if comp != "none" else {}
        p = plan_fn(model, chips, topology=grid, block_shape=shape, **kw)
        _step_time_s(p)
        return p, None
    except (PodfleetError, TypeError, ValueError) as exc:
        return None, str(exc)


def _step_time_s(plan: Any) -> float:
    for attr in ("step_time_s", "predicted_step_time_s", "step_s"):
        v = plan.get(attr) if isinstance(plan, dict) else getattr(plan, attr, None)
        if v is not None:
            return float(v)
    raise TypeError(f"plan {type(plan).__name__} has no step time")


class TopologyBlock:
    name = NAME

    def __init__(self, planner_module: str = "podfleet.planner") -> None:
        self.planner_module = planner_module

    def _planner(self) -> Callable[..., object] | None:
        try:
            mod = importlib.import_module(self.planner_module)
        except ImportError:
            return None
        plan_fn: Callable[..., object] | None = getattr(mod, "plan", None)
        return plan_fn

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
        plan_fn = self._planner()
        if plan_fn is None:
            state["plan_note"] = "planner not available; shape chosen by communication cost"
            return {}
        plans, out = state.setdefault("plans", {}), {}
        for shape, sid in zip(shapes, sids, strict=True):
            p, err = _planned(plan_fn, job.model, job.chips, grid, shape, job.grad_compression)
            if err is None:
                out[int(sid)] = _step_time_s(p)
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
    return TopologyBlock(**args)
