"""Filter: spare chips are held back for failover and never used for normal placement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.state import PodState, SchedulerView
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest

NAME = "spare_guard"


def avoids_spares(chips: Sequence[int], spare: np.ndarray) -> bool:
    """The rule: a normal placement holds no spare chip."""
    return not bool(np.asarray(spare, bool)[list(chips)].any())


class SpareGuard:
    name = NAME
    job_dependent = False

    def filter(self, state: CycleState, job: JobRequest | None, pod: PodState) -> tuple[Status, np.ndarray]:
        return st.SUCCESS, ~pod.spare


    def filter_pods(self, state: CycleState, job: JobRequest | None, view: SchedulerView,
                    pods: np.ndarray) -> tuple[Status, np.ndarray]:
        return st.SUCCESS, ~view.arrays.spare[pods]

def factory(handle: Handle, args: dict[str, Any]) -> SpareGuard:
    return SpareGuard()
