"""Routing: dimension-ordered routes, detours, failures, recompute and stretch."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.hardware.catalog import custom_grid, get_topology
from podfleet.hardware.routing import NoRouteError, Route, Router, dor_route
from podfleet.hardware.topology import GridTopology

US = get_topology("trn2-ultraserver")
N = US.n_chips
PAIRS = [(s, t) for s in range(N) for t in range(N) if s != t]
# Which ordered pairs' DOR route crosses each link: the pairs a failure can touch.
DOR = {p: dor_route(US, *p) for p in PAIRS}
USERS: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(US.links))}
for _p, _r in DOR.items():
    for _ln in _r.links:
        USERS[_ln].append(_p)


def check_path(topo: GridTopology, r: Route, src: int, dst: int, failed=frozenset()) -> None:
    """A simple path from src to dst over the given links, none of them failed."""
    assert r.chips[0] == src and r.chips[-1] == dst
    assert r.hops == len(r.links) == len(r.chips) - 1
    assert len(set(r.chips)) == len(r.chips), f"loop in {r.chips}"
    for a, b, ln in zip(r.chips, r.chips[1:], r.links, strict=False):
        link = topo.links[ln]
        assert {link.src, link.dst} == {a, b}
        assert ln not in failed


def surviving(topo: GridTopology, failed) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(topo.n_chips))
    g.add_edges_from((ln.src, ln.dst) for ln in topo.links if ln.index not in failed)
    return g


# --- dimension-ordered routes ---------------------------------------------------------


def test_dor_routes_are_shortest_and_x_first() -> None:
    for (s, t), r in DOR.items():
        check_path(US, r, s, t)
        assert r.hops == US.hops(s, t)
        axes = [US.links[ln].axis for ln in r.links]
        assert axes == sorted(axes)


def test_dor_takes_the_short_way_round_and_breaks_ties_plus() -> None:
    r = Router(US)
    assert r.route(0, 63).chips == (0, 3, 15, 63)  # x, y, z each one step the - way
    assert r.route(0, 2).chips == (0, 1, 2)  # distance 2 on a 4-ring: the + way
    assert r.route(2, 0).chips == (2, 3, 0)
    assert r.route(5, 5) == Route((5,), (), 0)


def test_two_ring_and_mesh_routes() -> None:
    g = custom_grid([2, 3], wrap=[True, False])
    r = Router(g)
    assert r.route(1, 0).chips == (1, 0)
    assert r.route(0, 5).chips == (0, 1, 3, 5)
    assert r.route(5, 0).chips == (5, 4, 2, 0)


# --- links -------------------------------------------------------------------------------


def test_link_between_and_names() -> None:
    r = Router(US)
    assert r.link_between(0, 1) == r.link_between(1, 0) == 0
    i = r.link_between(0, 48)
    assert US.links[i].axis == 2
    assert r.link_name(i) == "0-48"
    assert r.parse_link("48-0") == r.parse_link("0-48") == i
    for ln in US.links:
        assert r.link_between(ln.src, ln.dst) == ln.index
        assert r.parse_link(r.link_name(ln.index)) == ln.index
    with pytest.raises(NotFoundError, match="not joined"):
        r.link_between(0, 5)
    with pytest.raises(NotFoundError, match="0-63"):
        r.link_between(0, 64)
    with pytest.raises(InvalidInputError, match="A-B"):
        r.parse_link("0:1")
    with pytest.raises(NotFoundError, match="0-191"):
        r.fail_link(192)


def test_router_needs_a_grid() -> None:
    with pytest.raises(InvalidInputError, match="switched"):
        Router(get_topology("dgx-h100"))
    with pytest.raises(InvalidInputError, match=r"Router\(topo.group\)"):
        Router(get_topology("trn2-ultraserver:2"))


# --- detours -----------------------------------------------------------------------------


def test_every_link_has_a_loop_free_three_hop_detour() -> None:
    r = Router(US)
    for ln in US.links:
        d = r.detour(ln.index)
        assert d is not None
        check_path(US, d, ln.src, ln.dst, failed={ln.index})
        assert d.hops == 3
        # Through one other axis and back, crossing a parallel link of the same axis.
        axes = [US.links[i].axis for i in d.links]
        assert axes[1] == ln.axis and axes[0] == axes[2] != ln.axis


def test_detours_prefer_the_fast_axes() -> None:
    r = Router(US)
    z = r.link_between(0, 16)
    x = r.link_between(0, 1)
    y = r.link_between(0, 4)
    assert r.detour(z).chips == (0, 1, 17, 16)  # through x, not the slow z ring
    assert r.detour(x).chips == (0, 4, 5, 1)  # through y, not z
    assert r.detour(y).chips == (0, 1, 5, 4)


def test_mesh_edge_detour_goes_the_minus_way() -> None:
    mesh = custom_grid([3, 3], wrap=False)
    r = Router(mesh)
    top = r.link_between(6, 7)  # y = 2, the last row: no +y neighbour
    assert r.detour(top).chips == (6, 3, 4, 7)


def test_one_dimensional_edge_cases() -> None:
    ring = Router(custom_grid([5]))
    d = ring.detour(ring.link_between(0, 1))
    assert d is not None and d.chips == (0, 4, 3, 2, 1)  # the other way round
    line = Router(custom_grid([4], wrap=False))
    assert line.detour(line.link_between(1, 2)) is None  # a bridge
    pair = Router(custom_grid([2, 1, 1]))
    assert pair.detour(0) is None
    square = Router(custom_grid([2, 2]))
    assert square.detour(square.link_between(0, 1)).chips == (0, 2, 3, 1)


def test_bridge_failure_disconnects_and_says_so() -> None:
    line = Router(custom_grid([4], wrap=False))
    line.fail_link(line.link_between(1, 2))
    assert not line.connected()
    with pytest.raises(NoRouteError, match="1-2"):
        line.route(0, 3)
    assert line.route(0, 1).chips == (0, 1)
    s = line.stretch()
    assert s["disconnected"] == 8  # {0,1} x {2,3}, both ways
    assert s["max"] == 1.0
    line.recompute()
    with pytest.raises(NoRouteError):
        line.route(3, 0)


# --- failures: every single, and doubles -------------------------------------------------


def test_any_single_link_failure_keeps_every_pair_connected() -> None:
    r = Router(US)
    for ln in US.links:
        r.fail_link(ln.index)
        assert r.failed_links == {ln.index}
        assert r.connected()
        # Local repair: only pairs whose DOR route crossed the link move; each moves by
        # exactly the detour's two extra hops at most.
        for s, t in USERS[ln.index]:
            rt = r.route(s, t)
            check_path(US, rt, s, t, failed={ln.index})
            assert US.hops(s, t) <= rt.hops <= US.hops(s, t) + 2
        st_ = r.stretch()
        assert st_["disconnected"] == 0
        assert st_["mean"] > 1.0 and st_["max"] == 3.0  # the link's own endpoints: 1 -> 3
        r.restore_link(ln.index)
    assert r.failed_links == frozenset()
    assert r.stretch() == {"mean": 1.0, "max": 1.0, "rerouted": 0, "disconnected": 0}


def test_any_two_link_failures_keep_the_torus_connected() -> None:
    # Exhaustive over all 18,336 pairs of links: connectivity of the surviving graph.
    r = Router(US)
    n = len(US.links)
    for i in range(n):
        r.fail_link(i)
        for j in range(i + 1, n):
            r.fail_link(j)
            assert r.connected(), (i, j)
            r.restore_link(j)
        r.restore_link(i)


def _double_failures() -> list[tuple[int, int]]:
    """The hard doubles (the second link lies on the first one's detour) and a seeded
    sample of the rest. Hard doubles only for links leaving instance 0: the torus and
    its link speeds are the same under translation, so the other instances repeat them."""
    r = Router(US)
    hard = [(ln.index, d) for ln in US.links if ln.src < 16 for d in r.detour(ln.index).links]
    rng = random.Random(20240602)
    sample = rng.sample(list(itertools.combinations(range(len(US.links)), 2)), 200)
    return hard + sample


def test_two_failures_every_touched_pair_gets_a_valid_route() -> None:
    r = Router(US)
    for a, b in _double_failures():
        r.fail_link(a)
        r.fail_link(b)
        failed = {a, b}
        for s, t in set(USERS[a]) | set(USERS[b]):
            check_path(US, r.route(s, t), s, t, failed)
        assert r.stretch()["disconnected"] == 0
        r.restore_link(a)
        r.restore_link(b)


def test_broken_detour_falls_back_to_a_shortest_global_route() -> None:
    r = Router(US)
    x = r.link_between(0, 1)
    r.fail_link(x)
    r.fail_link(r.detour(x).links[1])  # 4-5: the detour's middle
    rt = r.route(0, 1)
    check_path(US, rt, 0, 1, r.failed_links)
    assert rt.hops == 3  # another square: through -y, +z or -z
    assert r.route(1, 0).hops == 3


def test_recompute_restores_shortest_paths() -> None:
    rng = random.Random(7)
    r = Router(US)
    for k in (1, 2, 3, 6):
        failed = set(rng.sample(range(len(US.links)), k))
        for i in failed:
            r.fail_link(i)
        before = r.stretch()
        r.recompute()
        after = r.stretch()
        assert after["mean"] <= before["mean"] and after["max"] <= before["max"]
        dist = dict(nx.all_pairs_shortest_path_length(surviving(US, failed)))
        for s, t in PAIRS:
            rt = r.route(s, t)
            check_path(US, rt, s, t, failed)
            assert rt.hops == dist[s][t]
        for i in failed:
            r.restore_link(i)


def test_failure_after_recompute_is_repaired_locally_on_the_new_table() -> None:
    r = Router(US)
    r.fail_link(r.link_between(0, 1))
    r.recompute()
    via = r.route(0, 1)
    r.fail_link(via.links[1])
    failed = r.failed_links
    for s, t in PAIRS[:400]:
        check_path(US, r.route(s, t), s, t, failed)
    check_path(US, r.route(0, 1), 0, 1, failed)
    # Restoring one leaves the table's paths valid; restoring all returns to DOR.
    r.restore_link(via.links[1])
    assert r.route(0, 1) == via
    r.restore_link(r.link_between(0, 1))
    assert r.route(0, 1) == DOR[(0, 1)]


def test_fail_and_restore_are_idempotent() -> None:
    r = Router(US)
    r.fail_link(3)
    r.fail_link(3)
    assert r.failed_links == {3}
    r.restore_link(3)
    r.restore_link(3)
    r.restore_link(4)
    assert r.failed_links == frozenset()


def test_stretch_is_at_least_one() -> None:
    r = Router(US)
    for i in random.Random(3).sample(range(len(US.links)), 5):
        r.fail_link(i)
        m = r.stretch_matrix()
        assert (m >= 1.0).all()
        s = r.stretch()
        assert 1.0 <= s["mean"] <= s["max"]
        assert s["rerouted"] > 0


# --- random grids ------------------------------------------------------------------------


@st.composite
def grids(draw) -> GridTopology:
    n_axes = draw(st.integers(1, 3))
    dims = draw(st.lists(st.integers(1, 4), min_size=n_axes, max_size=n_axes))
    wrap = draw(st.lists(st.booleans(), min_size=n_axes, max_size=n_axes))
    return custom_grid(dims, wrap=wrap)


@given(grids(), st.data())
def test_routes_on_random_grids(topo: GridTopology, data) -> None:
    r = Router(topo)
    n = topo.n_chips
    for s, t in itertools.product(range(n), repeat=2):
        check_path(topo, r.route(s, t), s, t)
        assert r.route(s, t).hops == topo.hops(s, t)
    for ln in topo.links:
        d = r.detour(ln.index)
        if d is not None:
            check_path(topo, d, ln.src, ln.dst, failed={ln.index})
    if not topo.links:
        return
    failed = set(data.draw(st.lists(st.sampled_from(range(len(topo.links))), max_size=3)))
    for i in failed:
        r.fail_link(i)
    g = surviving(topo, failed)
    assert r.connected() == nx.is_connected(g)
    dist = dict(nx.all_pairs_shortest_path_length(g))
    for recomputed in (False, True):
        if recomputed:
            r.recompute()
        for s, t in itertools.product(range(n), repeat=2):
            if t in dist[s]:
                rt = r.route(s, t)
                check_path(topo, rt, s, t, failed)
                if recomputed:
                    assert rt.hops == dist[s][t]
            else:
                with pytest.raises(NoRouteError):
                    r.route(s, t)
        s_ = r.stretch()
        assert s_["mean"] >= 1.0 and s_["max"] >= 1.0
