"""Switched GPU nodes and multi-group fleets."""

from __future__ import annotations

import itertools

import pytest

from podfleet.hardware.catalog import NETWORKS, get_topology
from podfleet.hardware.specs import GB, get_chip
from podfleet.hardware.topology import FleetTopology, SwitchedTopology


@pytest.mark.parametrize(("name", "chip"), [("dgx-a100", "a100"), ("dgx-h100", "h100"), ("hgx-h200", "h200")])
def test_switched_nodes(name: str, chip: str) -> None:
    t = get_topology(name)
    assert isinstance(t, SwitchedTopology)
    assert (t.n_chips, t.chip_type, t.kind) == (8, chip, "switched")
    assert (t.diameter, t.avg_hops) == (1, 1.0)
    assert t.neighbours(3) == [0, 1, 2, 4, 5, 6, 7]
    assert all(t.hops(a, b) == (a != b) for a, b in itertools.product(range(8), repeat=2))
    assert t.bisection_bw_bytes_per_s == 4 * get_chip(chip).link_bw_bytes_per_s
    assert len(t.links) == 8  # one uplink per GPU to the switch


def test_dgx_a100_nvlink_per_direction() -> None:
    assert get_topology("dgx-a100").bisection_bw_bytes_per_s == 4 * 300 * GB


def test_ultraserver_fleet() -> None:
    fleet = get_topology("trn2-ultraserver:4")
    assert isinstance(fleet, FleetTopology)
    assert (fleet.n_chips, fleet.count, fleet.dims) == (256, 4, (4, 4, 4, 4))
    us = fleet.group
    assert fleet.hops(64 + 0, 64 + 63) == us.hops(0, 63) == 3
    assert fleet.hops(0, 64) == 2  # chip -> network -> chip
    assert fleet.diameter == 6
    assert fleet.neighbours(64) == [64 + n for n in us.neighbours(0)]
    # Half the pods' chips each push 25 GB/s of EFAv3 across the cut.
    assert NETWORKS["trn2-ultraserver"].bw_per_chip_bytes_per_s == 25 * GB
    assert fleet.bisection_bw_bytes_per_s == 2 * 64 * 25 * GB
    s = fleet.summary()
    assert (s["links"], s["groups"], s["group"], s["bisection_gbps"]) == (768, 4, "trn2-ultraserver", 3200.0)


def test_fleet_avg_hops_matches_brute_force() -> None:
    fleet = get_topology("trn2-node:3")
    n = fleet.n_chips
    total = sum(fleet.hops(a, b) for a in range(n) for b in range(n))
    assert fleet.avg_hops == pytest.approx(total / (n * (n - 1)))
    assert max(fleet.hops(a, b) for a in range(n) for b in range(n)) == fleet.diameter == 4


def test_fleet_of_one_is_the_group() -> None:
    one = get_topology("dgx-h100:1")
    grp = get_topology("dgx-h100")
    assert one.n_chips == 8
    assert (one.diameter, one.avg_hops) == (grp.diameter, grp.avg_hops)
    assert one.bisection_bw_bytes_per_s == grp.bisection_bw_bytes_per_s


def test_big_fleet_is_cheap() -> None:
    fleet = get_topology("trn2-ultraserver:1024")
    s = fleet.summary()
    assert s["chips"] == 65_536
    assert s["diameter"] == 6
    assert 2.0 < s["avg_hops"] < 2.01  # almost every pair is in another pod, 2 hops apart
