"""Choosing spare chips where they cost the least contiguous capacity.

On a grid, the spares are taken as one block of ``n`` chips when such a shape exists (on
a 4x4x4 torus, 4 spares form a line inside one plane), choosing the block that leaves
the largest free block for jobs, then the most free blocks, then the block that crosses
the fewest slow links (so the spares sit together in one node plane); otherwise chips are added
one at a time by the same rule. A fleet spreads ``n`` evenly over its pods (the first
pods take any remainder), each pod choosing by the grid rule. A switched node takes its
last ``n`` chips (every chip is alike there).
"""

from __future__ import annotations

import numpy as np

from podfleet.errors import InvalidInputError
from podfleet.hardware.topology import FleetTopology, GridTopology, Topology
from podfleet.scheduler.blocks import block_index


def _grid_spares(grid: GridTopology, n: int) -> list[int]:
    idx = block_index(grid)
    if n == 0:
        return []
    sizes = idx.block_size
    cands = np.flatnonzero(sizes == n)
    if len(cands):
        usable = idx.member[cands] == 0
        free = idx.free_many(usable)
        largest = np.where(free.any(axis=1), sizes[free.argmax(axis=1)], 0)
        # Largest free block first, then most free blocks, then the spare block that
        # spans the fewest slow links (stays inside one node plane: whole nodes stay free).
        bws = np.array([a.link_bw_bytes_per_s for a in grid.axes])
        shapes = np.array([idx.shapes[int(idx.block_shape[c])].shape for c in cands])
        span = (shapes * (bws.max() / bws)).sum(axis=1)
        key = np.lexsort((span, -free.sum(axis=1), -largest))
        return sorted(int(c) for c in np.flatnonzero(idx.member[cands[key[0]]]))
    chosen: list[int] = []
    usable = np.ones(grid.n_chips, dtype=bool)
    for _ in range(n):
        options = np.flatnonzero(usable)
        trial = np.repeat(usable[None, :], len(options), axis=0)
        trial[np.arange(len(options)), options] = False
        free = idx.free_many(trial)
        largest = np.where(free.any(axis=1), sizes[free.argmax(axis=1)], 0)
        pick = int(options[np.lexsort((-free.sum(axis=1), -largest))[0]])
        chosen.append(pick)
        usable[pick] = False
    return sorted(chosen)


def choose_spares(topology: Topology, n: int) -> tuple[int, ...]:
    if not isinstance(n, int) or n < 0 or n >= topology.n_chips:
        raise InvalidInputError(
            f"spares must be an integer 0-{topology.n_chips - 1}, got {n!r}", field="spares"
        )
    if isinstance(topology, FleetTopology):
        per, extra = divmod(n, topology.count)
        g = topology.group.n_chips
        out: list[int] = []
        for p in range(topology.count):
            k = per + (1 if p < extra else 0)
            if k >= g:
                raise InvalidInputError(f"{n} spares leave no chips in a {g}-chip pod", field="spares")
            if k:
                out += [p * g + c for c in choose_spares(topology.group, k)]
        return tuple(out)
    if isinstance(topology, GridTopology):
        return tuple(_grid_spares(topology, n))
    return tuple(range(topology.n_chips - n, topology.n_chips))
