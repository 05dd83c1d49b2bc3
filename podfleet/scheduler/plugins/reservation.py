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
        # A gang across pods: its chips grouped by pod; all checked before any is taken.
        chips_arr = np.asarray(placement.chips, dtype=np.int64)
        pod_of = chips_arr // per
        groups = [(cl.pods[p], chips_arr[pod_of == p] - p * per) for p in placement.all_pods] \
            if placement.pods else [(cl.pods[placement.pod], np.asarray(placement.local_chips, dtype=np.int64))]
        for pod, chips in groups:
            held = pod.owner[chips]
            if ((held != FREE) & (held != slot)).any():
                return st.unschedulable(f"chips {placement.chips} are no longer free")
            nominated = pod.nominated[chips]
            if ((nominated != FREE) & (nominated != slot)).any():
                return st.unschedulable("chips are nominated for another job")
        for pod, chips in groups:
            pod.owner[chips] = slot
            pod.nominated[chips] = FREE
            cl.touch(pod)
        return st.SUCCESS

    def unreserve(self, state: CycleState, job: JobRequest, placement: Placement) -> None:
        cl = self.handle.cluster
        slot = self._slot(job)
        for p in placement.all_pods:
            pod = cl.pods[p]
            mine = pod.owner == slot
            if mine.any():
                pod.owner[mine] = FREE
                cl.touch(pod)


def factory(handle: Handle, args: dict[str, Any]) -> Reservation:
    return Reservation(handle)
