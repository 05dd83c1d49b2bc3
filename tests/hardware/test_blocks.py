"""Sub-block enumeration: the shapes placement will ask for, wrapping offsets, free masks."""

from __future__ import annotations

import numpy as np
import pytest

from podfleet.hardware.catalog import custom_grid, get_topology


@pytest.fixture
def us():
    return get_topology("trn2-ultraserver")


def test_32_chips_on_the_ultraserver(us) -> None:
    assert set(us.shapes(32)) == {(4, 4, 2), (4, 2, 4), (2, 4, 4)}
    blocks = us.free_blocks(32)
    # Each shape: the full axes have one offset, the half axis wraps round 4 offsets.
    assert len(blocks) == 12
    by_shape: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for b in blocks:
        by_shape.setdefault(b.shape, []).append(b.offset)
    assert by_shape[(4, 4, 2)] == [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3)]
    assert by_shape[(4, 2, 4)] == [(0, 0, 0), (0, 1, 0), (0, 2, 0), (0, 3, 0)]
    assert by_shape[(2, 4, 4)] == [(0, 0, 0), (1, 0, 0), (2, 0, 0), (3, 0, 0)]


def test_wrapping_block_joins_last_and_first_instance(us) -> None:
    (block,) = [b for b in us.free_blocks(32) if b.shape == (4, 4, 2) and b.offset == (0, 0, 3)]
    # Instances 3 and 0 are z-neighbours on the ring.
    assert set(block.chips) == set(range(48, 64)) | set(range(16))
    assert block.chips[:16] == tuple(range(48, 64))  # x fastest, then y, then z
    assert block.chips[16:] == tuple(range(16))


def test_block_chips_are_in_x_fastest_order(us) -> None:
    (block,) = us.blocks((2, 2, 1))[5:6]
    x0, y0, z0 = block.offset
    expect = [us.index(((x0 + dx) % 4, (y0 + dy) % 4, z0)) for dy in range(2) for dx in range(2)]
    assert list(block.chips) == expect


def test_free_mask_is_respected(us) -> None:
    free = np.ones(64, dtype=bool)
    free[0] = False  # chip (0,0,0) busy
    blocks = us.free_blocks(32, free)
    assert len(blocks) == 6  # each shape loses the two offsets that cover coordinate 0
    assert all(0 not in b.chips for b in blocks)
    free[:] = False
    assert us.free_blocks(32, free) == []
    assert us.free_blocks(1, free) == []


def test_mask_leaving_exactly_one_instance_free(us) -> None:
    free = np.zeros(64, dtype=bool)
    free[32:48] = True  # instance 2 only
    blocks = us.free_blocks(16, free)
    assert [(b.shape, b.offset) for b in blocks] == [((4, 4, 1), (0, 0, 2))]


@pytest.mark.parametrize(
    ("size", "count"),
    [(1, 64), (2, 3 * 64), (3, 3 * 64), (4, 3 * 16 + 3 * 64), (16, 3 * 4 + 3 * 16),
     (32, 12), (48, 12), (64, 1), (65, 0), (0, 0)],
)
def test_block_counts_on_the_ultraserver(us, size: int, count: int) -> None:
    # 4 chips: 4x1x1 (16 offsets, one per line) x3 axes, and 2x2x1 (64) x3 planes.
    assert len(us.free_blocks(size)) == count


def test_trn2_node_half() -> None:
    node = get_topology("trn2-node")
    blocks = node.free_blocks(8)
    assert sorted({b.shape for b in blocks}) == [(2, 4), (4, 2)]
    assert len(blocks) == 8


def test_mesh_blocks_do_not_wrap() -> None:
    mesh = custom_grid([4, 4], wrap=False)
    assert len(mesh.blocks((2, 2))) == 9
    assert all(max(b.offset) <= 2 for b in mesh.blocks((2, 2)))
    torus = custom_grid([4, 4], wrap=True)
    assert len(torus.blocks((2, 2))) == 16


def test_shape_that_does_not_fit_is_rejected(us) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        us.block_table((8, 1, 1))
    with pytest.raises(ValueError, match="does not fit"):
        us.block_table((4, 4))
