from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as hs

from podfleet.hardware.catalog import get_topology
from podfleet.scheduler.blocks import block_index, snake_order
from podfleet.scheduler.spares import choose_spares

POD = get_topology("trn2-ultraserver")
IDX = block_index(POD)


def test_index_agrees_with_topology_free_blocks() -> None:
    rng = np.random.default_rng(3)
    for _ in range(5):
        usable = rng.random(64) > 0.3
        free = IDX.free(usable)
        for size in (1, 4, 8, 16):
            ours = {frozenset(IDX.chips(b).tolist()) for b in np.flatnonzero(free & (IDX.block_size == size))}
            theirs = {frozenset(b.chips) for b in POD.free_blocks(size, usable)}
            assert ours == theirs


def test_snake_order_steps_one_hop() -> None:
    for shape in [(4, 4, 4), (2, 4, 2), (4, 1, 3), (3, 3)]:
        walk = snake_order(shape)
        assert len({tuple(c) for c in walk}) == np.prod(shape)
        assert (np.abs(np.diff(walk, axis=0)).sum(axis=1) == 1).all()


@given(hs.lists(hs.booleans(), min_size=64, max_size=64), hs.sampled_from([1, 2, 4, 8]))
def test_largest_after_many_matches_brute_force(mask: list[bool], size: int) -> None:
    usable = np.array(mask)
    free = IDX.free(usable)
    cands = np.flatnonzero(free & (IDX.block_size == size))
    if not len(cands):
        return
    got = IDX.largest_after_many(free[None, :], np.zeros(len(cands), dtype=np.int64), cands)
    for c, g in zip(cands, got, strict=True):
        left = usable.copy()
        left[IDX.chips(c)] = False
        assert g == IDX.largest_free(IDX.free(left))


def test_choose_spares_table() -> None:
    table = {1: 48, 4: 48, 16: 48, 8: 48}
    for n, largest_left in table.items():
        spares = choose_spares(POD, n)
        assert len(spares) == n
        usable = np.ones(64, bool)
        usable[list(spares)] = False
        assert IDX.largest_free(IDX.free(usable)) == largest_left
        # together in one plane: one trn2 instance (z = const) holds them all
        assert len({POD.coords(c)[2] for c in spares}) == 1


def test_choose_spares_fleet_spreads_over_pods() -> None:
    fleet = get_topology("trn2-ultraserver:4")
    spares = choose_spares(fleet, 6)
    per_pod = np.bincount(np.array(spares) // 64, minlength=4)
    assert per_pod.tolist() == [2, 2, 1, 1]
