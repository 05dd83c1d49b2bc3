"""Reserve / Unreserve: mark the gang's chips as held by the job, all at once or none.

Both are idempotent: reserving chips the job already holds succeeds, unreserving
releases only chips held by this job (and does nothing if it holds none).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.state import FREE
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest, Placement

NAME = "reservation"


class Reservation:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def _slot(self, job: JobRequest) -> int:
        return self.handle.jobs[job.job_id].slot

    def reserve(self, state: CycleState, job: JobRequest, placement: Placement) -> Status:
        cl = self.handle.cluster
        slot = self._slot(job)
        per = cl.chips_per_pod
        # Every chip by (pod, local chip) in one gather: a gang across pods is checked whole
        # before any chip is taken.
        chips_arr = np.fromiter(placement.chips, dtype=np.int64, count=len(placement.chips))
        pod_of, local = np.divmod(chips_arr, per)
        arrays = cl.arrays
        held = arrays.owner[pod_of, local]
        if ((held != FREE) & (held != slot)).any():
            return st.unschedulable(f"chips {placement.chips} are no longer free")
        nominated = arrays.nominated[pod_of, local]
        if ((nominated != FREE) & (nominated != slot)).any():
            return st.unschedulable("chips are nominated for another job")
        arrays.owner[pod_of, local] = slot
        arrays.nominated[pod_of, local] = FREE
        cl.touch_pods(placement.all_pods)
        return st.SUCCESS

    def unreserve(self, state: CycleState, job: JobRequest, placement: Placement) -> None:
        self.handle.cluster.release(self._slot(job), placement.all_pods)


def factory(handle: Handle, args: dict[str, Any]) -> Reservation:
    return Reservation(handle)
