"""PostFilter: preempt lower-priority jobs by checkpoint-and-requeue.

When no block is free, find the block whose evictable holders cost least. Evictable:
running, preemptible, strictly lower base priority, running for at least ``min_run_s``
(default 15 min: a job just started is not thrown out again before it makes progress),
and not a job that had starved (queued ``protect_after_wait_s``, default 24 h, in total).
Cost: lowest top victim priority, then fewest
victim chips, then fewest victims. The scheduler nominates those chips for the
preemptor, asks the control plane to checkpoint the victims, and only after
``victims_checkpointed`` releases them (requeued with their checkpoint step) and binds
the preemptor. A victim is never released without its checkpoint. A gang across pods
takes the same victims on the pods and blocks ``scheduler.fleet_preemption`` picks
(``post_filter_across_pods``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import numpy as np

from podfleet.scheduler import fleet_preemption
from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.state import FREE
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest, Nomination

NAME = "preemption"
MAX_PODS = 8  # pods examined per preemption attempt (most evictable chips first)


def pick_block(chips: np.ndarray, owner: np.ndarray, owner_priority: np.ndarray) -> tuple[int, tuple[float, int]]:
    """The rule: among candidate blocks ``chips`` [n, size] (all free or evictable), the
    row to take and its cost (top victim priority, victim chips); lower is better."""
    held = owner[chips] != FREE
    top = np.where(held, owner_priority[chips], -np.inf).max(axis=1)
    count = held.sum(axis=1)
    row = int(np.lexsort((count, top))[0])
    return row, (float(top[row]), int(count[row]))


class Preemption:
    name = NAME

    def __init__(self, handle: Handle, min_run_s: float = 900.0, protect_after_wait_s: float = 24 * 3600.0) -> None:
        self.handle = handle
        self.min_run_s = min_run_s
        self.protect_after_wait_s = protect_after_wait_s

    def post_filter(self, state: CycleState, job: JobRequest, diagnosis: str) -> tuple[Status, Nomination | None]:
        h = self.handle
        cl = h.cluster
        evictable_slots, why = self._victims(state, job, diagnosis)
        if why is not None:
            return why, None
        best = cheapest_block(h, job, evictable_slots)
        if best is None:
            return st.unschedulable(diagnosis + "; preempting lower-priority jobs would not free a block"), None
        _, p, block, chips = best
        owners = sorted({int(o) for o in cl.pods[p].owner[chips] if o != FREE})
        victims = tuple(h.slots[o] for o in owners)
        return st.SUCCESS, Nomination(p, block, tuple(int(c) for c in chips), victims)

    def _victims(self, state: CycleState, job: JobRequest, diagnosis: str) -> tuple[dict[int, float], Status | None]:
        """The evictable slots, or why preemption cannot help (the same for one pod and across pods)."""
        if not job.may_preempt:
            return {}, st.unschedulable(diagnosis + "; its priority class never preempts")
        evictable_slots = self.evictable(state, job)
        if not evictable_slots:
            return {}, st.unschedulable(diagnosis + "; no lower-priority job to preempt (running >= "
                                        f"{self.min_run_s:.0f} s)")
        return evictable_slots, None

    def evictable(self, state: CycleState, job: JobRequest) -> dict[int, float]:
        """The victims ``job`` may take chips from: slot -> priority."""
        if not self.handle.any_running_below(job.priority):
            return {}
        now = float(state.get("now_s", self.handle.now_s()))
        return {
            r.slot: float(r.request.priority)
            for r in self.handle.running.values()
            if r.request.preemptible and r.request.priority < job.priority
            and now - (r.started_s or 0.0) >= self.min_run_s and r.wait_s < self.protect_after_wait_s
        }

    def post_filter_across_pods(self, state: CycleState, job: JobRequest,
                                diagnosis: str) -> tuple[Status, Nomination | None]:
        """A gang across pods: the same victims, on the pods and blocks ``fleet_preemption`` picks."""
        evictable_slots, refused = self._victims(state, job, diagnosis)
        if refused is not None:
            return refused, None
        why, nom = fleet_preemption.choose(self.handle, job, evictable_slots)
        if nom is None:
            return st.unschedulable(f"{diagnosis}; {why}"), None
        return st.SUCCESS, nom


def evictable_blocks(h: Handle, job: JobRequest, evictable_slots: Collection[int]
                     ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Per pod (those with the most evictable chips first, ``MAX_PODS`` at most): the
    blocks for ``job`` whose chips are all free or held by ``evictable_slots``, as
    (pod, block ids, local chips [n, size]). Shared with ``reclaim``."""
    cl = h.cluster
    idx = cl.blocks
    slots = np.array(sorted(evictable_slots))
    sids = idx.shape_ids_for(job.chips, job.shape)
    scored = []
    for pod in cl.pods:
        ev = np.isin(pod.owner, slots)
        if not ev.any():
            continue
        scored.append((int(ev.sum()), pod.index, ev))
    scored.sort(key=lambda t: -t[0])
    # Chips an advance reservation keeps from this job are not won by preempting either.
    denied = h.reservations.denied(job, h.now_s(), len(cl.pods)) if h.reservations else None
    for _, p, ev in scored[:MAX_PODS]:
        pod = cl.pods[p]
        mask = pod.healthy & ~pod.spare & (pod.nominated == FREE) & ((pod.owner == FREE) | ev)
        mask &= pod.hbm_bytes >= job.hbm_bytes_per_chip
        if denied is not None:
            mask &= ~denied[p]
        free = idx.free(mask)
        ids = np.concatenate([np.flatnonzero(free[idx.shapes[s].start : idx.shapes[s].stop]) + idx.shapes[s].start for s in sids])
        if len(ids):
            yield p, ids, np.stack([idx.chips(b) for b in ids])


def cheapest_block(h: Handle, job: JobRequest, evictable_slots: dict[int, float]
                   ) -> tuple[tuple[float, int], int, int, np.ndarray] | None:
    """The block for ``job`` whose chips are all free or held by ``evictable_slots``
    (slot -> priority) with the least cost (``pick_block``): (cost, pod, block, local chips)."""
    best: tuple[tuple[float, int], int, int, np.ndarray] | None = None
    for p, ids, chips in evictable_blocks(h, job, evictable_slots):
        pod = h.cluster.pods[p]
        owner_prio = np.full(pod.n_chips, -np.inf)
        held = pod.owner != FREE
        # Holders that may not be evicted never appear in ``chips`` (masked out above).
        owner_prio[held] = [evictable_slots.get(int(o), np.inf) for o in pod.owner[held]]
        row, cost = pick_block(chips, pod.owner, owner_prio)
        if best is None or cost < best[0]:
            best = (cost, p, int(ids[row]), chips[row])
    return best


def factory(handle: Handle, args: dict[str, Any]) -> Preemption:
    return Preemption(handle, **args)
