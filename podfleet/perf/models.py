"""Transformer model descriptions and the one registry of presets.

A ``ModelSpec`` holds the dimensions the cost models need. Presets cover the models
operators ask about (``llama3-*``, ``gpt3-175b``), every model of the published
validation runs (``megatron-*``, reference/validation.md), which are GPT-style: learned
position embeddings, biases, GeLU MLP with ffn = 4h, tied embeddings and eager
(non-fused) attention as trained in 2021-22; the Trainium runs' models (``llama2-*``,
``nemo-gpt3-*``, reference/validation_trn.md); and the built-in trainer's small models
(``debug``, ``tiny``, ``small``, ``TRAINER_PRESETS``).

A name means one model everywhere: the planner, the twin's step times and the real
PyTorch trainer (``podfleet.training.model`` builds its ``GPTConfig`` from the preset
of the same name, so ``ModelSpec.params`` equals the torch model's parameter count).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from podfleet.errors import InfeasibleError, InvalidInputError, UnknownNameError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int = 2048
    kv_heads: int = 0  # 0: same as heads (multi-head attention)
    ffn_hidden: int = 0  # 0: 4 * hidden
    gated_mlp: bool = False  # SwiGLU: three MLP matrices instead of two
    bias: bool = True
    learned_pos_emb: bool = True
    tied_embeddings: bool = True
    # Fused (flash) attention never writes the s x s score matrix to HBM.
    flash_attention: bool = False

    def __post_init__(self) -> None:
        for fname in ("layers", "hidden", "heads", "vocab", "seq_len"):
            v = getattr(self, fname)
            if not isinstance(v, int) or v < 1:
                raise InvalidInputError(f"{fname} must be a positive integer, got {v!r}", field=fname)
        # Each field well formed, the combination impossible: 422 at the API, like tp and chips.
        if self.hidden % self.heads:
            raise InfeasibleError(
                f"hidden ({self.hidden}) must be divisible by heads ({self.heads})", field="hidden"
            )
        if self.kv_heads and self.heads % self.kv_heads:
            raise InfeasibleError(
                f"heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})",
                field="kv_heads",
            )

    @cached_property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @cached_property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @cached_property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @cached_property
    def kv_hidden(self) -> int:
        return self.kv * self.head_dim

    @cached_property
    def mlp_mats(self) -> int:
        return 3 if self.gated_mlp else 2

    # --- parameters -----------------------------------------------------------
    @cached_property
    def layer_params(self) -> int:
        h, hk, f = self.hidden, self.kv_hidden, self.ffn
        attn = h * (h + 2 * hk) + h * h
        mlp = self.mlp_mats * h * f
        norms = 4 * h if self.bias else 2 * h  # LayerNorm has a bias, RMSNorm does not
        biases = (h + 2 * hk) + h + (f * (self.mlp_mats - 1)) + h if self.bias else 0
        return attn + mlp + norms + biases

    @cached_property
    def embedding_params(self) -> int:
        pos = self.seq_len * self.hidden if self.learned_pos_emb else 0
        return self.vocab * self.hidden + pos

    @cached_property
    def output_params(self) -> int:
        """Output projection (logits) weights, 0 when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @cached_property
    def params(self) -> int:
        final_norm = 2 * self.hidden if self.bias else self.hidden
        return self.layers * self.layer_params + self.embedding_params + self.output_params + final_norm

    def with_seq_len(self, seq_len: int | None) -> ModelSpec:
        return self if seq_len is None or seq_len == self.seq_len else replace(self, seq_len=seq_len)


def _gpt(name: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    return ModelSpec(name, layers, hidden, heads, vocab=51200, seq_len=2048)


def _llama(name: str, layers: int, hidden: int, heads: int, ffn: int) -> ModelSpec:
    return ModelSpec(
        name, layers, hidden, heads, vocab=128256, seq_len=8192, kv_heads=8, ffn_hidden=ffn,
        gated_mlp=True, bias=False, learned_pos_emb=False, tied_embeddings=False,
        flash_attention=True,
    )


def _llama2(name: str, layers: int, hidden: int, heads: int, ffn: int, kv_heads: int = 0) -> ModelSpec:
    # Llama 2 (arXiv 2307.09288): 4k context, 32k vocabulary, SwiGLU, RMSNorm, RoPE; GQA
    # only at 70B. Fused attention: the Neuron tutorials of the trn1 rows run flash attention.
    return ModelSpec(
        name, layers, hidden, heads, vocab=32000, seq_len=4096, kv_heads=kv_heads, ffn_hidden=ffn,
        gated_mlp=True, bias=False, learned_pos_emb=False, tied_embeddings=False,
        flash_attention=True,
    )


def _nemo_gpt(name: str, layers: int, hidden: int, heads: int, ffn: int) -> ModelSpec:
    # NeMo Megatron GPT-3 as the Neuron benchmarks ran it: GPT-2 vocabulary (50,257),
    # 2k context, learned positions, tied embeddings, fused attention.
    return ModelSpec(name, layers, hidden, heads, vocab=50257, seq_len=2048, ffn_hidden=ffn,
                     flash_attention=True)


def _byte_gpt(name: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    # The built-in trainer's GPT: byte-level (no tokenizer to ship), 256-token context,
    # fused attention (torch scaled_dot_product_attention).
    return ModelSpec(name, layers, hidden, heads, vocab=256, seq_len=256, flash_attention=True)


# Presets the built-in PyTorch trainer (podfleet.training) runs for real, sized for CPUs
# in CI; every preset, these included, is also a model for the planner and the twin.
TRAINER_PRESETS: tuple[str, ...] = ("debug", "tiny", "small", "medium")

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _byte_gpt("debug", 2, 64, 4),  # ~0.13M params: tests
        _byte_gpt("tiny", 4, 128, 4),  # ~0.86M params: benchmarks
        _byte_gpt("small", 6, 384, 6),  # ~10.8M params
        _byte_gpt("medium", 8, 512, 8),  # ~25.4M params: recovery-real's rank moves
        # Llama 3 (arXiv 2407.21783, Table 3): GQA with 8 KV heads, SwiGLU, RoPE.
        _llama("llama3-8b", 32, 4096, 32, 14336),
        _llama("llama3-70b", 80, 8192, 64, 28672),
        _llama("llama3-405b", 126, 16384, 128, 53248),
        _gpt("gpt3-175b", 96, 12288, 96),
        # Validation models (reference/validation.md), named by their parameter count.
        _gpt("megatron-22b", 48, 6144, 64),
        _gpt("megatron-175b", 96, 12288, 96),
        _gpt("megatron-530b", 105, 20480, 128),
        _gpt("megatron-1t", 128, 25600, 160),
        _gpt("megatron-1.7b", 24, 2304, 24),
        _gpt("megatron-18.4b", 40, 6144, 48),
        _gpt("megatron-145.6b", 80, 12288, 96),
        _gpt("megatron-1008b", 128, 25600, 160),
        # Narayanan et al. 2021, Table 1, the rows kept out of sample (validation.OOS_ROWS).
        _gpt("megatron-3.6b", 30, 3072, 32),
        _gpt("megatron-7.5b", 36, 4096, 32),
        _gpt("megatron-39.1b", 48, 8192, 64),
        _gpt("megatron-76.1b", 60, 10240, 80),
        _gpt("megatron-310.1b", 96, 16384, 128),
        _gpt("megatron-529.6b", 105, 20480, 128),
        # Trainium runs (reference/validation_trn.md and the Neuron benchmark table).
        _llama2("llama2-7b", 32, 4096, 32, 11008),
        _llama2("llama2-13b", 40, 5120, 40, 13824),
        _llama2("llama2-70b", 80, 8192, 64, 28672, kv_heads=8),
        _nemo_gpt("nemo-gpt3-23b", 28, 8192, 64, 32768),
        _nemo_gpt("nemo-gpt3-175b", 96, 12288, 96, 4 * 12288),
    )
}


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownNameError("model", name, MODELS, field="model") from None


def get_trainer_preset(name: str) -> ModelSpec:
    """A preset the built-in trainer can run (the others are for the twin and the planner)."""
    if name not in TRAINER_PRESETS:
        raise UnknownNameError("model preset", name, TRAINER_PRESETS, field="model")
    return MODELS[name]


def custom_model(
    layers: int, hidden: int, heads: int, vocab: int, *, seq_len: int = 2048, name: str = "custom"
) -> ModelSpec:
    """A GPT-style model of the given dimensions (validated on construction)."""
    return ModelSpec(name, layers, hidden, heads, vocab=vocab, seq_len=seq_len)
