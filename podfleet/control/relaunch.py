"""A RECOVERING job back on chips: ranks whose chips are gone (failed, or lost in a
restart) move to replacement chips (``control.replacement``: a spare, a free chip, or its
own chip once the fabric's check passes), and the gang continues from its checkpoint.

Engine thread, inside the job manager's scheduling pass. It is given the job table and
the cluster's driver and calls nothing back: the job manager decides when to look again
(a job whose pod was lost as a whole goes through ``control.podloss`` instead).
"""

from __future__ import annotations

from podfleet.control import dispatch
from podfleet.control.drivers.base import JobDriver
from podfleet.control.jobtable import Job, JobTable
from podfleet.control.placement import Allocation
from podfleet.control.replacement import choose_replacements
from podfleet.control.runtime import ClusterRuntime
from podfleet.fabric.base import ChipCheck
from podfleet.hardware.topology import FleetTopology


def relaunch_on_replacements(table: JobTable, drv: JobDriver, rt: ClusterRuntime, job: Job) -> bool:
    """Relaunch ``job`` with its lost ranks moved. True when it still waits for healthy
    chips and should be looked at again: a real fabric's check may pass later (a node
    back, a fresh view); nothing else wakes a recovering job the queue does not hold."""
    alloc = job.status.allocation or Allocation.waiting("")
    bad = [c for c in alloc.chips if rt.owners.get(c) != job.id]
    fab = rt.fabric
    check = fab.check_chip_health if isinstance(fab, ChipCheck) else None
    topo = rt.topology
    pod_of = topo.split_pod if isinstance(topo, FleetTopology) else None
    plan = choose_replacements(bad, rt.replacement_chips(), set(rt.spares), set(alloc.chips), check, pod_of)
    if not plan.ready:
        table.set_reason(job, f"waiting for {len(plan.waiting)} healthy chip(s) to replace "
                              f"{sorted(plan.waiting)}: {'; '.join(plan.waiting.values())}")
        return check is not None
    swap = {b: n for b, (n, _path) in plan.moves.items() if n != b}
    chips = tuple(swap.get(c, c) for c in alloc.chips)
    moved = ", ".join(f"rank {alloc.chips.index(b)}: chip {b} -> {n} ({path})"
                      for b, (n, path) in plan.moves.items())
    pods, blocks = _fleet_pods(topo, chips, alloc)
    new = Allocation(chips, alloc.shape if not swap else (len(chips),),
                     alloc.reason if not swap else f"recovered: {moved}", pods=pods, blocks=blocks)
    table.amend(job, allocation=new)
    table.log(job, f"recovery: {moved or 'same chips'}; resuming from checkpoint step "
                   f"{job.status.checkpoint_step}")
    dispatch.launch(table, drv, rt, job, new)
    return False


def _fleet_pods(topo: object, chips: tuple[int, ...], alloc: Allocation) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A gang across pods after recovery: its pods (in rank order) and their blocks."""
    if not alloc.pods or not isinstance(topo, FleetTopology):
        return (), ()
    pods = tuple(dict.fromkeys(topo.split_pod(c) for c in chips))
    return pods, tuple(topo.block_of(p) for p in pods)
