"""Gangs across pods: the same pod-aligned block on each of N pods, packed into the
fewest network blocks.

A gang larger than a pod (or one that names ``pods``) takes one block of ``chips / N``
chips on each of N pods: whole pods when ``chips / N`` is a pod, else the same
sub-block size on each (so every pod holds the same number of ranks and a
tensor-parallel group never straddles a pod). The smallest N that divides the gang
into a block size some pod can hold is tried first (whole pods before half pods).

Network blocks (the pods behind one spine, ``FleetTopology.pods_per_block``) follow
Kueue's Topology Aware Scheduling levels:

* ``topology_required="block"``: all N pods in one block, or the gang waits (never
  crosses a spine); ``"pod"``: the gang must fit one pod (a larger one is rejected).
* otherwise (``topology_preferred``, the default for a gang across pods): one block
  when any block has room, else the fewest blocks (the fullest blocks first).

Inside a block the fullest pods that still hold the block go first (best fit); among
blocks, the one with the fewest feasible pods that still suffices (best fit, as
Slurm's topology/block plugin), so large blocks stay whole for large gangs.

Ranks run pod by pod (blocks in order), each pod's block in its ring order: with
Megatron's order (tp fastest, then dp, then pp) and tp dividing the per-pod size,
tensor-parallel groups stay inside a pod and only data-parallel (or pipeline) rings
cross EFA, crossing a spine at most once per block boundary.

Everything is numpy over the framework's per-pod summaries: one pass over the pods
per gang, then a loop over the N chosen pods only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from podfleet.errors import PodfleetError
from podfleet.hardware.topology import FleetTopology, GridTopology, NetworkLevel
from podfleet.perf.layout import job_topology
from podfleet.scheduler import status as st
from podfleet.scheduler.blocks import BlockIndex
from podfleet.scheduler.extension import PLACED_CHIPS, CycleState, FleetPlanner, Handle
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest, Placement, fmt_shape


class Framework(Protocol):
    """What placement across pods asks of ``framework.Framework`` (a Protocol, so this
    module, which the preemption plugin uses, does not import the framework)."""

    handle: Handle

    def summaries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def size_summary(self) -> tuple[np.ndarray, np.ndarray]: ...

    def pods_with_free(self) -> int: ...

    def job_free_pods(self, state: CycleState, job: JobRequest, pods: np.ndarray,
                      blocks: slice | np.ndarray | None = None) -> tuple[Status, np.ndarray]: ...


@dataclass(frozen=True)
class FleetChoice:
    """Where a gang across pods goes: its pods in rank order and the block id on each."""

    pods: tuple[int, ...]
    blocks: tuple[int, ...]  # network block of each pod (same order)
    block_ids: tuple[int, ...]  # the chosen pod-local block (``BlockIndex`` id) on each pod
    size: int  # chips per pod
    crossings: int  # spine crossings of the gang's ring (0 inside one block)


def splits(job: JobRequest, chips_per_pod: int, n_pods: int, sizes: frozenset[int]) -> list[tuple[int, int]]:
    """(pods, chips per pod) ways to split the gang, fewest pods first."""
    return _splits(job.chips, job.pods, chips_per_pod, n_pods, sizes)


@functools.lru_cache(maxsize=4096)
def _splits(chips: int, pods: int | None, chips_per_pod: int, n_pods: int,
            sizes: frozenset[int]) -> list[tuple[int, int]]:
    if pods is not None:
        s = chips // pods
        return [(pods, s)] if s in sizes and pods <= n_pods else []
    lo = -(-chips // chips_per_pod)
    return [(n, chips // n) for n in range(max(lo, 2), n_pods + 1) if chips % n == 0 and chips // n in sizes]


def unresolvable(job: JobRequest, topo: FleetTopology, chips_per_pod: int, sizes: frozenset[int],
                 ever: np.ndarray) -> Status | None:
    """Why this gang can never be placed on this fleet, or None. ``ever[pod, size]``:
    pods that hold a free block of that size with every job gone (spares excluded)."""
    if job.topology_required == "pod":
        return st.unresolvable(f"job asks {job.chips} chips with topology_required pod; a pod has {chips_per_pod}")
    if job.chips > topo.n_chips:
        return st.unresolvable(f"job asks {job.chips} chips; the fleet has {topo.n_chips} "
                               f"({topo.count} pods of {chips_per_pod})")
    options = splits(job, chips_per_pod, topo.count, sizes)
    if not options:
        if job.pods is not None:
            return st.unresolvable(f"{job.chips} chips on {job.pods} pods is {job.chips / job.pods:g} per pod: "
                                   f"not a block a {chips_per_pod}-chip pod holds (or more pods than the "
                                   f"fleet's {topo.count})")
        return st.unresolvable(f"{job.chips} chips do not split into an equal block on each of 2-{topo.count} "
                               f"pods (a gang across pods holds the same block size on every pod)")
    possible = [(n, s) for n, s in options if int(ever[:, s].sum()) >= n]
    if not possible:
        n, s = options[0]
        return st.unresolvable(f"needs {n} pods with a free {s}-chip block; only {int(ever[:, s].sum())} pods "
                               f"have one once spares are held out")
    if job.topology_required == "block":
        k = topo.pods_per_block
        fits = [(n, s) for n, s in possible
                if max(int(ever[list(topo.block_pods(b)), s].sum()) for b in range(topo.n_blocks)) >= n]
        if not fits:
            n, _ = possible[0]
            return st.unresolvable(f"job needs {n} pods with topology_required block; a network block has "
                                   f"{k} pods")
    return None


def choose(job: JobRequest, topo: FleetTopology, feasible: np.ndarray, free_count: np.ndarray,
           n: int, *, first_fit: bool = False) -> tuple[np.ndarray | None, int]:
    """N pods among ``feasible`` (bool per pod): (pods in rank order, spine crossings), or
    (None, -1). ``first_fit``: the first N feasible pods by index (the baseline)."""
    k = topo.pods_per_block
    if first_fit:
        pods = np.flatnonzero(feasible)
        if len(pods) < n:
            return None, -1
        pick = pods[:n]
        return pick, crossings(pick // k)
    # Feasible pods per block in one pass over the pods (blocks are runs of k pods).
    per_block = np.add.reduceat(feasible, _block_starts(topo.count, k), dtype=np.int64)
    if int(per_block.sum()) < n:
        return None, -1
    enough = np.flatnonzero(per_block >= n)
    if len(enough):
        b = int(enough[np.argmin(per_block[enough])])  # best-fit block
        return _fullest(_in_block(feasible, b, k), free_count, n), 0
    if job.topology_required == "block":
        return None, -1
    # Fewest blocks: the blocks with the most feasible pods first.
    chosen: list[np.ndarray] = []
    left = n
    for b in np.argsort(-per_block, kind="stable").tolist():
        have = int(per_block[b])
        if left <= 0 or have == 0:
            break
        take = min(left, have)
        chosen.append(_fullest(_in_block(feasible, b, k), free_count, take))
        left -= take
    pick = np.concatenate(chosen)
    return pick, crossings(pick // k)


@functools.lru_cache(maxsize=64)
def _block_starts(count: int, k: int) -> np.ndarray:
    """The first pod of each network block (the last block may be shorter)."""
    starts = np.arange(0, count, k)
    starts.setflags(write=False)
    return starts


def _in_block(feasible: np.ndarray, b: int, k: int) -> np.ndarray:
    """Block ``b``'s feasible pods, by index."""
    return b * k + np.flatnonzero(feasible[b * k:(b + 1) * k])


def _fullest(pods: np.ndarray, free_count: np.ndarray, take: int) -> np.ndarray:
    """The ``take`` fullest of ``pods`` (one block's, by index), ties by index, in index order."""
    if take >= len(pods):
        return pods  # all of them, already in index order
    order = np.argsort(free_count[pods], kind="stable")
    return np.sort(pods[order[:take]])


def crossings(blocks: np.ndarray) -> int:
    """Spine crossings of a ring over pods in this order (closing edge included)."""
    if len(blocks) < 2:
        return 0
    return int((blocks[1:] != blocks[:-1]).sum()) + int(blocks[0] != blocks[-1])


def pending_reason(job: JobRequest, topo: FleetTopology, n: int, s: int, feasible: np.ndarray,
                   pods_busy: int, pods_full: int, have: int | None = None) -> str:
    """What is missing at which level: pods with a free block, and the best block.
    ``have``: how many pods are feasible, when the caller already counted them."""
    what = "whole pods" if s == topo.group.n_chips else f"pods with a free {s}-chip block"
    parts = [f"needs {n} {what}"]
    if job.topology_required == "block":
        per_block = np.bincount(np.flatnonzero(feasible) // topo.pods_per_block, minlength=topo.n_blocks)
        best = int(np.argmax(per_block)) if len(per_block) else 0
        parts.append(f"in one network block (topology_required block): best block {best} has "
                     f"{int(per_block[best]) if len(per_block) else 0} of its {len(topo.block_pods(best))} pods free")
    else:
        parts.append(f"the fleet has {int(feasible.sum()) if have is None else have} free")
    tail = []
    if pods_busy:
        tail.append(f"{pods_busy} pods without a free {s}-chip block")
    if pods_full:
        tail.append(f"{pods_full} pods with no usable chip free")
    return "; ".join(parts) + (f" ({', '.join(tail)})" if tail else "")


def describe_choice(c: FleetChoice, shape: tuple[int, ...]) -> str:
    blocks = sorted(set(c.blocks))
    where = f"block {blocks[0]}" if len(blocks) == 1 else f"blocks {', '.join(map(str, blocks))}"
    # Pods are distinct and in rank order: a run of consecutive pods when the ends say so.
    run = c.pods[-1] - c.pods[0] + 1 == len(c.pods) and all(b > a for a, b in zip(c.pods, c.pods[1:], strict=False))
    pods = f"{c.pods[0]}-{c.pods[-1]}" if run else ", ".join(map(str, c.pods))
    return (f"{len(c.pods)} pods ({pods}) in {where}, a {fmt_shape(shape)} block on each; "
            f"{c.crossings} spine crossings")


def block_sizes(fw: Framework) -> frozenset[int]:
    return block_sizes_of(fw.handle.cluster.blocks)


@functools.lru_cache(maxsize=16)
def block_sizes_of(idx: BlockIndex) -> frozenset[int]:
    """The block sizes a pod of this index holds."""
    return frozenset(int(v) for v in np.unique(idx.shape_size))


def place(fw: Framework, state: CycleState, job: JobRequest, topo: FleetTopology, *,
          first_fit: bool = False) -> tuple[Status, Placement | None]:
    """A placement across pods for ``job``, or Unschedulable with what is missing where."""
    cl = fw.handle.cluster
    idx, per = cl.blocks, cl.chips_per_pod
    _, _, free_count = fw.summaries()
    size_free, size_count = fw.size_summary()
    options = splits(job, per, len(cl.pods), block_sizes(fw))
    missing = ""
    for n, s in options:
        col = idx.size_col[s]
        feasible: np.ndarray = size_free[:, col]
        # Fewer pods with a free block of this size than the split needs: no pod search
        # (only the first way to split says what is missing).
        if size_count[col] < n:
            if not missing:
                missing = _missing(job, topo, n, s, feasible, int(size_count[col]), fw.pods_with_free())
            continue
        for _attempt in range(3):  # pods refused by a job filter drop out, and the rest is retried
            pick, cross = choose(job, topo, feasible, free_count, n, first_fit=first_fit)
            if pick is None:
                break
            ids, rows, is_pref, cols = size_blocks(idx, cl.pods[0].grid, s, math.gcd(job.tp, s), job.comm)
            # The chosen pods' free blocks of this size for this job, all pods in one call
            # (blocks of one size have consecutive ids: a slice of each pod's row).
            status, cand = fw.job_free_pods(state, job, pick, cols)  # [n, blocks of size s]
            if not status.ok:
                return status, None
            has = cand.any(axis=1)
            if not has.all():
                feasible = feasible.copy()
                feasible[pick[~has]] = False
                continue
            # The job's preferred shape on every pod where it is free there, else the first free.
            same = cand & is_pref
            chosen = np.where(same.any(axis=1), same.argmax(axis=1), cand.argmax(axis=1))
            placement, chips = placement_of(fw.handle, job, topo, pick, chosen, ids, rows, s, cross)
            state[PLACED_CHIPS] = (placement, chips)  # Reserve and Permit read the array
            return st.SUCCESS, placement
        if not missing:  # the first (fewest pods) way to split says what is missing
            missing = _missing(job, topo, n, s, np.asarray(feasible), int(feasible.sum()), fw.pods_with_free())
    return st.unschedulable(missing or "no way to split the gang across pods").by("fleet"), None


def _missing(job: JobRequest, topo: FleetTopology, n: int, s: int, feasible: np.ndarray,
             have: int, with_free: int) -> str:
    # A pod with a free block of size s has a usable chip free: busy = with some free - feasible.
    return pending_reason(job, topo, n, s, feasible, with_free - have, topo.count - with_free, have)


@functools.lru_cache(maxsize=256)
def size_blocks(idx: BlockIndex, grid: GridTopology, s: int, tp: int,
                 comm: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, slice | np.ndarray]:
    """(block ids, chips in ring order, is the job's preferred shape, the ids as a slice
    when they run consecutively, as blocks of one size do) of every ``s``-chip block."""
    from podfleet.scheduler.plugins.topology_block import preferred_shape

    ids, rows = idx.blocks_for(s)
    is_pref = idx.block_shape[ids] == idx.shape_id[preferred_shape(grid, s, tp, comm)]
    is_pref.setflags(write=False)
    run = len(ids) > 0 and np.array_equal(ids, np.arange(ids[0], ids[0] + len(ids)))
    cols: slice | np.ndarray = slice(int(ids[0]), int(ids[0]) + len(ids)) if run else ids
    return ids, rows, is_pref, cols


def placement_of(h: Handle, job: JobRequest, topo: FleetTopology, pick: np.ndarray, chosen: np.ndarray,
               ids: np.ndarray, rows: np.ndarray, s: int, cross: int) -> tuple[Placement, np.ndarray]:
    """The placement on ``pick``'s pods (the block ``ids[chosen]`` on each), and its
    global chips (rank order) as an array."""
    from podfleet.scheduler.cores import cores_per_chip

    cl = h.cluster
    idx, per = cl.blocks, cl.chips_per_pod
    local = rows[chosen]  # [pods, s] pod-local chips in ring order
    chips_arr = (local + pick[:, None] * per).ravel()
    chips = tuple(chips_arr.tolist())
    block_ids = tuple(ids[chosen].tolist())
    shape = idx.shapes[int(idx.block_shape[block_ids[0]])].shape
    pods = tuple(pick.tolist())
    choice = FleetChoice(pods, tuple((pick // topo.pods_per_block).tolist()), block_ids, s, cross)
    plan = fleet_plan(h, job, topo, len(pods), shape, cross)
    return Placement(
        job_id=job.job_id, pod=pods[0], chips=chips,
        local_chips=tuple(local.ravel().tolist()),
        shape=(len(pods), *shape), offset=(pods[0], *(int(v) for v in idx.block_offset[block_ids[0]])),
        cores_per_chip=cores_per_chip(cl.pods[0].grid.chip_type), plan=plan,
        reason=describe_choice(choice, shape), pods=pods, blocks=choice.blocks,
    ), chips_arr


def fleet_plan(h: Handle, job: JobRequest, topo: FleetTopology, n: int, shape: tuple[int, ...],
               n_crossings: int) -> object | None:
    """``parallelism: auto``: TP/PP/DP for this placement (a fleet of ``n`` pods of ``shape``
    blocks, priced at the network level the gang's ring crosses); None without a planner."""
    planner = h.planner
    if job.parallelism != "auto" or not isinstance(planner, FleetPlanner):
        return None
    level = topo.level("fleet" if n_crossings else "block")
    try:
        return _fleet_plan_cached(planner, job.model, job.grad_compression, job_fleet(topo, n, shape, level))
    except TypeError:  # an unhashable model: planned without the cache
        return _fleet_plan(planner, job.model, job.grad_compression, job_fleet(topo, n, shape, level))


@functools.lru_cache(maxsize=512)
def job_fleet(topo: FleetTopology, n: int, shape: tuple[int, ...], level: NetworkLevel) -> FleetTopology:
    """The gang's own topology: ``n`` pods each holding a ``shape`` block, joined at ``level``."""
    group = topo.group
    if math.prod(shape) != group.n_chips:
        group = job_topology(group, math.prod(shape), shape)
    return FleetTopology(f"{group.name}:{n}", group, n, level.bw_per_chip_bytes_per_s, level.latency_s,
                         pods_per_block=n, levels=topo.levels)


@functools.lru_cache(maxsize=512)
def _fleet_plan_cached(planner: FleetPlanner, model: object, comp: str, topo: FleetTopology) -> object | None:
    return _fleet_plan(planner, model, comp, topo)


def _fleet_plan(planner: FleetPlanner, model: object, comp: str, topo: FleetTopology) -> object | None:
    try:
        return planner.plan_topology(model, topo.n_chips, topo, comp)
    except (PodfleetError, ValueError):
        return None  # no plan runs the model here: the job runs on the fallback model
