"""Every contiguous sub-block of one pod's grid, indexed once, so placement is numpy masks.

A ``BlockIndex`` lists every placement of every block shape of a grid (2,197 blocks on
a 4x4x4 torus) with a membership matrix ``member[block, chip]``. Which blocks are free
under a mask of usable chips is then one matrix-vector product, and so is the set of
feasible sizes and shapes, for one pod or (as a matrix product) for a whole fleet. All
pods of a fleet share one index. ``overlap[a, b]`` (blocks sharing a chip) is built
lazily for the fragmentation score.

Rank order inside a block is a snake (boustrophedon) walk, so consecutive ranks are one
hop apart and a ring all-reduce follows the torus links; of the walks over axis
permutations and reflections, the one whose closed ring is cheapest is used.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from podfleet.hardware.topology import GridTopology


def snake_order(shape: tuple[int, ...]) -> np.ndarray:
    """Local coords [size, ndim] of a boustrophedon walk: each step moves one hop on one axis."""
    if len(shape) == 1:
        return np.arange(shape[0])[:, None]
    inner = snake_order(shape[:-1])
    parts = []
    for v in range(shape[-1]):
        sub = inner if v % 2 == 0 else inner[::-1]
        parts.append(np.concatenate([sub, np.full((len(sub), 1), v)], axis=1))
    return np.concatenate(parts, axis=0)


def ring_orders(shape: tuple[int, ...]) -> list[np.ndarray]:
    """Distinct snake walks (local coords) over axis permutations and reflections.

    The identity (x fastest) comes first, so ties among equally good walks keep the
    fastest axis innermost.
    """
    out, seen = [], set()
    nd = len(shape)
    for perm in itertools.permutations(range(nd)):
        walk = snake_order(tuple(shape[p] for p in perm))
        coords = np.empty_like(walk)
        coords[:, list(perm)] = walk
        for flips in itertools.product((False, True), repeat=nd):
            c = coords.copy()
            for k, f in enumerate(flips):
                if f:
                    c[:, k] = shape[k] - 1 - c[:, k]
            key = c.tobytes()
            if key not in seen:
                seen.add(key)
                out.append(c)
    return out


def hop_weights(grid: GridTopology) -> np.ndarray:
    """Cost of one hop per axis: fastest link = 1 (trn2: x, y = 1; z = 2)."""
    bws = np.array([a.link_bw_bytes_per_s for a in grid.axes])
    fastest = float(bws.max())
    return fastest / bws


def local_distance(grid: GridTopology, local: np.ndarray) -> np.ndarray:
    """Weighted hop distance [n, n] between local coords of a block (torus-aware)."""
    diff = np.abs(local[:, None, :] - local[None, :, :])
    dims = np.array(grid.dims)
    wrap = np.array([a.wrap for a in grid.axes])
    diff = np.where(wrap, np.minimum(diff, dims - diff), diff)
    dist: np.ndarray = (diff * hop_weights(grid)).sum(axis=2)
    return dist


def ring_cost(d: np.ndarray, ranks: np.ndarray) -> float:
    """A ring runs at the pace of its slowest step (closing step included) + 0.1 x mean step."""
    if len(ranks) < 2:
        return 0.0
    steps = d[ranks, np.roll(ranks, -1)]
    return float(steps.max() + 0.1 * steps.mean())


@functools.lru_cache(maxsize=1024)
def ring_walk(grid: GridTopology, shape: tuple[int, ...]) -> np.ndarray:
    """The rank order (local coords) of a block: the snake variant whose closed ring is cheapest."""
    best, best_cost = None, np.inf
    dims = np.array(grid.dims)
    wrap = np.array([a.wrap for a in grid.axes])
    w = hop_weights(grid)
    for walk in ring_orders(shape):
        if len(walk) < 2:
            best, best_cost = walk, 0.0
            break
        diff = np.abs(walk - np.roll(walk, -1, axis=0))
        diff = np.where(wrap, np.minimum(diff, dims - diff), diff)
        steps = (diff * w).sum(axis=1)
        c = float(steps.max() + 0.1 * steps.mean())  # = ring_cost over the walk
        if c < best_cost - 1e-9:
            best, best_cost = walk, c
    assert best is not None
    best.setflags(write=False)
    return best


@dataclass(frozen=True)
class ShapeInfo:
    shape: tuple[int, ...]
    start: int  # first block id of this shape
    stop: int


class BlockIndex:
    def __init__(self, topology: GridTopology) -> None:
        self.topology = topology
        self.dims = topology.dims
        self.n_chips = topology.n_chips
        shapes = sorted(
            (s for n in range(1, self.n_chips + 1) for s in topology.shapes(n)),
            key=lambda s: (-math.prod(s), s),
        )
        self.shapes: list[ShapeInfo] = []
        chip_rows: list[np.ndarray] = []
        offsets: list[np.ndarray] = []
        start = 0
        for shape in shapes:
            offs, _ = topology.block_table(shape)
            chips = self._snake_chips(shape, offs)
            self.shapes.append(ShapeInfo(shape, start, start + len(chips)))
            chip_rows.extend(chips)
            offsets.append(offs)
            start += len(chips)
        self.n_blocks = start
        self.shape_id = {s.shape: i for i, s in enumerate(self.shapes)}
        self.block_shape = np.concatenate(
            [np.full(s.stop - s.start, i) for i, s in enumerate(self.shapes)]
        )
        self.block_size = np.array([len(r) for r in chip_rows], dtype=np.int64)
        self.block_offset = np.concatenate(offsets)
        member = np.zeros((self.n_blocks, self.n_chips), dtype=np.float32)
        for b, row in enumerate(chip_rows):
            member[b, row] = 1.0
        self.member = member
        self.member_t = np.ascontiguousarray(member.T)
        self._chip_rows = chip_rows
        # Blocks as 64-bit chip masks (pods of <= 64 chips): overlap is one AND.
        self.bits: np.ndarray | None = None
        if self.n_chips <= 64:
            weights = np.uint64(1) << np.arange(self.n_chips, dtype=np.uint64)
            self.bits = np.bitwise_or.reduce(np.where(member > 0, weights[None, :], np.uint64(0)), axis=1)
        self.shape_starts = np.array([s.start for s in self.shapes])
        self.shape_size = np.array([math.prod(s.shape) for s in self.shapes])
        # Blocks are sorted by size descending, so the first free block is the largest.
        # Shapes of one size are contiguous too: the sizes (descending) and where each starts.
        sizes, first = np.unique(-self.shape_size, return_index=True)
        self.sizes: tuple[int, ...] = tuple(int(-v) for v in sizes)
        self.size_starts = first
        self.size_col = {size: i for i, size in enumerate(self.sizes)}

    def _snake_chips(self, shape: tuple[int, ...], offsets: np.ndarray) -> np.ndarray:
        local = ring_walk(self.topology, shape)
        coords = (offsets[:, None, :] + local[None, :, :]) % np.array(self.dims)
        mult = np.cumprod((1, *self.dims[:-1]))
        chips: np.ndarray = (coords * mult).sum(axis=2)
        return chips

    # --- queries -------------------------------------------------------------------
    def chips(self, block: int) -> np.ndarray:
        """Local chip indices of ``block`` in ring (snake) order."""
        return self._chip_rows[block]

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - one index per grid, lives for the process
    def shape_ids_for(self, size: int, shape: tuple[int, ...] | None = None) -> list[int]:
        if shape is not None:
            sid = self.shape_id.get(tuple(shape))
            return [] if sid is None else [sid]
        return [i for i, s in enumerate(self.shapes) if self.shape_size[i] == size]

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one index per grid, lives for the process
    def blocks_for(self, size: int, shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(block ids, chips [len, size] in ring order) of every block of ``size`` (or ``shape``)."""
        sids = self.shape_ids_for(size, shape)
        if not sids:
            return np.zeros(0, dtype=np.int64), np.zeros((0, size), dtype=np.int64)
        ids = np.concatenate([np.arange(self.shapes[i].start, self.shapes[i].stop) for i in sids])
        chips = np.stack([self._chip_rows[b] for b in ids])
        ids.setflags(write=False)
        chips.setflags(write=False)
        return ids, chips

    @functools.cached_property
    def chips_by_shape(self) -> list[np.ndarray]:
        """Per shape id: [blocks of that shape, size] local chips in ring order."""
        return [np.stack(self._chip_rows[s.start : s.stop]) for s in self.shapes]

    def pack(self, mask: np.ndarray) -> np.ndarray:
        """Chip masks [..., n_chips] as uint64 bit sets [...] (pods of <= 64 chips): chip i
        is bit i. ``packbits`` does it in one pass (a where and an OR-reduce over 64 uint64
        columns took about 4x as long for the pods a fleet refresh packs)."""
        b = np.packbits(np.asarray(mask, bool), axis=-1, bitorder="little")  # [..., ceil(n / 8)] bytes
        if b.shape[-1] != 8:  # fewer than 57 chips: zero bytes up to 64 bits
            b = np.concatenate([b, np.zeros((*b.shape[:-1], 8 - b.shape[-1]), dtype=np.uint8)], axis=-1)
        bits: np.ndarray = b.view("<u8")[..., 0].astype(np.uint64, copy=False)
        return bits

    def free(self, usable: np.ndarray) -> np.ndarray:
        """bool [n_blocks]: blocks all of whose chips are usable."""
        free: np.ndarray
        if self.bits is not None:
            free = (self.bits & self.pack(~np.asarray(usable, bool))) == 0
        else:
            free = (self.member @ (~np.asarray(usable, bool)).astype(np.float32)) == 0
        return free

    def free_many(self, usable: np.ndarray) -> np.ndarray:
        """bool [pods, n_blocks] for usable [pods, n_chips] (one AND, or one matrix product)."""
        free: np.ndarray
        if self.bits is not None:
            blocked = self.pack(~np.asarray(usable, bool))
            free = (self.bits[None, :] & blocked[:, None]) == 0
        else:
            free = ((~np.asarray(usable, bool)).astype(np.float32) @ self.member_t) == 0
        return free

    def shape_free(self, free: np.ndarray) -> np.ndarray:
        """bool [..., n_shapes]: any free block of each shape (``free`` is [..., n_blocks])."""
        return np.logical_or.reduceat(free, self.shape_starts, axis=-1)

    def size_free(self, shape_free: np.ndarray) -> np.ndarray:
        """bool [..., len(sizes)]: any free block of each size (``shape_free`` is [..., n_shapes])."""
        return np.logical_or.reduceat(shape_free, self.size_starts, axis=-1)

    def largest_free(self, free: np.ndarray) -> int:
        hit = np.flatnonzero(free)
        return int(self.block_size[hit[0]]) if len(hit) else 0

    def largest_free_shape(self, free: np.ndarray) -> tuple[int, ...] | None:
        hit = np.flatnonzero(free)
        return self.shapes[int(self.block_shape[hit[0]])].shape if len(hit) else None

    def holding(self, a: int, b: int) -> np.ndarray:
        """bool [n_blocks]: blocks holding both chips ``a`` and ``b`` (for the two ends of a
        link: the blocks whose collectives run over it)."""
        held: np.ndarray
        if self.bits is not None:
            both = np.uint64((1 << a) | (1 << b))
            held = (self.bits & both) == both
        else:
            held = (self.member_t[a] > 0) & (self.member_t[b] > 0)
        return held

    @functools.cached_property
    def overlap(self) -> np.ndarray:
        """bool [n_blocks, n_blocks]: the two blocks share at least one chip."""
        return (self.member @ self.member.T) > 0

    def largest_after_many(self, free: np.ndarray, pod_pos: np.ndarray, candidates: np.ndarray, chunk: int = 64) -> np.ndarray:
        """``largest_after`` for candidates on several pods at once.

        ``free`` is [pods, n_blocks]; ``pod_pos[i]`` the row of candidate i. With 64-bit
        chip masks, free blocks are scanned largest first in chunks of ``chunk`` per pod
        (one AND per chunk for all candidates) until every candidate has found one.
        """
        if self.bits is None:
            out = np.zeros(len(candidates), dtype=np.int64)
            for r in np.unique(pod_pos):
                sel = np.flatnonzero(pod_pos == r)
                out[sel] = self.largest_after(free[r], candidates[sel])
            return out
        k = free.shape[0]
        # First ``chunk`` free blocks of each pod (largest first), padded: one gather for all.
        heads = [np.flatnonzero(free[r]) for r in range(k)]
        ids = np.zeros((k, chunk), dtype=np.int64)
        valid = np.zeros((k, chunk), dtype=bool)
        for r, h in enumerate(heads):
            n = min(len(h), chunk)
            ids[r, :n] = h[:n]
            valid[r, :n] = True
        blk = ids[pod_pos]
        rem = ((self.bits[candidates][:, None] & self.bits[blk]) == 0) & valid[pod_pos]
        found = rem.any(axis=1)
        out = np.where(found, self.block_size[blk[np.arange(len(candidates)), rem.argmax(axis=1)]], 0)
        # Those that overlap every head block: scan the rest of their pod's free blocks.
        for r in np.unique(pod_pos[~found]):
            if len(heads[r]) > chunk:
                sel = np.flatnonzero((pod_pos == r) & ~found)
                out[sel] = self._scan(heads[r][chunk:], self.bits[candidates[sel]], 256)
        return out

    def _scan(self, free_ids: np.ndarray, cand_bits: np.ndarray, chunk: int) -> np.ndarray:
        """Size of the first block in ``free_ids`` disjoint from each candidate (0 if none)."""
        assert self.bits is not None
        out = np.zeros(len(cand_bits), dtype=np.int64)
        todo = np.arange(len(cand_bits))
        for lo in range(0, len(free_ids), chunk):
            blk = free_ids[lo : lo + chunk]
            rem = (cand_bits[todo][:, None] & self.bits[blk][None, :]) == 0
            found = rem.any(axis=1)
            out[todo[found]] = self.block_size[blk[rem[found].argmax(axis=1)]]
            todo = todo[~found]
            if not len(todo):
                break
        return out

    def largest_after(self, free: np.ndarray, candidates: np.ndarray, chunk: int = 128) -> np.ndarray:
        """Largest free block size left after placing each candidate block (vectorized).

        Free blocks are scanned largest first in chunks, so most candidates resolve in
        the first chunk; only those that overlap all of it look further.
        """
        free_ids = np.flatnonzero(free)  # already size-descending
        out = np.zeros(len(candidates), dtype=np.int64)
        todo = np.arange(len(candidates))
        ov = self.overlap
        for lo in range(0, len(free_ids), chunk):
            if not len(todo):
                break
            ids = free_ids[lo : lo + chunk]
            rem = ~ov[np.ix_(candidates[todo], ids)]
            found = rem.any(axis=1)
            first = rem.argmax(axis=1)
            out[todo[found]] = self.block_size[ids[first[found]]]
            todo = todo[~found]
        return out


@functools.lru_cache(maxsize=16)
def block_index(topology: GridTopology) -> BlockIndex:
    return BlockIndex(topology)
