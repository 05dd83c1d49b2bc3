"""Permit: the gang is complete, and any preemption victims have checkpointed.

Returns ``Wait`` while a preemptor's victims are still saving their state; the
scheduler completes the placement in ``victims_checkpointed``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle, placed_array
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest, Placement

NAME = "gang_permit"


def gang_complete(job: JobRequest, placement: Placement, chips: np.ndarray | None = None) -> bool:
    """The rule: all of the job's ranks have a distinct chip. ``chips``: the same chips as
    an array, when the cycle has one (a sort is cheaper than a set of thousands of ints)."""
    if len(placement.chips) != job.chips:
        return False
    if chips is None:
        return job.chips == len(set(placement.chips))
    ordered = np.sort(chips)
    return bool((ordered[1:] != ordered[:-1]).all())


class GangPermit:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def permit(self, state: CycleState, job: JobRequest, placement: Placement) -> Status:
        if not gang_complete(job, placement, placed_array(state, placement)):
            return st.unschedulable(f"gang incomplete: {len(placement.chips)} of {job.chips} chips")
        rec = self.handle.jobs[job.job_id]
        pending = [v for v in rec.victims if self.handle.jobs[v].phase.value == "checkpointing"]
        if pending:
            return st.wait(f"waiting for {len(pending)} victim(s) to checkpoint: {', '.join(pending)}")
        return st.SUCCESS


def factory(handle: Handle, args: dict[str, Any]) -> GangPermit:
    return GangPermit(handle)
