"""PreFilter + Filter: each rank's memory must fit its chip's usable HBM.

PreFilter rejects (UnschedulableAndUnresolvable) a job that needs more HBM per chip
than the chip type has at all; Filter drops chips whose usable HBM is reduced (for
example HBM rows retired by the health monitor) below the job's need.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.hardware.specs import GiB, get_chip
from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.state import PodState, SchedulerView
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest

NAME = "hbm_fit"


def fits(job: JobRequest, block_hbm_bytes: np.ndarray) -> bool:
    """The rule: every chip of the block has at least the job's per-rank HBM."""
    return bool((np.asarray(block_hbm_bytes) >= job.hbm_bytes_per_chip).all())


class HbmFit:
    name = NAME
    job_dependent = True

    def __init__(self, cluster: SchedulerView) -> None:
        self.chip = get_chip(cluster.pods[0].grid.chip_type)

    def pre_filter(self, state: CycleState, job: JobRequest) -> Status:
        if job.hbm_bytes_per_chip > self.chip.hbm_bytes:
            return st.unresolvable(
                f"job needs {job.hbm_bytes_per_chip / GiB:.1f} GiB HBM per chip; "
                f"a {self.chip.name} chip has {self.chip.hbm_bytes / GiB:.0f} GiB"
            )
        return st.SUCCESS

    def filter(self, state: CycleState, job: JobRequest | None, pod: PodState) -> tuple[Status, np.ndarray]:
        if job is None or job.hbm_bytes_per_chip == 0:
            return st.SKIP, pod.hbm_bytes >= 0
        return st.SUCCESS, pod.hbm_bytes >= job.hbm_bytes_per_chip


    def filter_pods(self, state: CycleState, job: JobRequest | None, view: SchedulerView,
                    pods: np.ndarray) -> tuple[Status, np.ndarray]:
        hbm = view.arrays.hbm_bytes[pods]
        if job is None or job.hbm_bytes_per_chip == 0:
            return st.SKIP, hbm >= 0
        return st.SUCCESS, hbm >= job.hbm_bytes_per_chip

def factory(handle: Handle, args: dict[str, Any]) -> HbmFit:
    return HbmFit(handle.cluster)
