"""Hypothesis: invariants of hop counts and sub-blocks over random tori and meshes."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from podfleet.hardware.catalog import custom_grid
from podfleet.hardware.topology import GridTopology


@st.composite
def grids(draw, max_axes: int = 3, max_size: int = 5) -> GridTopology:
    n_axes = draw(st.integers(1, max_axes))
    dims = draw(st.lists(st.integers(1, max_size), min_size=n_axes, max_size=n_axes))
    wrap = draw(st.lists(st.booleans(), min_size=n_axes, max_size=n_axes))
    return custom_grid(dims, wrap=wrap, name=f"g{dims}{wrap}")


def _graph(topo: GridTopology) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(topo.n_chips))
    g.add_edges_from((ln.src, ln.dst) for ln in topo.links)
    return g


@given(grids())
def test_hops_are_a_metric(topo: GridTopology) -> None:
    h = topo.hop_matrix.astype(np.int64)
    assert (h == h.T).all()
    assert (np.diag(h) == 0).all()
    off = ~np.eye(topo.n_chips, dtype=bool)
    assert (h[off] >= 1).all()
    # Triangle inequality over every triple: h[a,c] <= h[a,b] + h[b,c].
    assert (h[:, None, :] <= h[:, :, None] + h[None, :, :]).all()


@given(grids())
def test_hops_equal_shortest_paths_over_links(topo: GridTopology) -> None:
    g = _graph(topo)
    for src, lengths in nx.all_pairs_shortest_path_length(g):
        for dst, d in lengths.items():
            assert topo.hops(src, dst) == d
    assert nx.is_connected(g)


@given(grids())
def test_neighbours_are_exactly_the_chips_one_hop_away(topo: GridTopology) -> None:
    for chip in range(topo.n_chips):
        nbrs = topo.neighbours(chip)
        assert len(nbrs) == len(set(nbrs))
        assert all(topo.hops(chip, n) == 1 for n in nbrs)
        assert sorted(nbrs) == sorted(np.flatnonzero(topo.hop_matrix[chip] == 1).tolist())


@given(grids())
def test_figures_agree_with_the_hop_matrix(topo: GridTopology) -> None:
    n = topo.n_chips
    assert topo.diameter == int(topo.hop_matrix.max())
    if n > 1:
        assert math.isclose(topo.avg_hops, topo.hop_matrix.sum() / (n * (n - 1)))
    links = sum(
        (n // a.size) * (a.size if a.wrap and a.size > 2 else a.size - 1) for a in topo.axes
    )
    assert len(topo.links) == links
    assert all(0 <= c < n for ln in topo.links for c in (ln.src, ln.dst))


@given(grids(), st.data())
def test_every_block_is_contiguous_with_distinct_chips(topo: GridTopology, data) -> None:
    size = data.draw(st.integers(1, topo.n_chips))
    free = np.asarray(data.draw(st.lists(st.booleans(), min_size=topo.n_chips, max_size=topo.n_chips)))
    g = _graph(topo)
    all_blocks = topo.free_blocks(size)
    assert {b.shape for b in all_blocks} == set(topo.shapes(size))
    for b in all_blocks:
        assert math.prod(b.shape) == size
        assert len(b.chips) == size == len(set(b.chips))
        assert b.chips[0] == topo.index(b.offset)
        assert nx.is_connected(g.subgraph(b.chips))
    keys = [(b.shape, b.offset) for b in all_blocks]
    assert len(keys) == len(set(keys))
    free_blocks = topo.free_blocks(size, free)
    assert all(free[list(b.chips)].all() for b in free_blocks)
    # Exactly the blocks whose chips are all free survive the mask.
    assert len(free_blocks) == sum(free[list(b.chips)].all() for b in all_blocks)


@given(grids(max_axes=4, max_size=6), st.integers(1, 40))
def test_shapes_are_all_factorisations_that_fit(topo: GridTopology, size: int) -> None:
    import itertools

    brute = [
        s for s in itertools.product(*[range(1, d + 1) for d in topo.dims]) if math.prod(s) == size
    ]
    assert topo.shapes(size) == brute
