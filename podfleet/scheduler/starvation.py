"""No starvation: a job queued past ``starvation_s`` holds the block it waits for.

Instead of stopping all backfill, the starving job (one at a time: the first in queue
order) is given a soft reservation: of the blocks it could use (healthy, no spares, no
other nomination), the one with the most chips free now; those free chips are
nominated for it so no other job takes them, while jobs elsewhere keep backfilling.
As the jobs running inside that block finish, their chips join the reservation too,
until the whole block is free and the job binds. The reservation is re-chosen every
cycle, so it moves to a block that frees up sooner.
"""

from __future__ import annotations

import numpy as np

from podfleet.scheduler.state import FREE, SchedulerView
from podfleet.scheduler.types import fmt_shape


def release(cluster: SchedulerView, slot: int, pods: list[int] | None = None) -> None:
    """Clear ``slot``'s nominations on ``pods`` (all pods when None)."""
    for pod in cluster.pods if pods is None else [cluster.pods[p] for p in pods]:
        held = pod.nominated == slot
        if held.any():
            pod.nominated[held] = FREE
            cluster.touch(pod)


def hold_block(cluster: SchedulerView, slot: int, size: int, shape: tuple[int, ...] | None) -> tuple[str, int] | None:
    """Nominate the free chips of the most-free usable block for ``slot``; (reason, pod)."""
    idx = cluster.blocks
    ids, chips = idx.blocks_for(size, shape)
    if not len(ids):
        return None
    best: tuple[int, int, int] | None = None  # (free chips, pod, row)
    for pod in cluster.pods:
        possible = pod.healthy & ~pod.spare & ((pod.nominated == FREE) | (pod.nominated == slot))
        ok = possible[chips].all(axis=1)
        if not ok.any():
            continue
        free_now = (possible & (pod.owner == FREE))[chips].sum(axis=1)
        free_now = np.where(ok, free_now, -1)
        row = int(np.argmax(free_now))
        if best is None or free_now[row] > best[0]:
            best = (int(free_now[row]), pod.index, row)
    if best is None:
        return None
    n_free, p, row = best
    pod = cluster.pods[p]
    block = chips[row]
    take = block[(pod.owner[block] == FREE) & (pod.nominated[block] == FREE)]
    pod.nominated[take] = slot
    cluster.touch(pod)
    shape_s = fmt_shape(idx.shapes[int(idx.block_shape[ids[row]])].shape)
    return f"holding {n_free} of {size} chips of a {shape_s} block on pod {p} until the jobs there finish", p
