"""Gradient compression in the cost model (pure): what a mode does to the data-parallel
gradient reduction of a step.

Modes (``parse_grad_compression``): ``none``; ``bf16`` (gradients cast to bf16 for the
all-reduce); ``powersgd:R`` (rank-R PowerSGD: every weight matrix of m x n is sent as
two all-reduced factors P (m x R) and Q (n x R); vectors go uncompressed);
``lossless`` (byte-shuffled zstd: the compressed buckets cannot be summed on the wire,
so each rank all-gathers every rank's compressed bucket and sums locally).

Per data-parallel group of n chips and V gradient bytes per chip:

    none        all-reduce of V
    bf16        all-reduce of V * 2 / grad_bytes        (no gain when grads are bf16)
    powersgd:R  all-reduce of V * powersgd_ratio(model, R), in two rounds (P then Q)
                plus 4*m*n*R flops per matrix (P = M Q, Q = M^T P) on the chip, at
                least the time of reading the gradient twice from HBM (thin GEMMs are
                memory-bound)
    lossless    all-gather to n * V * c bytes per chip, c the codec's measured size
                ratio, plus encoding V and decoding n * V bytes on the host's cores

An all-reduce moves 2(n-1)/n * V per chip and an all-gather (n-1)/n * n*V*c, so the
lossless volume is n*c/2 of the uncompressed one: a gain only where n*c < 2. That is
what ``effect`` returns and the planner shows.

``MEASURED`` holds the figures ``bench compression`` measured on real gradients of the
trainer's debug model (see docs/interconnect.md: machine, command, date); they are
defaults, and a caller can pass its own ``CodecFigures``.
"""

from __future__ import annotations

from dataclasses import dataclass

from podfleet.errors import InvalidInputError
from podfleet.perf.models import ModelSpec

MODES = ("none", "bf16", "powersgd", "lossless")
MAX_POWERSGD_RANK = 64


@dataclass(frozen=True)
class GradCompression:
    """A gradient-compression mode; ``rank`` only for PowerSGD."""

    mode: str = "none"
    rank: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidInputError(
                f"grad compression {self.mode!r} is not one of none, bf16, powersgd:RANK, lossless",
                field="grad_compression", allowed=["none", "bf16", "powersgd:RANK", "lossless"],
            )
        if self.mode == "powersgd" and not 1 <= self.rank <= MAX_POWERSGD_RANK:
            raise InvalidInputError(
                f"powersgd rank must be 1-{MAX_POWERSGD_RANK}, got {self.rank}",
                field="grad_compression", allowed=f"powersgd:1-{MAX_POWERSGD_RANK}",
            )
        if self.mode != "powersgd" and self.rank:
            raise InvalidInputError(f"only powersgd takes a rank, not {self.mode!r}", field="grad_compression")

    @property
    def name(self) -> str:
        return f"powersgd:{self.rank}" if self.mode == "powersgd" else self.mode

    def __str__(self) -> str:
        return self.name


NONE = GradCompression()


def parse_grad_compression(text: str | GradCompression | None) -> GradCompression:
    """``none``, ``bf16``, ``powersgd:RANK`` or ``lossless`` (``None``: none)."""
    if text is None:
        return NONE
    if isinstance(text, GradCompression):
        return text
    if not isinstance(text, str):
        raise InvalidInputError(f"grad compression must be a string, got {text!r}", field="grad_compression")
    mode, _, arg = text.strip().lower().partition(":")
    if mode == "powersgd":
        if not arg.isdigit():
            raise InvalidInputError(f"powersgd needs a rank, e.g. powersgd:4, got {text!r}",
                                    field="grad_compression", allowed="powersgd:RANK")
        return GradCompression("powersgd", int(arg))
    if arg:
        raise InvalidInputError(f"{mode!r} takes no argument, got {text!r}", field="grad_compression")
    return GradCompression(mode)


@dataclass(frozen=True)
class CodecFigures:
    """What the lossless codec does to real gradients (measured, see ``MEASURED``)."""

    size_ratio: float  # compressed bytes / raw bytes
    encode_bytes_per_s: float  # raw bytes encoded per second on one host core
    decode_bytes_per_s: float  # raw bytes decoded per second on one host core
    # Host cores the codec may use per chip: an assumption (a trn2.48xlarge has 192
    # vCPUs for 16 chips, reference/trn2.md; half of them are left to the input pipeline).
    cores_per_chip: float = 6.0

    def __post_init__(self) -> None:
        if not 0 < self.size_ratio <= 1.5:
            raise InvalidInputError(f"size_ratio must be in (0, 1.5], got {self.size_ratio}", field="size_ratio")
        if not (self.encode_bytes_per_s > 0 and self.decode_bytes_per_s > 0 and self.cores_per_chip > 0):
            raise InvalidInputError("codec throughputs and cores_per_chip must be > 0", field="codec")


# Measured by ``podfleet bench run compression --quick`` (2026-12-01 06:21 UTC, the
# debug model's real gradients, byte-shuffled zstd level 1, one core each of a loaded
# 2-core x86_64 machine; docs/interconnect.md has the run and its spread).
MEASURED = CodecFigures(size_ratio=0.763, encode_bytes_per_s=118e6, decode_bytes_per_s=322e6)


def matrix_shapes(model: ModelSpec) -> list[tuple[int, int, int]]:
    """(rows, cols, count) of the weight matrices of ``model`` (what PowerSGD compresses)."""
    h, hk, f = model.hidden, model.kv_hidden, model.ffn
    per_layer = [(h + 2 * hk, h, 1), (h, h, 1), (f, h, model.mlp_mats - 1), (h, f, 1)]
    shapes = [(r, c, k * model.layers) for r, c, k in per_layer if k]
    shapes.append((model.vocab, h, 1 if model.tied_embeddings else 2))
    if model.learned_pos_emb:
        shapes.append((model.seq_len, h, 1))
    return shapes


def powersgd_ratio(model: ModelSpec, rank: int) -> float:
    """Bytes PowerSGD sends over the bytes of the full gradient (matrices compressed only
    where (m + n) * rank < m * n; vectors and small matrices go as they are)."""
    total = float(model.params)
    matrices = sum(r * c * k for r, c, k in matrix_shapes(model))
    sent = max(0.0, total - matrices)  # vectors: biases, norms
    for r, c, k in matrix_shapes(model):
        sent += k * ((r + c) * rank if (r + c) * rank < r * c else r * c)
    return min(1.0, sent / total)


def powersgd_flops(model: ModelSpec, rank: int) -> float:
    """Flops of one PowerSGD round on the full gradient: P = M Q and Q = M^T P."""
    return float(sum(4 * r * c * rank * k for r, c, k in matrix_shapes(model) if (r + c) * rank < r * c))


@dataclass(frozen=True)
class Effect:
    """What a mode does to one data-parallel gradient reduction."""

    volume_ratio: float  # bytes per chip on the wire over the uncompressed all-reduce's
    allgather: bool  # reduced by all-gather of compressed buckets (lossless)
    rounds: int  # collectives per reduction (PowerSGD: 2)
    codec_s: float  # seconds of encode/decode (or factorisation) per step on this chip


def effect(comp: GradCompression, model: ModelSpec, *, grad_bytes_per_param: int, local_params: float,
           dp: int, chip_flops: float, hbm_bytes_per_s: float, codec: CodecFigures = MEASURED) -> Effect:
    """The effect of ``comp`` on a data-parallel group of ``dp`` chips, each reducing
    ``local_params`` gradients of ``grad_bytes_per_param`` bytes."""
    if comp.mode == "none" or dp <= 1:
        return Effect(1.0, False, 1, 0.0)
    raw = local_params * grad_bytes_per_param
    if comp.mode == "bf16":
        return Effect(min(1.0, 2.0 / grad_bytes_per_param), False, 1, 0.0)
    if comp.mode == "powersgd":
        share = local_params / model.params
        factorise_s = max(powersgd_flops(model, comp.rank) * share / chip_flops, 2 * raw / hbm_bytes_per_s)
        return Effect(powersgd_ratio(model, comp.rank), False, 2, factorise_s)
    codec_s = (raw / codec.encode_bytes_per_s + dp * raw / codec.decode_bytes_per_s) / codec.cores_per_chip
    return Effect(dp * codec.size_ratio / 2.0, True, 1, codec_s)
