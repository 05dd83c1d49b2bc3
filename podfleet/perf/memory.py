"""Memory per chip: model states by precision and ZeRO stage, activations by recompute mode.

Activations follow Korthikanti et al. 2022 (arXiv 2205.05198), bytes per layer for a
micro-batch of b sequences of s tokens, generalised to GQA and gated MLPs:

    replicated part    10*s*b*h        (LayerNorm inputs, QKV/MLP inputs, dropout masks)
                                       divided by t with sequence parallelism
    tensor-parallel    s*b*(4h + 4h_kv + mlp)/t   (Q, K, V, proj input, MLP activations;
                                       mlp = 16h for GeLU with ffn 4h, 6*ffn gated)
    attention scores   5*a*s^2*b/t     (eager attention only; dropped by selective
                                       recomputation and never stored by fused attention)

For GPT without parallelism that is s*b*h*(34 + 5*a*s/h). Full recomputation keeps
only each layer's input, 2*s*b*h (/t with sequence parallelism). With pipelining the
first stage holds the most micro-batches in flight: min(m, p) for 1F1B, times
(1 + (p-1)/(p*v)) when interleaved with v chunks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from podfleet.perf.flops import Recompute
from podfleet.perf.models import ModelSpec
from podfleet.perf.plan import Plan

GiB = 1024**3
# Runtime workspace, allocator fragmentation, communication buffers: a fixed reserve per
# chip (a parameter; ~2-3 GiB is typical of PyTorch/Neuron runtimes).
RESERVED_BYTES = 2 * GiB


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter of each model state (mixed precision with Adam by default)."""

    param_bytes: int = 2  # bf16/fp16 weights
    grad_bytes: int = 2
    optimizer_bytes: int = 12  # fp32 master weights + Adam m and v

    @property
    def total_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes


MIXED = Precision()


@dataclass(frozen=True)
class MemoryBreakdown:
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    reserved_bytes: float

    @property
    def total_bytes(self) -> float:
        return (
            self.params_bytes + self.grads_bytes + self.optimizer_bytes
            + self.activations_bytes + self.reserved_bytes
        )

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def activation_bytes_per_layer(
    m: ModelSpec, micro_batch: int, tp: int, sequence_parallel: bool, recompute: Recompute | str
) -> float:
    rc = Recompute(recompute)
    s, b, h = m.seq_len, micro_batch, m.hidden
    tsp = tp if sequence_parallel else 1
    if rc == Recompute.full:
        return 2.0 * s * b * h / tsp
    mlp = 4 * m.ffn if not m.gated_mlp else 6 * m.ffn
    out = s * b * (10 * h / tsp + (4 * h + 4 * m.kv_hidden + mlp) / tp)
    if rc == Recompute.none and not m.flash_attention:
        out += 5.0 * m.heads * s * s * b / tp
    return out


def in_flight_micro_batches(plan: Plan) -> float:
    """Micro-batches whose activations the busiest (first) stage holds at once."""
    if plan.pp == 1:
        return 1.0
    held = float(min(plan.num_micro_batches, plan.pp))
    if plan.interleave > 1:
        held *= 1.0 + (plan.pp - 1) / (plan.pp * plan.interleave)
    return held


def stage_params(m: ModelSpec, plan: Plan) -> float:
    """Parameters on the busiest pipeline stage's chip (before ZeRO sharding)."""
    layers = m.layers / plan.pp * m.layer_params
    first = layers + m.embedding_params
    last = layers + m.output_params + (m.embedding_params if plan.pp == 1 else 0)
    if plan.pp > 1 and m.tied_embeddings:
        last += m.vocab * m.hidden  # the last stage keeps its own copy of the tied weights
    return max(first, last) / plan.tp


def memory_per_chip(m: ModelSpec, plan: Plan, precision: Precision = MIXED) -> MemoryBreakdown:
    p = stage_params(m, plan)
    dp = plan.dp
    params = p * precision.param_bytes / (dp if plan.zero_stage >= 3 else 1)
    grads = p * precision.grad_bytes / (dp if plan.zero_stage >= 2 else 1)
    opt = p * precision.optimizer_bytes / (dp if plan.zero_stage >= 1 else 1)
    per_layer = activation_bytes_per_layer(
        m, plan.micro_batch, plan.tp, plan.sequence_parallel, plan.recompute
    )
    acts = per_layer * (m.layers / plan.pp) * in_flight_micro_batches(plan)
    if plan.recompute == Recompute.full:
        # One layer's full activations are live while it is recomputed for backward.
        acts += activation_bytes_per_layer(
            m, plan.micro_batch, plan.tp, plan.sequence_parallel, Recompute.none
        )
    elif plan.recompute == Recompute.selective and not m.flash_attention:
        # ... and one layer's recomputed attention scores under selective recomputation.
        acts += 5.0 * m.heads * m.seq_len**2 * plan.micro_batch / plan.tp
    if plan.zero_stage >= 3:
        # Gathered full weights (and their gradients before reduce-scatter) of the
        # current and the prefetched layer.
        params += 2 * m.layer_params / plan.tp * (precision.param_bytes + precision.grad_bytes)
    # fp32 logits for the loss on the last stage, vocabulary-parallel across tp.
    logits = 4.0 * m.seq_len * plan.micro_batch * m.vocab / plan.tp
    return MemoryBreakdown(params, grads, opt, acts + logits, float(RESERVED_BYTES))
