"""Where a lost rank of a relaunched gang goes: a spare, else a free chip, else the chip
it ran on once that chip passes the fabric's health check.

A process fabric's worker can die while its chip stays fine (``kill -9``, an OOM, a lost
actor): with no spare and no free chip, the job's own chip is the only place left, and a
job must not wait for ever for a chip it already had. The chip goes back only if it is
healthy and free and the fabric, asked through ``ChipCheck``, finds nothing wrong with it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class ReplacementPath(StrEnum):
    SPARE = "spare"
    FREE_CHIP = "free-chip"
    OWN_CHIP = "own-chip"


@dataclass(frozen=True)
class Replacement:
    moves: dict[int, tuple[int, ReplacementPath]] = field(default_factory=dict)  # lost chip -> (new, path)
    waiting: dict[int, str] = field(default_factory=dict)  # lost chip -> why it has no replacement yet

    @property
    def ready(self) -> bool:
        return not self.waiting


def choose_replacements(lost: Sequence[int], free: Sequence[int], spares: Collection[int],
                        in_gang: Collection[int], check: Callable[[int], str | None] | None,
                        pod_of: Callable[[int], int] | None = None) -> Replacement:
    """Pick a chip for each ``lost`` chip of a gang.

    ``free``: healthy chips no job holds, spares first (``ClusterRuntime.replacement_chips``);
    ``in_gang``: the gang's chips before the loss (never handed to another of its ranks);
    ``check``: the fabric's health check of one chip (None: the fabric has none, and a
    healthy free chip passes); ``pod_of``: a fleet's pod of a chip: a lost rank moves
    within its own pod first (NeuronLink to its tensor-parallel peers), then anywhere."""
    pool = [c for c in free if c not in in_gang]
    moves: dict[int, tuple[int, ReplacementPath]] = {}
    waiting: dict[int, str] = {}
    for chip in lost:
        if pool:
            home = pod_of(chip) if pod_of is not None else None
            i = next((k for k, c in enumerate(pool) if pod_of is not None and pod_of(c) == home), 0)
            new = pool.pop(i)
            moves[chip] = (new, ReplacementPath.SPARE if new in spares else ReplacementPath.FREE_CHIP)
        elif chip not in free:
            waiting[chip] = f"chip {chip} is not healthy and free, and no other chip is"
        else:
            why = check(chip) if check is not None else None
            if why is None:
                moves[chip] = (chip, ReplacementPath.OWN_CHIP)
            else:
                waiting[chip] = f"chip {chip} failed its health check: {why}"
    return Replacement(moves, waiting)
