"""The local fabric: real worker processes on this host (torch runs only in the workers)."""

from podfleet.fabric.local.fabric import LocalFabric
from podfleet.fabric.local.jobs import Cause, JobStatus

__all__ = ["Cause", "JobStatus", "LocalFabric"]
