"""Compute time per layer: a roofline per kernel.

Every GEMM takes max(FLOPs / (peak * matmul_eff), bytes / (HBM_bw * hbm_eff)), so
small or skinny GEMMs (and the s x s attention-score GEMMs of eager attention, whose
arithmetic intensity is only the head dimension) become memory-bound. Elementwise
kernels (LayerNorm, dropout + residual, GeLU/SwiGLU, softmax) are memory-bound: their
HBM traffic per token, forward, is

    22h (/t with sequence parallelism)  two norms + two dropout-residual blocks
    4*ffn/t (GeLU) or 6*ffn/t (SwiGLU)  activation function
    9*a*s/t                             softmax + dropout on the scores (eager only)

Backward runs two GEMMs per forward GEMM and about twice the elementwise traffic.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from podfleet.hardware.specs import ChipSpec
from podfleet.perf.efficiency import Efficiency
from podfleet.perf.models import ModelSpec

BYTES = 2  # bf16/fp16 activations and weights


@dataclass(frozen=True)
class LayerTimes:
    """Seconds per micro-batch on one chip (no communication)."""

    fwd_s: float  # one transformer layer, forward
    bwd_s: float  # one transformer layer, backward
    attn_core_fwd_s: float  # the part selective recomputation repeats
    logits_fwd_s: float  # output layer + loss, forward (last stage only)
    logits_bwd_s: float


def gemm_s(m: float, n: float, k: float, peak: float, hbm_bw: float, eff: Efficiency, batch: float = 1) -> float:
    flops = 2.0 * m * n * k * batch
    nbytes = BYTES * (m * k + k * n + m * n) * batch
    return max(flops / (peak * eff.matmul), nbytes / (hbm_bw * eff.hbm))


@functools.lru_cache(maxsize=8192)
def layer_times(
    m: ModelSpec, tp: int, sequence_parallel: bool, micro_batch: int, chip: ChipSpec, eff: Efficiency,
    dtype: str = "bf16",
) -> LayerTimes:
    peak = chip.peak_flops(dtype)
    bw = chip.hbm_bw_bytes_per_s
    mem_bw = bw * eff.hbm
    s, h, f, a = m.seq_len, m.hidden, m.ffn, m.heads
    tokens = micro_batch * s
    tsp = tp if sequence_parallel else 1

    def g(n: float, k: float) -> float:
        return gemm_s(tokens, n, k, peak, bw, eff)

    weights = (
        g((h + 2 * m.kv_hidden) / tp, h)  # QKV
        + g(h, h / tp)  # attention output projection
        + g((m.mlp_mats - 1) * f / tp, h)  # MLP up (and gate)
        + g(h, f / tp)  # MLP down
    )
    heads_local = micro_batch * a / tp
    d = m.head_dim
    if m.flash_attention:
        attn = 4.0 * tokens * s * h / tp / (peak * eff.matmul)
        attn_mem = 0.0
    else:
        attn = gemm_s(s, s, d, peak, bw, eff, heads_local) + gemm_s(s, d, s, peak, bw, eff, heads_local)
        attn_mem = 9.0 * a * s * tokens / tp / mem_bw
    act = (4 if not m.gated_mlp else 6) * f / tp
    elementwise = tokens * (22.0 * h / tsp + act) / mem_bw
    fwd = weights + attn + attn_mem + elementwise
    attn_bwd = 2 * attn + 2 * attn_mem
    if m.flash_attention:
        attn_bwd += attn / 2  # the fused backward recomputes the scores
    bwd = 2 * weights + attn_bwd + 2 * elementwise
    logits = g(m.vocab / tp, h)
    loss = tokens * 10.0 * m.vocab / tp / mem_bw  # read logits, fp32 softmax, write grads
    return LayerTimes(fwd, bwd, attn + attn_mem, logits + loss, 2 * logits + loss)
