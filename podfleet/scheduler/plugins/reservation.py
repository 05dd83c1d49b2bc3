"""Reserve / Unreserve: mark the gang's chips as held by the job, all at once or none.

Both are idempotent: reserving chips the job already holds succeeds, unreserving
releases only chips held by this job (and does nothing if it holds none).
"""

from __future__ import annotations

from typing import Any

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle, placed_chips
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
        # Every chip in one gather over the fleet's flat chip arrays (a global chip is its
        # index there): a gang across pods is checked whole before any chip is taken.
        chips = placed_chips(state, placement)
        owner, nominated = cl.arrays.flat_owner, cl.arrays.flat_nominated
        held = owner[chips]
        if ((held != FREE) & (held != slot)).any():
            return st.unschedulable(f"chips {placement.chips} are no longer free")
        nom = nominated[chips]
        if ((nom != FREE) & (nom != slot)).any():
            return st.unschedulable("chips are nominated for another job")
        owner[chips] = slot
        nominated[chips] = FREE
        cl.touch_pods(placement.all_pods)
        return st.SUCCESS

    def unreserve(self, state: CycleState, job: JobRequest, placement: Placement) -> None:
        self.handle.cluster.release(self._slot(job), placement.all_pods)


def factory(handle: Handle, args: dict[str, Any]) -> Reservation:
    return Reservation(handle)
