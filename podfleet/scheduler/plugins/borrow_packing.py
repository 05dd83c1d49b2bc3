"""Score: keep borrowed chips together, apart from the owners' jobs, so reclaim can free a block.

A reclaim only preempts jobs of queues that borrow (``reclaim``), and a gang needs a
contiguous block: when borrowers' jobs are interleaved with jobs of queues within their
nominal quota, no block can be freed until those end. So, for a queue in a cohort, a
job admitted on borrowed quota prefers blocks at the high end of the pod's chip order
and a job within its nominal quota the low end:

    score = 100 * mean(local chip index) / (chips per pod - 1)      (borrowing)
    score = 100 - that                                              (within nominal)

Jobs of queues in no cohort are left out (Skip).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import Candidates, CycleState, Handle
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest

NAME = "borrow_packing"


def high_end(local_chips: np.ndarray, chips_per_pod: int) -> np.ndarray:
    """The rule: 0-100 per candidate block, 100 = the pod's last chips."""
    return np.asarray(100.0 * local_chips.mean(axis=1) / max(chips_per_pod - 1, 1), dtype=float)


class BorrowPacking:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def score(self, state: CycleState, job: JobRequest, cands: Candidates) -> tuple[Status, np.ndarray]:
        spec = self.handle.queues.get(job.queue)
        verdict = state.get("admission")
        if spec is None or spec.cohort is None or verdict is None:
            return st.SKIP, np.zeros(len(cands))
        s = high_end(cands.chips, cands.cluster.chips_per_pod)
        return st.SUCCESS, (s if verdict.borrow > 0 else 100.0 - s)


def factory(handle: Handle, args: dict[str, Any]) -> BorrowPacking:
    return BorrowPacking(handle)
