"""Golden figures for the named grids: neuron-ls neighbours, hop counts, diameter, bisection."""

from __future__ import annotations

import pytest

from podfleet.hardware.catalog import TRN2_XY_LINK, TRN2_Z_LINK, custom_grid, get_topology
from podfleet.hardware.specs import GB


def test_trn2_node_neighbours_match_neuron_ls() -> None:
    node = get_topology("trn2-node")
    # neuron-ls "connected_to": up, left, down, right on a wrapping 4x4 grid.
    assert node.neighbours(0) == [12, 3, 4, 1]
    assert node.neighbours(13) == [9, 12, 1, 14]


def test_trn2_node_device_id_is_row_times_4_plus_col() -> None:
    node = get_topology("trn2-node")
    for dev in range(16):
        row, col = divmod(dev, 4)
        assert node.coords(dev) == (col, row)
        assert node.index((col, row)) == dev
        assert len(set(node.neighbours(dev))) == 4


def test_trn2_node_figures() -> None:
    node = get_topology("trn2-node")
    assert (node.n_chips, len(node.links), node.diameter) == (16, 32, 4)
    assert node.avg_hops == pytest.approx(2 * 16 / 15)  # two rings of 4: mean 1 each, over n-1
    # Cut a 4x4 torus in half: 4 rows x 2 ring links, 256 GB/s each.
    assert node.bisection_bw_bytes_per_s == 4 * 2 * TRN2_XY_LINK == 2048 * GB


def test_ultraserver_shape_and_figures() -> None:
    us = get_topology("trn2-ultraserver")
    assert us.n_chips == 64
    assert us.dims == (4, 4, 4)
    assert len(us.links) == 192
    assert us.diameter == 6
    assert int(us.hop_matrix.max()) == 6
    assert us.avg_hops == pytest.approx(3 * 64 / 63)
    # The slow axis decides: cut between instances {0,1} and {2,3}: 16 rings x 2 z links.
    assert us.bisection_bw_bytes_per_s == 16 * 2 * TRN2_Z_LINK == 4096 * GB


def test_ultraserver_z_links_join_same_coordinate_across_instances() -> None:
    us = get_topology("trn2-ultraserver")
    z_links = [ln for ln in us.links if ln.axis == 2]
    assert len(z_links) == 64
    assert {ln.bw_bytes_per_s for ln in z_links} == {TRN2_Z_LINK}
    assert {ln.bw_bytes_per_s for ln in us.links if ln.axis < 2} == {TRN2_XY_LINK}
    for ln in z_links:
        assert ln.src % 16 == ln.dst % 16  # same device in another instance
    # Device 5 of instance 0 is in a ring with device 5 of instances 1..3.
    assert set(us.neighbours(5)) >= {21, 53}
    assert us.neighbours(0) == [12, 3, 4, 1, 48, 16]


@pytest.mark.parametrize(
    ("a", "b", "hops"),
    [(0, 0, 0), (0, 1, 1), (0, 3, 1), (0, 2, 2), (0, 5, 2), (0, 16, 1), (0, 48, 1),
     (0, 32, 2), (0, 63, 3), (0, 42, 6), (21, 42, 3), (10, 40, 4)],
)
def test_ultraserver_hop_counts(a: int, b: int, hops: int) -> None:
    us = get_topology("trn2-ultraserver")
    assert us.hops(a, b) == hops
    assert us.hops(b, a) == hops


def test_trn1_node() -> None:
    t = get_topology("trn1-node")
    assert (t.n_chips, len(t.links), t.diameter, t.chip_type) == (16, 32, 4, "trn1")


@pytest.mark.parametrize(
    ("dims", "wrap", "links", "diameter"),
    [([1], True, 0, 0), ([2], True, 1, 1), ([4], True, 4, 2), ([4], False, 3, 3),
     ([5], True, 5, 2), ([4, 4], False, 24, 6), ([2, 2, 2], True, 12, 3),
     ([8, 1, 3], True, 8 * 3 + 3 * 8, 5)],
)
def test_small_grids(dims: list[int], wrap: bool, links: int, diameter: int) -> None:
    g = custom_grid(dims, wrap=wrap)
    assert len(g.links) == links
    assert g.diameter == diameter
    assert g.diameter == int(g.hop_matrix.max())


def test_mesh_vs_torus_bisection_and_kind() -> None:
    mesh = custom_grid([4, 4], wrap=False, link_bw_bytes_per_s=100 * GB)
    torus = custom_grid([4, 4], wrap=True, link_bw_bytes_per_s=100 * GB)
    assert (mesh.kind, torus.kind) == ("mesh", "torus")
    assert mesh.bisection_bw_bytes_per_s == 4 * 100 * GB
    assert torus.bisection_bw_bytes_per_s == 8 * 100 * GB
    assert mesh.neighbours(0) == [4, 1]  # no wrap: corner has two


def test_single_chip_grid() -> None:
    g = custom_grid([1])
    assert (g.n_chips, len(g.links), g.diameter, g.avg_hops) == (1, 0, 0, 0.0)
    assert g.bisection_bw_bytes_per_s == 0.0
    assert g.neighbours(0) == []


def test_large_grid_figures_need_no_pair_matrix() -> None:
    # 8,192 chips: past the hop-matrix limit, so avg_hops and hops come from coordinates.
    g = custom_grid([16, 16, 32])
    n = g.n_chips
    assert g.avg_hops == pytest.approx((4 + 4 + 8) * n / (n - 1))  # ring of s: mean s/4
    assert g.diameter == 32
    assert g.hops(0, n - 1) == 3
    assert g.hops(0, g.index((8, 8, 16))) == 32
    assert len(g.shapes(64)) == 21  # 2^6 split over axes of at most 2^4, 2^4, 2^5
    assert "hop_matrix" not in g.__dict__  # never built


def test_summary_keys_and_values() -> None:
    s = get_topology("trn2-ultraserver").summary()
    assert {"chips", "dims", "links", "diameter", "avg_hops", "bisection_gbps"} <= s.keys()
    assert (s["chips"], s["dims"], s["links"], s["diameter"]) == (64, [4, 4, 4], 192, 6)
    assert s["avg_hops"] == 3.0476
    assert s["bisection_gbps"] == 4096.0


def test_check_chip() -> None:
    from podfleet.errors import NotFoundError

    with pytest.raises(NotFoundError, match="0-63"):
        get_topology("trn2-ultraserver").check_chip(64)
