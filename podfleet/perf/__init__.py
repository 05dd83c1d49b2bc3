"""Performance models: pure functions over chip specs and topologies (no I/O, no clock).

Public entry points:

- ``step_time_s(model, chips, topology="trn2-ultraserver", *, plan=None, seq_len=None,
  global_batch=None, slow_chip_factor=1.0, down_links=(), degraded_links=None,
  block_shape=None) -> float``: seconds per training step of a job (the twin uses it);
  pass the planner's plan, otherwise a greedy fitting plan is used.
- ``estimate_step(...)`` (same arguments) -> ``StepEstimate`` with the breakdown,
  MFU/HFU, memory per chip and ``fits``.
- ``models``: ``ModelSpec``, ``MODELS``, ``get_model``; ``flops``; ``memory``;
  ``collectives``; ``plan.Plan``; ``validation`` and ``calibration``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import TypedDict, Unpack

from podfleet.errors import InfeasibleError
from podfleet.hardware.topology import Topology
from podfleet.perf.collectives import HEALTHY, LinkHealth
from podfleet.perf.compression import GradCompression, parse_grad_compression
from podfleet.perf.flops import Recompute
from podfleet.perf.layout import block_link_map, job_topology, resolve_topology
from podfleet.perf.models import MODELS, ModelSpec, custom_model, get_model
from podfleet.perf.plan import Plan
from podfleet.perf.step import StepEstimate, estimate

__all__ = [
    "MODELS", "LinkHealth", "ModelSpec", "Plan", "Recompute", "StepEstimate", "StepOptions",
    "custom_model", "default_global_batch", "default_plan", "estimate", "estimate_step",
    "get_model", "step_time_s",
]

TOKENS_PER_BATCH = 4 * 2**20  # a typical LLM pre-training batch, ~4M tokens


def default_global_batch(model: ModelSpec, chips: int) -> int:
    """~4M tokens per step, a power of two sequences, at least one per chip."""
    b = 1
    while b * model.seq_len < TOKENS_PER_BATCH:
        b *= 2
    while b < chips:
        b *= 2
    return b


def _pow2_divisors(n: int, limit: int) -> list[int]:
    return [d for d in (2**k for k in range(12)) if d <= limit and n % d == 0]


@functools.lru_cache(maxsize=1024)
def default_plan(model: ModelSpec, chips: int, global_batch: int, topo: Topology) -> Plan:
    """A greedy plan: the least model parallelism (tp first, then pp) that fits in HBM
    with selective recomputation, ZeRO-1 and micro-batch 1; then, on that layout, the
    fastest fitting power-of-two micro-batch (a stack with a fixed cost per micro-batch,
    Neuron's, should not run thousands of tiny ones). The planner finds better."""
    for mp in range(1, chips + 1):
        for tp in _pow2_divisors(model.heads, min(mp, chips)):
            if mp % tp or chips % mp:
                continue
            pp = mp // tp
            dp = chips // mp
            if model.layers % pp or global_batch % dp:
                continue
            plan = Plan(tp, pp, dp, 1, global_batch // dp, Recompute.selective, 1)
            if estimate(model, plan, topo).fits:
                return _fastest_micro_batch(model, plan, topo)
    raise InfeasibleError(
        f"{model.name} ({model.params / 1e9:.1f}B params) fits no plan on {chips} "
        f"{topo.chip_type} chips with global batch {global_batch}",
        field="chips",
    )


def _fastest_micro_batch(model: ModelSpec, plan: Plan, topo: Topology) -> Plan:
    per_replica = plan.micro_batch * plan.num_micro_batches
    best, best_s = plan, estimate(model, plan, topo).step_time_s
    b = 2
    while b <= per_replica and per_replica % b == 0:
        cand = dataclasses.replace(plan, micro_batch=b, num_micro_batches=per_replica // b)
        est = estimate(model, cand, topo)
        if not est.fits:
            break  # memory only grows with the micro-batch
        if est.step_time_s < best_s:
            best, best_s = cand, est.step_time_s
        b *= 2
    return best


def estimate_step(
    model: str | ModelSpec,
    chips: int,
    topology: str | Topology = "trn2-ultraserver",
    *,
    plan: Plan | None = None,
    seq_len: int | None = None,
    global_batch: int | None = None,
    slow_chip_factor: float = 1.0,
    down_links: Iterable[int] = (),
    degraded_links: Mapping[int, float] | None = None,
    block_shape: tuple[int, ...] | None = None,
    grad_compression: str | GradCompression | None = None,
) -> StepEstimate:
    spec = (get_model(model) if isinstance(model, str) else model).with_seq_len(seq_len)
    parent = resolve_topology(topology, chips)
    topo = job_topology(parent, chips, tuple(block_shape) if block_shape else None)
    health = LinkHealth(frozenset(down_links), dict(degraded_links or {}))
    if not health.empty and topo is not parent:
        mapping = block_link_map(parent, topo)
        health = LinkHealth(
            frozenset(mapping[i] for i in health.down if i in mapping),
            {mapping[i]: f for i, f in health.degraded.items() if i in mapping},
        )
    if plan is None:
        gb = global_batch or default_global_batch(spec, chips)
        plan = default_plan(spec, chips, gb, topo)
    plan.check(spec, chips)
    return estimate(spec, plan, topo, health=health if not health.empty else HEALTHY,
                    slow_chip_factor=slow_chip_factor, compression=parse_grad_compression(grad_compression))


class StepOptions(TypedDict, total=False):
    """The keyword arguments of :func:`estimate_step`."""

    plan: Plan | None
    seq_len: int | None
    global_batch: int | None
    slow_chip_factor: float
    down_links: Iterable[int]
    degraded_links: Mapping[int, float] | None
    block_shape: tuple[int, ...] | None
    grad_compression: str | GradCompression | None


def step_time_s(
    model: str | ModelSpec,
    chips: int,
    topology: str | Topology = "trn2-ultraserver",
    **kwargs: Unpack[StepOptions],
) -> float:
    """Seconds per training step; see ``estimate_step`` for the keyword arguments."""
    return estimate_step(model, chips, topology, **kwargs).step_time_s
