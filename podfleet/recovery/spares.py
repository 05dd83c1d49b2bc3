"""Which chip takes a failed rank: a free one, spares first, closest to the rank's ring
neighbours (so the ring all-reduce keeps short hops)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from podfleet.hardware.topology import Topology


def choose_spare(topology: Topology, chips: Sequence[int], rank: int, candidates: Iterable[int],
                 spares: frozenset[int] | set[int] = frozenset()) -> int | None:
    """The candidate with the fewest hops to ``chips[rank-1]``, ``chips[rank+1]`` and the
    rank's old chip; designated spares win ties over other free chips, then the lowest index."""
    n = len(chips)
    anchors = {chips[rank]}
    if n > 1:
        anchors |= {chips[(rank - 1) % n], chips[(rank + 1) % n]}
    best: tuple[tuple[int, int, int], int] | None = None
    for c in candidates:
        key = (sum(topology.hops(c, a) for a in anchors), c not in spares, c)
        if best is None or key < best[0]:
            best = (key, c)
    return None if best is None else best[1]


def free_chips(states: Sequence[str], owner: Mapping[int, str], exclude: Iterable[int] = ()) -> list[int]:
    """Healthy chips no job holds."""
    ex = set(exclude)
    return [i for i, s in enumerate(states) if s == "healthy" and i not in owner and i not in ex]
