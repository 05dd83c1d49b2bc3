"""First-fit gang placement (the scheduler issue replaces it behind this one function).

All of a job's chips or none; spares, unhealthy chips and chips held by other jobs are
never offered (the caller passes them as not usable). A contiguous sub-block of the grid
is preferred (collectives stay on neighbour links); when none is free the first free
chips in index order are used and the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from podfleet.hardware.topology import GridTopology, Topology


@dataclass(frozen=True)
class Allocation:
    chips: tuple[int, ...]  # rank r runs on chips[r]
    shape: tuple[int, ...]  # block shape, or (n,) for a scattered set
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"chips": list(self.chips), "shape": list(self.shape), "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Allocation:
        return cls(tuple(d["chips"]), tuple(d["shape"]), str(d.get("reason", "")))  # type: ignore[arg-type]


def place(topology: Topology, usable: np.ndarray, chips: int) -> Allocation | None:
    """A gang of ``chips`` chips among ``usable`` (bool mask over chips), or None."""
    usable = np.asarray(usable, dtype=bool)
    if chips < 1 or int(usable.sum()) < chips:
        return None
    if isinstance(topology, GridTopology):
        blocks = topology.free_blocks(chips, usable)
        if blocks:
            # Most compact shape first (fewest hops across the block), then lowest offset.
            best = min(blocks, key=lambda b: (max(b.shape) - min(b.shape), b.chips[0]))
            return Allocation(best.chips, best.shape, f"first-fit contiguous block {'x'.join(map(str, best.shape))}")
    picked = tuple(int(i) for i in np.flatnonzero(usable)[:chips])
    return Allocation(picked, (chips,), "first-fit scattered: no free contiguous block of this size")
