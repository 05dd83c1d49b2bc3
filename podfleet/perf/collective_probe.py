"""The modelled time of one nccl-tests style collective over a group of chips: the
alpha-beta model of ``perf.collectives`` over the chips' real links (a down link's ring
detours, a degraded one runs at its factor), at the chip type's calibrated link
efficiency.

Pure, below both of its users: the twin answers its ``CollectiveProbe`` with it
(``fabric.sim.probes``), and acceptance verification (``ops.verify``) takes the same
group on healthy links as the spec a measured table is held to, without importing the
twin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from podfleet.errors import InvalidInputError
from podfleet.hardware.topology import Topology
from podfleet.perf.collectives import (
    HEALTHY,
    Level,
    LinkHealth,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    group_levels,
    p2p_s,
    reduce_scatter_s,
)
from podfleet.perf.efficiency import efficiency_for

MIN_TIME_S = 1e-9  # a modelled collective is never free (bandwidths stay finite)
_TIMERS: dict[str, Callable[[Sequence[Level], float, float], float]] = {
    "all-reduce": all_reduce_s, "all-gather": all_gather_s, "reduce-scatter": reduce_scatter_s,
    "all-to-all": all_to_all_s,
}
OPS = (*_TIMERS, "send-recv")


def collective_times(topology: Topology, chips: Sequence[int], ops: Sequence[str], sizes_bytes: Sequence[int],
                     health: LinkHealth = HEALTHY) -> list[tuple[str, int, float]]:
    """(op, size_bytes, seconds) for every op and size, in that order. ``send-recv`` is
    between the group's first two chips (free in a group of one)."""
    bad = [op for op in ops if op not in OPS]
    if bad:
        raise InvalidInputError(f"collective op must be one of {', '.join(OPS)}, got {bad[0]!r}", field="ops",
                                allowed=list(OPS))
    eff = efficiency_for(topology.chip_type).link
    levels = group_levels(topology, chips, health)
    out = []
    for op in ops:
        for size in sizes_bytes:
            if op == "send-recv":
                t = p2p_s(topology, chips[0], chips[1], float(size), eff) if len(chips) > 1 else 0.0
            else:
                t = _TIMERS[op](levels, float(size), eff)
            out.append((op, int(size), max(t, MIN_TIME_S)))
    return out
