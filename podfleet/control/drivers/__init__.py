"""Job drivers: the fabric-specific half of a job's life, chosen once per cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING

from podfleet.control.drivers.base import JobDriver, JobOps, RecoveryPort
from podfleet.control.drivers.process import ProcessDriver
from podfleet.control.drivers.twin import TwinDriver, TwinFabric

if TYPE_CHECKING:
    from podfleet.control.runtime import ClusterRuntime

__all__ = ["JobDriver", "JobOps", "ProcessDriver", "RecoveryPort", "TwinDriver", "driver_for"]


def driver_for(jobs: JobOps, rt: ClusterRuntime) -> JobDriver:
    """The driver for a cluster, from what its fabric declares (never its name)."""
    if isinstance(rt.fabric, TwinFabric):
        return TwinDriver(jobs, rt, rt.fabric)
    return ProcessDriver(jobs, rt)
