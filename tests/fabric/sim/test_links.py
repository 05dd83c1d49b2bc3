"""Link tables over any topology (property tests on random grids)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from podfleet.fabric.sim.links import build_link_table
from podfleet.hardware.catalog import custom_grid, get_topology


@given(dims=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_incidence_and_among_on_random_grids(dims: list[int], data) -> None:
    topo = custom_grid(dims)
    lt = build_link_table(topo)
    assert lt.n == len(topo.links)
    for c in range(topo.n_chips):
        inc = lt.of_chip(c)
        assert all(lt.src[i] == c or lt.dst[i] == c for i in inc)
        assert sorted(inc.tolist()) == sorted(
            k.index for k in topo.links if c in (k.src, k.dst))
    subset = data.draw(st.lists(st.integers(0, topo.n_chips - 1), unique=True, max_size=topo.n_chips))
    among = lt.among(np.array(subset, dtype=np.int64), topo.n_chips)
    s = set(subset)
    expect = sorted(k.index for k in topo.links if k.src in s and k.dst in s)
    assert sorted(among.tolist()) == expect


def test_switched_fleet_links_end_at_their_switch() -> None:
    topo = get_topology("dgx-a100:4")
    lt = build_link_table(topo)
    assert lt.n == 32 and (lt.dst == -1).all()
    assert sorted(lt.src.tolist()) == list(range(32))
    assert lt.group_size == 8 and lt.net_bw_per_chip > 0
    # A gang on one switch uses its uplinks.
    assert sorted(lt.among(np.arange(8), 32).tolist()) == list(range(8))
