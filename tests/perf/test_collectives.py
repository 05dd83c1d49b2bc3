"""Collective costs against closed forms, on grids, switches and fleets, with link state."""

from __future__ import annotations

import pytest

from podfleet.hardware.catalog import (
    TRN2_HOP_LATENCY_S,
    TRN2_XY_LINK,
    TRN2_Z_LINK,
    custom_grid,
    get_topology,
)
from podfleet.perf import collectives as col
from podfleet.perf.collectives import Level, LevelKind, LinkHealth

V = 256 * 2**20


def test_single_ring_matches_closed_form() -> None:
    lv = Level(LevelKind.line, 8, 100e9, 2e-6)
    assert col.all_reduce_s([lv], V) == pytest.approx(col.ring_all_reduce_s(8, V, 100e9, 2e-6))
    assert col.ring_all_reduce_s(8, V, 100e9, 2e-6) == pytest.approx(2 * 7 * 2e-6 + 2 * 7 / 8 * V / 100e9)
    assert col.reduce_scatter_s([lv], V) == pytest.approx(7 * 2e-6 + 7 / 8 * V / 100e9)
    assert col.all_gather_s([lv], V) == col.reduce_scatter_s([lv], V)


def test_bidirectional_ring_halves_the_bandwidth_term() -> None:
    topo = custom_grid([8], link_bw_bytes_per_s=100e9, hop_latency_s=1e-6)
    levels = col.group_levels(topo, range(8))
    assert levels == (Level(LevelKind.bidir_ring, 8, 100e9, 1e-6),)
    assert col.all_reduce_s(levels, V) == pytest.approx(2 * 7 * 1e-6 + 2 * 7 / 8 * V / 200e9)
    mesh = custom_grid([8], link_bw_bytes_per_s=100e9, wrap=False, hop_latency_s=1e-6)
    assert col.group_levels(mesh, range(8))[0].kind == LevelKind.line


def test_2d_torus_dimension_by_dimension() -> None:
    topo = get_topology("trn2-node")
    levels = col.group_levels(topo, range(16))
    assert [lv.size for lv in levels] == [4, 4]
    a, b = TRN2_HOP_LATENCY_S, 2 * TRN2_XY_LINK
    rs = (3 * a + 3 / 4 * V / b) + (3 * a + 3 / 4 * (V / 4) / b)
    assert col.all_reduce_s(levels, V) == pytest.approx(2 * rs)
    assert col.reduce_scatter_s(levels, V, link_eff=0.5) == pytest.approx(
        6 * a + 3 / 4 * V / (b / 2) + 3 / 4 * (V / 4) / (b / 2)
    )


def test_3d_torus_orders_fast_axes_first() -> None:
    levels = col.group_levels(get_topology("trn2-ultraserver"), range(64))
    assert [lv.bw_bytes_per_s for lv in levels] == [TRN2_XY_LINK, TRN2_XY_LINK, TRN2_Z_LINK]


def test_strided_group_shares_links() -> None:
    topo = get_topology("trn2-node")
    (lv,) = col.group_levels(topo, (0, 2))  # every second chip on a 4-ring
    assert lv.kind == LevelKind.bidir_ring and lv.bw_bytes_per_s == TRN2_XY_LINK / 2
    (pair,) = col.group_levels(topo, (0, 1))
    assert pair.kind == LevelKind.line and pair.bw_bytes_per_s == TRN2_XY_LINK


def test_switch_and_hierarchical_fleet() -> None:
    fleet = get_topology("dgx-a100:4")
    levels = col.group_levels(fleet, range(32))
    assert [lv.kind for lv in levels] == [LevelKind.switch, LevelKind.switch]
    nv, ib = levels
    assert nv.size == 8 and ib.size == 4
    assert ib.bw_bytes_per_s == pytest.approx(25e9)
    expected = 2 * (7 * nv.step_latency_s + 7 / 8 * V / nv.bw_bytes_per_s) + 2 * (
        3 * ib.step_latency_s + 3 / 4 * (V / 8) / ib.bw_bytes_per_s
    )
    assert col.all_reduce_s(levels, V) == pytest.approx(expected)
    # One GPU per node: a ring over the network tier only.
    (net,) = col.group_levels(fleet, (0, 8, 16, 24))
    assert net.size == 4 and net.bw_bytes_per_s == pytest.approx(25e9)


def test_all_to_all_closed_forms() -> None:
    sw = Level(LevelKind.switch, 8, 100e9, 0.0)
    assert col.all_to_all_s([sw], V) == pytest.approx(7 / 8 * V / 100e9)
    ring = Level(LevelKind.bidir_ring, 4, 100e9, 0.0)  # distances 1, 2, 1
    assert col.all_to_all_s([ring], V) == pytest.approx(V * 4 / (2 * 4 * 100e9))
    line = Level(LevelKind.line, 4, 100e9, 0.0)  # the middle link carries 2*2 quarters
    assert col.all_to_all_s([line], V) == pytest.approx(V / 100e9)


def test_down_link_reroutes_and_slows() -> None:
    topo = get_topology("trn2-node")
    group = range(4)  # the x ring of row 0
    healthy = col.all_reduce_s(col.group_levels(topo, group), V)
    link = next(lk.index for lk in topo.links if lk.src == 0 and lk.axis == 0)
    down = col.group_levels(topo, group, LinkHealth(frozenset({link})))
    assert down[0].bw_bytes_per_s == TRN2_XY_LINK * col.DETOUR_FACTOR
    assert down[0].step_latency_s > TRN2_HOP_LATENCY_S
    assert col.all_reduce_s(down, V) > 1.9 * healthy
    degraded = col.group_levels(topo, group, LinkHealth(degraded={link: 0.75}))
    assert col.all_reduce_s(degraded, V) == pytest.approx(
        2 * (3 * TRN2_HOP_LATENCY_S + 3 / 4 * V / (2 * 0.75 * TRN2_XY_LINK))
    )
    # A link the group does not use changes nothing.
    other = next(lk.index for lk in topo.links if lk.src == 4 and lk.axis == 0)
    assert col.group_levels(topo, group, LinkHealth(frozenset({other}))) == col.group_levels(topo, group)


def test_p2p_uses_the_path() -> None:
    fleet = get_topology("dgx-a100:2")
    assert col.p2p_s(fleet, 0, 1, V) == pytest.approx(fleet.group.latency_s + V / 300e9)
    assert col.p2p_s(fleet, 0, 8, V) == pytest.approx(fleet.net_latency_s + V / 25e9)
    us = get_topology("trn2-ultraserver")
    assert col.p2p_s(us, 0, 16, V) == pytest.approx(2e-6 + V / TRN2_Z_LINK)
