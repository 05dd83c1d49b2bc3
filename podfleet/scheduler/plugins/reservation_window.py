"""Filter: keep jobs off chips an advance reservation holds (``scheduler.reservations``).

During a reservation's window its chips go to jobs of its queue only (to nobody when it
names none); before the window a job may take them only if its time limit ends by the
start, so backfill never delays a reservation. Not to be confused with ``reservation``,
the Reserve/Unreserve stage of one placement.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.state import PodState, SchedulerView
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest

NAME = "reservation_window"


class ReservationWindow:
    name = NAME
    job_dependent = True  # the answer depends on the job's queue and time limit

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        # Returned with SKIP (read by nobody): one array, not one per pod per job.
        self._all = np.ones(handle.cluster.chips_per_pod, dtype=bool)

    def _denied(self, state: CycleState, job: JobRequest) -> np.ndarray | None:
        # One answer per job per cycle: the framework asks pod by pod.
        key = f"reservation_window:{job.job_id}"
        if key not in state:
            h = self.handle
            now = float(state.get("now_s", h.now_s()))
            state[key] = h.reservations.denied(job, now, len(h.cluster.pods))
        denied: np.ndarray | None = state[key]
        return denied

    def filter(self, state: CycleState, job: JobRequest | None, pod: PodState) -> tuple[Status, np.ndarray]:
        if job is None or not self.handle.reservations:
            return st.SKIP, self._all
        denied = self._denied(state, job)
        if denied is None:
            return st.SKIP, self._all
        return st.SUCCESS, ~denied[pod.index]

    def filter_pods(self, state: CycleState, job: JobRequest | None, view: SchedulerView,
                    pods: np.ndarray) -> tuple[Status, np.ndarray]:
        shape = (len(pods), view.chips_per_pod)
        if job is None or not self.handle.reservations:
            return st.SKIP, np.ones(shape, dtype=bool)
        denied = self._denied(state, job)
        if denied is None:
            return st.SKIP, np.ones(shape, dtype=bool)
        return st.SUCCESS, ~denied[pods]


def factory(handle: Handle, args: dict[str, Any]) -> ReservationWindow:
    return ReservationWindow(handle)
