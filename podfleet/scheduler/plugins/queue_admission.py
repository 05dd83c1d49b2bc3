"""Admit: a job enters placement only when its queue has quota for it (``scheduler.queues``).

Within the queue's nominal quota: admitted, or, when that quota is lent out, left for
Reclaim (``state["admission"].reclaim`` > 0). Above nominal: admitted when the queue may
borrow that much and its cohort has that much idle quota to lend. A job larger than its
queue could ever hold, or of a queue that does not exist, is unresolvable.
"""

from __future__ import annotations

from typing import Any

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest

NAME = "queue_admission"


class QueueAdmission:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def admit(self, state: CycleState, job: JobRequest) -> Status:
        verdict = self.handle.queues.admit(job.queue, job.chips)
        state["admission"] = verdict
        if verdict.ok:
            return st.SUCCESS
        if verdict.final:
            return st.unresolvable(verdict.reason)
        return st.unschedulable(verdict.reason)


def factory(handle: Handle, args: dict[str, Any]) -> QueueAdmission:
    return QueueAdmission(handle)
