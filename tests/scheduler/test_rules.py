"""Table-driven tests of each plugin's pure rule."""

from __future__ import annotations

import numpy as np
import pytest

from podfleet.fabric.base import ChipState
from podfleet.hardware.catalog import custom_grid, get_topology
from podfleet.hardware.specs import GiB
from podfleet.scheduler.plugins.fragmentation import fragmentation
from podfleet.scheduler.plugins.gang_permit import gang_complete
from podfleet.scheduler.plugins.hbm_fit import fits
from podfleet.scheduler.plugins.health_gate import chip_usable
from podfleet.scheduler.plugins.preemption import pick_block
from podfleet.scheduler.plugins.spare_guard import avoids_spares
from podfleet.scheduler.plugins.thermal_headroom import headroom
from podfleet.scheduler.plugins.topology_block import comm_cost, preferred_shape
from podfleet.scheduler.types import JobRequest, Placement

POD = get_topology("trn2-ultraserver")


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        (ChipState.HEALTHY, True),
        (ChipState.DEGRADED, False),
        (ChipState.FAILED, False),
        (ChipState.ISOLATED, False),
        (ChipState.UPDATING, False),
    ],
)
def test_health_gate(state: ChipState, usable: bool) -> None:
    assert chip_usable(state) is usable


@pytest.mark.parametrize(
    ("chips", "spares", "ok"),
    [((0, 1, 2), (5,), True), ((0, 5), (5,), False), ((), (0,), True), ((3,), (), True)],
)
def test_spare_guard(chips: tuple[int, ...], spares: tuple[int, ...], ok: bool) -> None:
    mask = np.zeros(8, bool)
    mask[list(spares)] = True
    assert avoids_spares(chips, mask) is ok


@pytest.mark.parametrize(
    ("need_gib", "block_gib", "ok"),
    [(0, [96, 96], True), (80, [96, 96], True), (96, [96, 96], True), (80, [96, 64], False), (97, [96], False)],
)
def test_hbm_fit(need_gib: int, block_gib: list[int], ok: bool) -> None:
    job = JobRequest("j", 1, hbm_bytes_per_chip=need_gib * GiB)
    assert fits(job, np.array(block_gib) * GiB) is ok


@pytest.mark.parametrize(
    ("size", "tp", "best"),
    [
        (16, 4, {(4, 4, 1)}),  # one trn2 instance: TP and DP on the fast x/y links
        (4, 4, {(4, 1, 1), (1, 4, 1)}),  # a TP ring closes over a fast wrap link (x and y tie)
        (32, 4, {(4, 4, 2)}),
        (64, 8, {(4, 4, 4)}),
        (8, 2, {(4, 2, 1), (2, 4, 1)}),
    ],
)
def test_topology_block_prefers_fast_axes(size: int, tp: int, best: set[tuple[int, ...]]) -> None:
    assert preferred_shape(POD, size, tp) in best


def test_comm_cost_slow_axis_costs_more() -> None:
    # The same 4-chip ring along z (128 GB/s links) costs twice the x ring (256 GB/s).
    assert comm_cost(POD, (1, 1, 4), 4) == pytest.approx(2 * comm_cost(POD, (4, 1, 1), 4))
    # On a uniform torus, axes are interchangeable.
    uni = custom_grid([4, 4, 4])
    assert comm_cost(uni, (1, 1, 4), 4) == pytest.approx(comm_cost(uni, (4, 1, 1), 4))


@pytest.mark.parametrize(
    ("largest", "free", "frag"),
    [(16, 16, 0.0), (8, 16, 0.5), (1, 4, 0.75), (0, 0, 0.0)],
)
def test_fragmentation_rule(largest: int, free: int, frag: float) -> None:
    assert fragmentation(largest, free) == pytest.approx(frag)


@pytest.mark.parametrize(
    ("temp", "expect"), [(35.0, 1.0), (95.0, 0.0), (65.0, 0.5), (120.0, 0.0), (20.0, 1.0)]
)
def test_thermal_headroom_rule(temp: float, expect: float) -> None:
    assert headroom(np.array([temp]))[0] == pytest.approx(expect)


@pytest.mark.parametrize(
    ("chips", "n", "ok"), [((1, 2, 3, 4), 4, True), ((1, 2, 3), 4, False), ((1, 1, 2, 3), 4, False)]
)
def test_gang_complete(chips: tuple[int, ...], n: int, ok: bool) -> None:
    job = JobRequest("j", n)
    p = Placement("j", 0, chips, chips, (len(chips),), (0,))
    assert gang_complete(job, p) is ok


def test_pick_block_prefers_lowest_priority_then_fewest_chips() -> None:
    owner = np.array([-1, -1, 0, 0, 1, 1, 2, 2])  # slots 0, 1, 2 hold two chips each
    prio = np.array([-np.inf, -np.inf, 1, 1, 0, 0, 0, 0])
    chips = np.array([[0, 1, 2, 3], [2, 3, 4, 5], [0, 1, 4, 5], [4, 5, 6, 7]])
    row, cost = pick_block(chips, owner, prio)
    assert row == 2 and cost == (0.0, 2)  # priority-0 victims, only two chips evicted
