"""The parallelism plan: a validated value whose errors quote the numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from podfleet.errors import InvalidInputError
from podfleet.perf.flops import Recompute
from podfleet.perf.models import ModelSpec


@dataclass(frozen=True)
class Plan:
    """How one training job is laid out: rank order is tp (fastest), dp, pp (slowest)."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    num_micro_batches: int
    recompute: Recompute = Recompute.selective
    zero_stage: int = 1  # 0: none; 1: optimizer state; 2: + gradients; 3: + parameters
    interleave: int = 1  # virtual pipeline chunks per stage (1: plain 1F1B)
    sequence_parallel: bool = True

    def __post_init__(self) -> None:
        for fname in ("tp", "pp", "dp", "micro_batch", "num_micro_batches", "interleave"):
            v = getattr(self, fname)
            if not isinstance(v, int) or v < 1:
                raise InvalidInputError(f"{fname} must be a positive integer, got {v!r}", field=fname)
        if self.zero_stage not in (0, 1, 2, 3):
            raise InvalidInputError(
                f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}", field="zero_stage"
            )
        object.__setattr__(self, "recompute", Recompute(self.recompute))
        if self.interleave > 1 and self.pp == 1:
            raise InvalidInputError(
                f"interleave ({self.interleave}) needs pipeline parallelism (pp > 1)", field="interleave"
            )
        if self.interleave > 1 and self.num_micro_batches % self.pp:
            raise InvalidInputError(
                f"interleaved schedule needs num_micro_batches ({self.num_micro_batches}) "
                f"divisible by pp ({self.pp})",
                field="num_micro_batches",
            )

    @property
    def chips(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def global_batch(self) -> int:
        return self.dp * self.micro_batch * self.num_micro_batches

    def check(self, model: ModelSpec, chips: int | None = None) -> None:
        """Raise InvalidInputError when the plan cannot run ``model`` (on ``chips``)."""
        if chips is not None and self.chips != chips:
            raise InvalidInputError(
                f"tp*pp*dp ({self.tp}*{self.pp}*{self.dp} = {self.chips}) != chips ({chips})",
                field="chips",
            )
        if model.heads % self.tp:
            raise InvalidInputError(
                f"tp ({self.tp}) must divide the attention heads ({model.heads})", field="tp"
            )
        if model.layers % (self.pp * self.interleave):
            raise InvalidInputError(
                f"pp*interleave ({self.pp}*{self.interleave}) must divide the layers ({model.layers})",
                field="pp",
            )

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["recompute"] = str(self.recompute)
        d["global_batch"] = self.global_batch
        return d


def split_batch(global_batch: int, dp: int, micro_batch: int) -> int:
    """num_micro_batches for a global batch, or raise with the numbers."""
    if global_batch % (dp * micro_batch):
        raise InvalidInputError(
            f"global batch ({global_batch}) is not divisible by dp*micro_batch "
            f"({dp}*{micro_batch} = {dp * micro_batch})",
            field="global_batch",
        )
    return global_batch // (dp * micro_batch)
