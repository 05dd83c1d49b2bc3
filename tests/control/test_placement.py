"""First-fit gang placement: all chips or none, only usable chips."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from podfleet.control.placement import place
from podfleet.hardware.catalog import get_topology

POD = get_topology("trn2-ultraserver")


def test_contiguous_block_preferred() -> None:
    alloc = place(POD, np.ones(64, bool), 16)
    assert alloc is not None and len(alloc.chips) == 16
    assert "contiguous" in alloc.reason
    assert sorted(alloc.shape) == [2, 2, 4] or sorted(alloc.shape) == [1, 4, 4]


def test_scattered_when_no_block_fits() -> None:
    usable = np.ones(64, bool)
    usable[60:] = False  # four spares: 60 chips have no block shape in 4x4x4
    alloc = place(POD, usable, 60)
    assert alloc is not None and "scattered" in alloc.reason
    assert set(alloc.chips) == set(range(60))


def test_none_when_too_few() -> None:
    usable = np.zeros(64, bool)
    usable[:7] = True
    assert place(POD, usable, 8) is None


@given(mask=st.lists(st.booleans(), min_size=64, max_size=64), n=st.integers(1, 64))
def test_gang_property(mask: list[bool], n: int) -> None:
    usable = np.array(mask)
    alloc = place(POD, usable, n)
    if usable.sum() < n:
        assert alloc is None
        return
    assert alloc is not None
    assert len(alloc.chips) == n == len(set(alloc.chips))
    assert usable[list(alloc.chips)].all()
