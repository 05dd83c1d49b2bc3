"""Preemption for a gang across pods: the pods and blocks whose holders cost least to evict.

The victims are those of one pod (``plugins.preemption``: running, preemptible,
strictly lower base priority, running ``min_run_s`` at least, not a job that had
starved; chips an advance reservation keeps from the job are not won by preempting
either); the caller passes them as ``evictable`` (slot -> priority). The split is the
placement's (``fleet.splits``: the same block size on each of N pods, fewest pods first).
For each split, every pod's cheapest block of that size whose chips are all free or
evictable, costed as ``preemption.pick_block`` costs a block (top victim priority, then
victim chips; the job's preferred shape among equals). Then N pods:

* inside one network block when one has N such pods: the block whose N cheapest pods
  evict the lowest top priority, then the fewest chips (the gang never crosses a spine
  because of preemption);
* else, unless ``topology_required`` is ``block``, the N cheapest pods of the fleet.

Ranks run pod by pod in index order, as a placement found without preemption. A victim
that is itself a gang across pods goes whole (checkpointed and requeued), freeing its
chips on the other pods too.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from podfleet.hardware.topology import FleetTopology
from podfleet.scheduler import fleet
from podfleet.scheduler.extension import Handle
from podfleet.scheduler.state import FREE
from podfleet.scheduler.types import JobRequest, Nomination

_NONE = np.iinfo(np.int64).max  # cost of a block that preemption cannot free


def choose(h: Handle, job: JobRequest, evictable: dict[int, float]) -> tuple[str, Nomination | None]:
    """A nomination across pods for ``job`` by preempting among ``evictable``, or (why not, None)."""
    cl = h.cluster
    topo = cl.topology
    if not isinstance(topo, FleetTopology) or not evictable:
        return "no lower-priority job to preempt", None
    a, idx, per = cl.arrays, cl.blocks, cl.chips_per_pod
    slots = np.fromiter(sorted(evictable), dtype=np.int64, count=len(evictable))
    ev = np.isin(a.owner, slots)  # [pods, chips]: held by an evictable job
    usable = a.healthy & ~a.spare & (a.nominated == FREE) & ((a.owner == FREE) | ev)
    usable &= a.hbm_bytes >= job.hbm_bytes_per_chip
    denied = h.reservations.denied(job, h.now_s(), len(cl.pods)) if h.reservations else None
    if denied is not None:
        usable &= ~denied
    # Each chip's victim priority as a rank among the evictable priorities (0: free), so a
    # block's cost is one integer: (top rank, victim chips, not the preferred shape).
    levels = np.unique(np.fromiter(evictable.values(), dtype=np.float64, count=len(evictable)))
    slot_rank = np.searchsorted(levels, [evictable[int(s)] for s in slots]) + 1
    rank = np.zeros(a.owner.shape, dtype=np.int64)
    rank[ev] = slot_rank[np.searchsorted(slots, a.owner[ev])]
    k = topo.pods_per_block
    for n, s in fleet.splits(job, per, len(cl.pods), fleet.block_sizes_of(idx)):
        ids, rows, is_pref, _ = fleet.size_blocks(idx, cl.pods[0].grid, s, math.gcd(job.tp, s), job.comm)
        ok = usable[:, rows].all(axis=2)  # [pods, blocks of size s]
        victims_chips = ev[:, rows].sum(axis=2)
        top = rank[:, rows].max(axis=2)
        cost = np.where(ok, (top * (s + 1) + victims_chips) * 2 + ~is_pref, _NONE)
        best = cost.argmin(axis=1)  # each pod's cheapest block
        pod_cost = cost[np.arange(len(cl.pods)), best]
        pick = _pods(pod_cost, top[np.arange(len(cl.pods)), best], victims_chips[np.arange(len(cl.pods)), best],
                     n, k, block_only=job.topology_required == "block")
        if pick is None:
            continue
        chosen = best[pick]
        placement, chips = fleet.placement_of(h, job, topo, pick, chosen, ids, rows, s, fleet.crossings(pick // k))
        owners = sorted({int(o) for o in np.unique(a.flat_owner[chips]) if o != FREE})
        if not owners:
            continue  # free without preempting: the placement itself will find it
        victims = tuple(h.slots[o] for o in owners)
        placement = replace(placement, reason=placement.reason + " (after preemption)")
        return "", Nomination(int(pick[0]), int(ids[chosen[0]]), placement.local_chips, victims, placement=placement)
    need = "one network block of pods" if job.topology_required == "block" else "pods"
    return f"preempting lower-priority jobs would not free {need} enough for the gang", None


def _pods(cost: np.ndarray, top: np.ndarray, victim_chips: np.ndarray, n: int, k: int, *,
          block_only: bool) -> np.ndarray | None:
    """N pods by cost (``_NONE``: not possible), in index order: one network block's when
    one has N, the cheapest block first; else the fleet's cheapest unless ``block_only``."""
    possible = cost < _NONE
    if int(possible.sum()) < n:
        return None
    best: tuple[int, int, int] | None = None
    pick: np.ndarray | None = None
    for b in range(-(-len(cost) // k)):
        pods = b * k + np.flatnonzero(possible[b * k:(b + 1) * k])
        if len(pods) < n:
            continue
        take = pods[np.argsort(cost[pods], kind="stable")[:n]]
        key = (int(top[take].max()), int(victim_chips[take].sum()), b)
        if best is None or key < best:
            best, pick = key, np.sort(take)
    if pick is not None or block_only:
        return pick
    pods = np.flatnonzero(possible)
    return np.sort(pods[np.argsort(cost[pods], kind="stable")[:n]])
