"""Reserve / Unreserve: mark the gang's chips as held by the job, all at once or none.

Both are idempotent: reserving chips the job already holds succeeds, unreserving
releases only chips held by this job (and does nothing if it holds none).
"""

from __future__ import annotations

from typing import Any

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
        pod = cl.pods[placement.pod]
        slot = self._slot(job)
        chips = list(placement.local_chips)
        held = pod.owner[chips]
        if ((held != FREE) & (held != slot)).any():
            return st.unschedulable(f"chips {placement.chips} are no longer free")
        nominated = pod.nominated[chips]
        if ((nominated != FREE) & (nominated != slot)).any():
            return st.unschedulable("chips are nominated for another job")
        pod.owner[chips] = slot
        pod.nominated[chips] = FREE
        cl.touch(pod)
        return st.SUCCESS

    def unreserve(self, state: CycleState, job: JobRequest, placement: Placement) -> None:
        cl = self.handle.cluster
        pod = cl.pods[placement.pod]
        slot = self._slot(job)
        mine = pod.owner == slot
        if mine.any():
            pod.owner[mine] = FREE
            cl.touch(pod)


def factory(handle: Handle, args: dict[str, Any]) -> Reservation:
    return Reservation(handle)
