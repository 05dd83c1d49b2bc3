"""Where a lost rank goes: a spare, else a free chip, else its own chip once it passes the
fabric's health check (``control.replacement``), table-driven."""

from __future__ import annotations

import pytest

from podfleet.control.replacement import ReplacementPath, choose_replacements
from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import ChipCheck, GangPlacement, WorkerPlacement
from podfleet.fabric.sim import SimFabric

SPARE, FREE, OWN = ReplacementPath.SPARE, ReplacementPath.FREE_CHIP, ReplacementPath.OWN_CHIP


@pytest.mark.parametrize(("lost", "free", "spares", "gang", "bad", "moves", "waiting"), [
    # a spare first, even when a plain free chip has a lower index
    ([1], [3, 0], {3}, {1, 2}, {}, {1: (3, SPARE)}, []),
    # no spare: any free chip outside the gang
    ([1], [0, 4], set(), {1, 2}, {}, {1: (0, FREE)}, []),
    # nothing else free: the rank's own chip, which passed its check
    ([1], [1], set(), {0, 1}, {}, {1: (1, OWN)}, []),
    # its own chip fails the check: wait, saying why
    ([1], [1], set(), {0, 1}, {1: "node lost"}, {}, [1]),
    # its own chip is not free or not healthy (absent from free): wait
    ([1], [], set(), {0, 1}, {}, {}, [1]),
    # two lost ranks, one spare: the second goes back to its own chip
    ([0, 1], [5, 0, 1], {5}, {0, 1}, {}, {0: (5, SPARE), 1: (1, OWN)}, []),
])
def test_choose_replacements(lost, free, spares, gang, bad, moves, waiting) -> None:
    got = choose_replacements(lost, free, spares, gang, lambda c: bad.get(c))
    assert got.moves == moves and sorted(got.waiting) == waiting and got.ready == (not waiting)
    for chip in waiting:
        assert str(chip) in got.waiting[chip]
    if bad:
        assert "node lost" in got.waiting[1]


def test_without_a_check_a_healthy_free_own_chip_passes() -> None:
    assert choose_replacements([2], [2], (), {2}, None).moves == {2: (2, OWN)}


def test_the_twin_declares_none_of_the_worker_capabilities() -> None:
    fab = SimFabric("trn2-ultraserver", Timeline(seed=0))
    for cap in (ChipCheck, WorkerPlacement, GangPlacement):
        assert not isinstance(fab, cap), cap.__name__
