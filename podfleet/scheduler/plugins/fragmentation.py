"""Score: best fit that keeps large blocks free.

For each candidate block, with ``left`` = free chips left in its pod after placing it:

    score = 100 * (0.5 * largest free block left / left + 0.5 * (1 - left / pod chips))

(100 when the block fills the pod exactly). The first term keeps what is left
contiguous (within a pod it alone decides: the corner that leaves the biggest hole);
the second packs jobs into the fullest pods, keeping whole pods free for big jobs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import Candidates, CycleState, Handle
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest

NAME = "fragmentation"


def fragmentation(largest_free_block: int, free_chips: int) -> float:
    """The rule: 0 = all free chips form one block, towards 1 = shattered; 0 when none free."""
    if free_chips <= 0:
        return 0.0
    return 1.0 - largest_free_block / free_chips


class Fragmentation:
    name = NAME

    def score(self, state: CycleState, job: JobRequest, cands: Candidates) -> tuple[Status, np.ndarray]:
        idx = cands.cluster.blocks
        free, pod_pos = cands.free, cands.pod_pos
        ones = idx.blocks_for(1)[0]
        free_after = free[:, ones].sum(axis=1)[pod_pos] - job.chips
        # A block that fills its pod scores 100 whatever is left: only the others look for it.
        largest = np.zeros(len(cands), dtype=np.int64)
        rest = free_after > 0
        if rest.any():
            largest[rest] = idx.largest_after_many(free, pod_pos[rest], cands.block[rest])
        pod_chips = cands.cluster.chips_per_pod
        contiguous = largest / np.maximum(free_after, 1)
        packed = 1.0 - free_after / pod_chips
        # Filling a pod exactly is the best fit there is (score 100).
        out = np.where(free_after <= 0, 100.0, 100.0 * (0.5 * contiguous + 0.5 * packed))
        return st.SUCCESS, out


def factory(handle: Handle, args: dict[str, Any]) -> Fragmentation:
    return Fragmentation()
