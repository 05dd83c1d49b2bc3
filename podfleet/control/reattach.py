"""Re-attaching to gangs that ran on through a control-plane restart.

A fabric whose workers outlive the plane (``fabric.base.Reattachable``: the local agent)
is asked, for each job the store says was running, whether it still holds the gang. If
it does, the job stays RUNNING on the chips the fabric names, at the step its replayed
reports bring (no resume from a checkpoint, no lost steps). If not, the caller resumes
the job from its checkpoint as before, with the reason this returns on the job. After the
reload (``JobManager.restore_all``, the plane's reload, also what a new leader runs),
``discard_unadopted`` stops what no job claimed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from podfleet.control.jobtable import Job, JobTable
from podfleet.control.placement import Allocation
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import PodfleetError
from podfleet.fabric.base import Adoption, Reattachable

log = logging.getLogger("podfleet.control")


def adopt(table: JobTable, rt: ClusterRuntime, job: Job) -> tuple[Adoption | None, str]:
    """The running gang of ``job`` taken back, or None and why not (for the job's reason)."""
    fab = rt.fabric
    if not isinstance(fab, Reattachable):
        return None, f"fabric {rt.spec.fabric} runs nothing after a restart"
    try:
        adoption = fab.adopt(job.id, job.status.checkpoint_step)
    except PodfleetError as exc:
        return None, f"cannot re-attach: {exc.message}"
    if adoption is None:
        return None, "no running gang to re-attach to"
    if job.chips != adoption.chips:
        table.amend(job, allocation=Allocation(adoption.chips, (len(adoption.chips),),
                                               "re-attached after a control-plane restart"), persist=True)
    rt.owners.assign(job.id, adoption.chips)
    table.log(job, f"re-attached after a control-plane restart: attempt {adoption.attempt}, pids "
                   f"{list(adoption.pids)} on chips {list(adoption.chips)}; {adoption.replayed} missed reports "
                   "replayed")
    return adoption, ""


def discard_unadopted(clusters: Iterable[ClusterRuntime], now: float) -> None:
    for rt in clusters:
        fab = rt.fabric
        if isinstance(fab, Reattachable):
            try:
                gone = fab.discard_unadopted()
            except PodfleetError as exc:
                log.warning("cluster %s: stopping workers no job claimed failed: %s", rt.id, exc.message)
                continue
            if gone:
                rt.logs.append(now, f"stopped workers of jobs not running after the restart: {', '.join(gone)}")
