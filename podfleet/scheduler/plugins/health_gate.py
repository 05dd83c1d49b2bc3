"""Filter: only healthy chips take new work (degraded, failed, isolated, updating do not)."""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.fabric.base import ChipState
from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.state import PodState, SchedulerView
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest

NAME = "health_gate"


def chip_usable(state: ChipState) -> bool:
    """The rule: a chip may be given to a new job only when HEALTHY."""
    return ChipState(state) is ChipState.HEALTHY


class HealthGate:
    name = NAME
    job_dependent = False

    def filter(self, state: CycleState, job: JobRequest | None, pod: PodState) -> tuple[Status, np.ndarray]:
        return st.SUCCESS, pod.healthy.copy()


    def filter_pods(self, state: CycleState, job: JobRequest | None, view: SchedulerView,
                    pods: np.ndarray) -> tuple[Status, np.ndarray]:
        return st.SUCCESS, view.arrays.healthy[pods]

def factory(handle: Handle, args: dict[str, Any]) -> HealthGate:
    return HealthGate()
