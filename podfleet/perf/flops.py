"""FLOPs per training step (the Megatron formula), MFU and HFU.

Per layer and token the forward pass does 2 x (weight matmul parameters) FLOPs plus
4*s*h for the attention scores and the attention-weighted values; the logits add
2*h*V. Backward is twice forward. For GPT (ffn = 4h, no GQA) this is exactly
Narayanan et al.'s 72*B*s*l*h^2*(1 + s/(6h) + V/(12*h*l)). Like the papers we count
full (non-causal) attention, so MFU figures compare across papers.

Hardware FLOPs add what recomputation runs again: full recomputation repeats every
layer's forward (x4/3 of the layer work), selective recomputation repeats the
attention core, which Korthikanti et al. count as the attention term's forward and
backward again (12*s*h per token per layer: their 1 + s/(3h) factor). Fused attention recomputes the score
matrix in its backward (2*s*h) whatever the recompute mode.
"""

from __future__ import annotations

from enum import StrEnum

from podfleet.perf.models import ModelSpec


class Recompute(StrEnum):
    none = "none"
    selective = "selective"
    full = "full"


def layer_matmul_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of one layer's weight matmuls (QKV, proj, MLP)."""
    h, hk, f = m.hidden, m.kv_hidden, m.ffn
    return 2.0 * (h * (h + 2 * hk) + h * h + m.mlp_mats * h * f)


def attention_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of QK^T and (scores)V for one layer."""
    return 4.0 * m.seq_len * m.hidden


def logits_flops_per_token(m: ModelSpec) -> float:
    return 2.0 * m.hidden * m.vocab


def model_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """FLOPs the model needs per step (forward + backward), no recomputation."""
    per_token = m.layers * (layer_matmul_flops_per_token(m) + attention_flops_per_token(m))
    per_token += logits_flops_per_token(m)
    return 3.0 * global_batch * m.seq_len * per_token


def recompute_flops_per_step(m: ModelSpec, global_batch: int, recompute: Recompute | str) -> float:
    """Extra FLOPs executed again because of activation recomputation."""
    rc = Recompute(recompute)
    tokens = global_batch * m.seq_len
    extra = 0.0
    if rc == Recompute.full:
        extra = m.layers * (layer_matmul_flops_per_token(m) + attention_flops_per_token(m))
    elif rc == Recompute.selective and not m.flash_attention:
        # Korthikanti et al.'s accounting, 72*B*s*l*h^2*(1 + s/(3h) + ...), which their
        # HFU figures use: the attention term counted once more in full (x3 of forward).
        extra = 3 * m.layers * attention_flops_per_token(m)
    if m.flash_attention and rc != Recompute.full:
        extra += m.layers * attention_flops_per_token(m) / 2
    return tokens * extra


def hardware_flops_per_step(m: ModelSpec, global_batch: int, recompute: Recompute | str) -> float:
    return model_flops_per_step(m, global_batch) + recompute_flops_per_step(m, global_batch, recompute)


def mfu(model_flops: float, step_time_s: float, chips: int, peak_flops: float) -> float:
    """Model FLOPs utilization: useful FLOP/s over the chips' dense peak."""
    return model_flops / (step_time_s * chips * peak_flops)
