"""Step time of a plan: compute, tensor-parallel communication, pipeline bubble,
data-parallel gradient reduction overlapped with backward, and the optimizer step.

Per micro-batch and pipeline stage (L/p layers):

    forward   = L/p * (layer_fwd + 2 tp_all_reduce)     (reduce-scatter + all-gather
    backward  = L/p * (layer_bwd + 2 tp_all_reduce)      with sequence parallelism:
    recompute = full: forward again; selective: the      the same volume)
                attention core; none: 0
    p2p       = 2 * v sends of s*b*h*2/t bytes to the next stage (scatter-gather),
                each followed, without sequence parallelism, by an all-gather of the
                s*b*h*2 bytes over the tensor-parallel group on the receiver

The last stage also runs the logits and loss. With m micro-batches and v chunks per
stage the pipeline takes m * t_last + (p-1)/v * t_stage (1F1B: bubble fraction
(p-1)/m; interleaved: (p-1)/(v*m)). The gradient reduction over the data-parallel
group overlaps the backward of the last micro-batch and only what sticks out counts
(``overlap_grad_reduce=False``: it runs after the pipeline flush, fully exposed);
ZeRO-1 turns it into reduce-scatter + all-gather of the updated parameters (the
all-gather hides behind the next forward); ZeRO-2 reduce-scatters every
micro-batch's gradients; ZeRO-3 gathers parameters for every
micro-batch. The optimizer step is memory-bound: 28 bytes of HBM traffic per local
parameter (Adam on fp32 master weights).

Stack terms (``Efficiency``, per chip type): tensor-parallel collectives run over
``core_ranks`` ranks per chip (NeuronCores: a flat ring of t*c ranks moves (tc-1)/tc of
the data, not (t-1)/t); every micro-batch pays ``microbatch_s`` per model chunk on each
stage (a compiled graph's launch and synchronisation on Neuron; 0 on CUDA, whose kernel
launches queue asynchronously), in the steady state and in the bubble alike.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from podfleet.hardware.specs import ChipSpec, get_chip
from podfleet.hardware.topology import Topology
from podfleet.perf import collectives as col
from podfleet.perf import flops
from podfleet.perf.collectives import HEALTHY, LinkHealth
from podfleet.perf.compression import MEASURED, NONE, CodecFigures, GradCompression
from podfleet.perf.compression import effect as compression_effect
from podfleet.perf.compute import BYTES, layer_times
from podfleet.perf.efficiency import Efficiency, efficiency_for
from podfleet.perf.flops import Recompute
from podfleet.perf.layout import all_dp_groups, all_tp_groups, dp_group, tp_group
from podfleet.perf.memory import MIXED, MemoryBreakdown, Precision, memory_per_chip, stage_params
from podfleet.perf.models import ModelSpec
from podfleet.perf.plan import Plan

OPTIMIZER_BYTES_PER_PARAM = 28


@dataclass(frozen=True)
class StepEstimate:
    step_time_s: float
    compute_s: float  # pipeline compute incl. recompute, without the bubble
    tp_comm_s: float
    pp_comm_s: float
    bubble_s: float
    dp_comm_exposed_s: float
    optimizer_s: float
    # The stack's fixed cost per micro-batch in the steady state (the bubble holds its own
    # share): the breakdown's terms add up to the step.
    microbatch_overhead_s: float
    grad_codec_s: float  # gradient compression's encode/decode or factorisation (exposed)
    model_flops: float
    hardware_flops: float
    tokens_per_s: float
    tflops_per_chip: float
    mfu: float
    hfu: float
    memory: MemoryBreakdown
    hbm_bytes: int

    @property
    def fits(self) -> bool:
        return self.memory.total_bytes <= self.hbm_bytes

    def to_dict(self) -> dict[str, object]:
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_chip": self.tflops_per_chip,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "memory_per_chip_bytes": int(self.memory.total_bytes),
            "hbm_bytes": self.hbm_bytes,
            "fits": self.fits,
            "breakdown_s": {
                "compute": self.compute_s,
                "tp_comm": self.tp_comm_s,
                "pp_comm": self.pp_comm_s,
                "bubble": self.bubble_s,
                "dp_comm_exposed": self.dp_comm_exposed_s,
                "optimizer": self.optimizer_s,
                "microbatch_overhead": self.microbatch_overhead_s,
                "grad_codec": self.grad_codec_s,
            },
            "memory_bytes": self.memory.to_dict(),
        }


_COLLECTIVES = {"ar": col.all_reduce_s, "rs": col.reduce_scatter_s, "ag": col.all_gather_s}


@functools.lru_cache(maxsize=16384)
def _group_cost(kind: str, which: str, topo: Topology, tp: int, dp: int, pp: int, nbytes: float,
                link_eff: float, health: LinkHealth, core_ranks: int = 1, net_eff: float | None = None) -> float:
    """The slowest group's collective: every group of a kind runs at once and the step
    waits for the last. Healthy groups of one kind are symmetric, so one stands for all.
    ``core_ranks``: ranks per chip of a tensor-parallel group (NeuronCores); the chip's
    cores of a data-parallel group each reduce their own shard, the chip's traffic as one.
    ``net_eff``: the network tier's efficiency where it differs from ``link_eff``."""
    if which == "tp":
        groups = all_tp_groups(tp, tp * dp * pp) if not health.empty else [tp_group(tp)]
    else:
        groups = all_dp_groups(tp, dp, pp) if not health.empty else [dp_group(tp, dp)]
    fn = _COLLECTIVES[kind]
    def levels(g: tuple[int, ...]) -> tuple[col.Level, ...]:
        lv = col.group_levels(topo, g, health)
        if net_eff is not None and net_eff != link_eff:
            lv = col.scale_network(lv, net_eff / link_eff)
        return col.with_core_ranks(lv, core_ranks) if which == "tp" else lv

    return max(fn(levels(g), nbytes, link_eff) for g in groups)


def estimate(
    model: ModelSpec,
    plan: Plan,
    topo: Topology,
    *,
    chip: ChipSpec | None = None,
    eff: Efficiency | None = None,
    precision: Precision = MIXED,
    health: LinkHealth = HEALTHY,
    slow_chip_factor: float = 1.0,
    dtype: str = "bf16",
    memory: MemoryBreakdown | None = None,
    overlap_grad_reduce: bool = True,
    compression: GradCompression = NONE,
    codec: CodecFigures = MEASURED,
) -> StepEstimate:
    """Predict one training step of ``plan`` on ``topo`` (the job's own topology, whose
    chips 0..n-1 are the ranks). ``memory``: the plan's memory if already computed.

    ``overlap_grad_reduce``: whether the data-parallel gradient reduction overlaps the
    backward (PyTorch DDP buckets, Megatron-core ``--overlap-grad-reduce``). The
    validation runs did not: Megatron-LM of 2021/2022 (its default local DDP all-reduced
    the gradients in ``train_step`` after ``forward_backward_func`` returned, i.e. after
    the pipeline flush), and NxD/NeMo's ZeRO-1 on Neuron (torch-xla's
    ``ZeroRedundancyOptimizer.step`` reduce-scatters after the accumulation loop).

    ``compression``: gradient compression of the data-parallel reduction
    (``perf.compression``: its volume, collective and codec time; the codec competes
    with compute, so its time is never hidden)."""
    chip = chip or get_chip(topo.chip_type)
    eff = eff or efficiency_for(chip.name)
    cr = eff.core_ranks
    tp, pp, dp, v, m = plan.tp, plan.pp, plan.dp, plan.interleave, plan.num_micro_batches
    sp = plan.sequence_parallel and tp > 1
    lt = layer_times(model, tp, sp, plan.micro_batch, chip, eff, dtype)
    slow = slow_chip_factor
    layers = model.layers / pp
    act_bytes = plan.micro_batch * model.seq_len * model.hidden * BYTES

    tp_ar = 0.0
    if tp > 1:
        tp_ar = _group_cost("ar", "tp", topo, tp, dp, pp, act_bytes, eff.link, health, cr, eff.net)
    comm_pass = layers * 2 * tp_ar  # two all-reduces per layer per pass
    fwd = layers * lt.fwd_s * slow
    bwd = layers * lt.bwd_s * slow
    if plan.recompute == Recompute.full:
        rec, rec_comm = fwd, comm_pass
    elif plan.recompute == Recompute.selective and not model.flash_attention:
        rec, rec_comm = layers * lt.attn_core_fwd_s * slow, 0.0
    else:
        rec, rec_comm = 0.0, 0.0
    p2p = 0.0
    if pp > 1:
        nbytes = act_bytes / (tp if tp > 1 else 1)
        p2p = 2 * v * col.p2p_s(topo, 0, tp * dp, nbytes, eff.link, eff.net)
        if tp > 1 and not sp:
            # Scatter/gather (Narayanan et al. 2021, sec. 4.1): each tensor-parallel rank
            # sends 1/t of the replicated stage output, and the receiving stage rebuilds
            # it with an all-gather over its tensor-parallel group (NVLink) before the
            # next layer can start. With sequence parallelism the output is already
            # sharded by sequence, so the 1/t piece is all the next stage needs.
            p2p += 2 * v * _group_cost("ag", "tp", topo, tp, dp, pp, act_bytes, eff.link, health, cr, eff.net)
    overhead = v * eff.microbatch_s  # one launch per model chunk and micro-batch
    stage = fwd + bwd + rec + 2 * comm_pass + rec_comm + p2p + overhead
    last = stage + (lt.logits_fwd_s + lt.logits_bwd_s) * slow
    bubble = (pp - 1) / v * stage if pp > 1 else 0.0
    pipeline = m * last + bubble

    # Data-parallel gradient reduction.
    dp_exposed = 0.0
    codec_s = 0.0
    local_params = stage_params(model, plan)
    if dp > 1:
        dims = (topo, tp, dp, pp)
        grad_bytes = local_params * precision.grad_bytes
        param_bytes = local_params * precision.param_bytes
        fx = compression_effect(compression, model, grad_bytes_per_param=precision.grad_bytes,
                                local_params=local_params, dp=dp, chip_flops=chip.peak_flops(dtype) * eff.matmul,
                                hbm_bytes_per_s=chip.hbm_bw_bytes_per_s * eff.hbm, codec=codec)
        codec_s = fx.codec_s * slow

        def grads(kind: str) -> float:
            """The gradient collective ``kind`` ("ar" or "rs") under compression: bf16 shrinks
            it; PowerSGD and lossless reduce whole gradients (each rank keeps its shard)."""
            if fx.allgather:  # output: dp compressed buckets, dp * c * V = 2 * volume_ratio * V
                return _group_cost("ag", "dp", *dims, 2.0 * fx.volume_ratio * grad_bytes, eff.link, health,
                                  net_eff=eff.net)
            if fx.rounds > 1:
                return fx.rounds * _group_cost("ar", "dp", *dims, grad_bytes * fx.volume_ratio / fx.rounds,
                                               eff.link, health, net_eff=eff.net)
            return _group_cost(kind, "dp", *dims, grad_bytes * fx.volume_ratio, eff.link, health, net_eff=eff.net)

        # The window the reduction hides behind: the last micro-batch's backward, or
        # nothing when the framework reduces after the flush (see the docstring).
        window_bwd = bwd + rec if overlap_grad_reduce else 0.0
        window_fwd = fwd if overlap_grad_reduce else 0.0
        if plan.zero_stage == 0:
            dp_exposed = max(0.0, grads("ar") - window_bwd)
        elif plan.zero_stage == 1:
            rs = grads("rs")
            ag = _group_cost("ag", "dp", *dims, param_bytes, eff.link, health, net_eff=eff.net)
            dp_exposed = max(0.0, rs - window_bwd) + max(0.0, ag - window_fwd)
        elif plan.zero_stage == 2:
            # Sharded gradients cannot accumulate locally: every micro-batch's backward
            # reduce-scatters its gradients.
            rs = grads("rs")
            ag = _group_cost("ag", "dp", *dims, param_bytes, eff.link, health, net_eff=eff.net)
            dp_exposed = m * max(0.0, rs - window_bwd) + max(0.0, ag - window_fwd)
            codec_s *= m
        else:
            rs = grads("rs")
            ag = _group_cost("ag", "dp", *dims, param_bytes, eff.link, health, net_eff=eff.net)
            dp_exposed = m * max(0.0, 2 * ag + rs - (fwd + bwd + rec if overlap_grad_reduce else 0.0))
            codec_s *= m
    opt_params = local_params / (dp if plan.zero_stage >= 1 else 1)
    optimizer = opt_params * OPTIMIZER_BYTES_PER_PARAM / (chip.hbm_bw_bytes_per_s * eff.hbm) * slow

    step = pipeline + dp_exposed + codec_s + optimizer
    gb = plan.global_batch
    mf = flops.model_flops_per_step(model, gb)
    hf = flops.hardware_flops_per_step(model, gb, plan.recompute)
    peak = chip.peak_flops(dtype)
    n = plan.chips
    return StepEstimate(
        step_time_s=step,
        compute_s=m * (fwd + bwd + rec + (lt.logits_fwd_s + lt.logits_bwd_s) * slow),
        tp_comm_s=m * (2 * comm_pass + rec_comm),
        pp_comm_s=m * p2p,
        bubble_s=bubble,
        dp_comm_exposed_s=dp_exposed,
        optimizer_s=optimizer,
        microbatch_overhead_s=m * overhead,
        grad_codec_s=codec_s,
        model_flops=mf,
        hardware_flops=hf,
        tokens_per_s=gb * model.seq_len / step,
        tflops_per_chip=mf / step / n / 1e12,
        mfu=mf / (step * n * peak),
        hfu=hf / (step * n * peak),
        memory=memory or memory_per_chip(model, plan, precision),
        hbm_bytes=chip.hbm_bytes,
    )
