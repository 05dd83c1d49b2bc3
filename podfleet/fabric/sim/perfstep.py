"""The twin's step time from the performance model (``podfleet.perf``).

The healthy estimate of a job (its model, plan and chips on this topology) is computed
once and cached; each step then applies what the twin knows and the pure model does
not: thermal throttling (the slowest clock in the gang stretches compute, bubble and
optimizer) and link health (the slowest live link stretches the communication that is
not hidden behind compute). Per-step noise is applied by the job loop.

Gradient compression (``options["grad_compression"]``, ``perf.compression``) changes
the data-parallel reduction, and its codec time joins the compute (a throttled clock
stretches it too).

The plan comes from the job's options, as the control plane resolved it: ``plan``
(a dict of ``perf.Plan`` fields) or ``parallelism`` ({tp, pp, dp}); without one, perf's
greedy default plan. A model perf does not know (and no ``model_dims``) returns None,
and the caller falls back to the simple model in ``workload``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from podfleet.errors import PodfleetError
from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.sim.context import StepModel
from podfleet.hardware.topology import FleetTopology, GridTopology
from podfleet.perf import Plan, estimate_step
from podfleet.perf.compression import NONE, GradCompression, parse_grad_compression
from podfleet.perf.models import MODELS, ModelSpec, custom_model
from podfleet.perf.options import plan_from_options


@dataclass(frozen=True)
class HealthyStep:
    compute_s: float  # compute + bubble + optimizer: scales with the slowest clock
    tp_s: float  # exposed communication by group kind: scales with the slowest link,
    pp_s: float  # and with the network tier's bandwidth where a group of that kind
    dp_s: float  # spans pods (``_spanning``)
    tokens_per_step: float
    tp: int = 1
    dp: int = 1
    fixed_s: float = 0.0  # the stack's per-micro-batch cost (host side: no clock, no link stretches it)

    @property
    def comm_s(self) -> float:
        return self.tp_s + self.pp_s + self.dp_s

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s + self.fixed_s


def model_of(spec: WorkerGroupSpec) -> ModelSpec | None:
    dims = spec.options.get("model_dims")
    if isinstance(dims, Mapping) and dims:
        try:
            return custom_model(int(dims["layers"]), int(dims["hidden"]), int(dims["heads"]),
                                int(dims.get("vocab", 32000)), seq_len=int(dims.get("seq_len", 2048)))
        except (KeyError, TypeError, ValueError, PodfleetError):
            return None
    return MODELS.get(spec.model)


def _plan_of(spec: WorkerGroupSpec, model: ModelSpec, fabric: StepModel) -> Plan:
    return plan_from_options(model, len(spec.chips), spec.options, fabric.topology)


@functools.lru_cache(maxsize=1024)
def _healthy(model: ModelSpec, n: int, topology: Any, plan: Plan, comp: GradCompression = NONE) -> HealthyStep:
    est = estimate_step(model, n, topology, plan=plan, grad_compression=comp)
    compute = est.compute_s + est.bubble_s + est.optimizer_s + est.grad_codec_s  # the codec computes
    return HealthyStep(compute, est.tp_comm_s, est.pp_comm_s, est.dp_comm_exposed_s,
                       est.tokens_per_s * est.step_time_s, plan.tp, plan.dp, est.microbatch_overhead_s)


def healthy_step(spec: WorkerGroupSpec, fabric: StepModel) -> HealthyStep | None:
    """The cached healthy estimate of ``spec`` on ``fabric`` (None: perf cannot model it)."""
    model = model_of(spec)
    if model is None:
        return None
    try:
        plan = _plan_of(spec, model, fabric)
        comp = parse_grad_compression(spec.options.get("grad_compression"))
        return _healthy(model, len(spec.chips), fabric.topology, plan, comp)
    except PodfleetError:
        # The plan does not fit or does not divide the chips: the control plane validates
        # real submissions; the twin keeps running on the simple model.
        return None


def _spanning(chips: tuple[int, ...], topology: Any, tp: int, dp: int) -> tuple[float, float, float]:
    """Bandwidth factors (tensor, pipeline, data parallel) of a gang that fits in one
    group (the healthy estimate places it there) but now spans groups, e.g. ranks moved
    to chips of another pod: a communicator group whose ranks sit in two pods talks over
    the network tier, so its exposed communication stretches by the group's slowest
    link over the network's; groups still inside one pod keep their NeuronLinks.

    Ranks follow Megatron's order (``perf.layout``: tp fastest, then dp, then pp), so a
    tensor-parallel group moved whole keeps its all-reduces on NeuronLink and only its
    pipeline sends and gradient reduction cross. The data-parallel factor stretches only
    the reduction the healthy estimate left exposed (what it hid behind the backward is
    assumed to stay hidden: an underestimate when the network is much slower)."""
    if not isinstance(topology, FleetTopology) or not isinstance(topology.group, GridTopology):
        return 1.0, 1.0, 1.0
    g = topology.group.n_chips
    n = len(chips)
    if n > g:
        # A gang across pods is estimated with the block level's EFA; one whose pods sit
        # behind more than one spine pays the fleet level on what crosses pods (its
        # pipeline and data-parallel traffic: tensor-parallel groups stay inside a pod).
        span = g * topology.pods_per_block
        if min(chips) // span == max(chips) // span:
            return 1.0, 1.0, 1.0
        cross = min(1.0, topology.level("fleet").bw_per_chip_bytes_per_s
                    / topology.level("block").bw_per_chip_bytes_per_s)
        return 1.0, cross, cross
    if min(chips) // g == max(chips) // g:
        return 1.0, 1.0, 1.0
    inside = min(ax.link_bw_bytes_per_s for ax in topology.group.axes)
    slow = min(1.0, topology.net_bw_per_chip_bytes_per_s / inside)
    if tp < 1 or dp < 1 or n % (tp * dp):
        return slow, slow, slow  # ranks not laid out by a plan: every group may cross
    pods = (np.asarray(chips) // g).reshape(n // (tp * dp), dp, tp)  # (pp, dp, tp)
    tp_span = bool((pods.max(axis=2) != pods.min(axis=2)).any())
    dp_span = bool((pods.max(axis=1) != pods.min(axis=1)).any())
    pp_span = bool((np.diff(pods, axis=0) != 0).any())
    return tuple(slow if x else 1.0 for x in (tp_span, pp_span, dp_span))  # type: ignore[return-value]


def perf_breakdown(spec: WorkerGroupSpec, fabric: StepModel) -> tuple[float, float, float] | None:
    """(compute_s, exposed comm s, step_s) with throttling and link health applied."""
    h = healthy_step(spec, fabric)
    if h is None:
        return None
    clock = fabric.gang_clock_factor(spec.chips)
    link_ratio = max(min(1.0, fabric.job_link_bw(spec.chips) / fabric.job_nominal_link_bw(spec.chips)), 1e-3)
    f_tp, f_pp, f_dp = _spanning(spec.chips, fabric.topology, h.tp, h.dp)
    compute = h.compute_s / clock + h.fixed_s
    comm = (h.tp_s / f_tp + h.pp_s / f_pp + h.dp_s / f_dp) / link_ratio
    return compute, comm, compute + comm
