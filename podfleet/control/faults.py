"""Fault injection on a cluster: checks a request against what the cluster's fabric
declares, then hands it to the fabric (engine thread, inside ``InjectFault``)."""

from __future__ import annotations

from podfleet.control.drivers import JobDriver, ProcessDriver
from podfleet.control.lifecycle import ClusterState
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import (
    ConflictError,
    InfeasibleError,
    InvalidInputError,
    NotFoundError,
    UnknownNameError,
)
from podfleet.fabric.base import FaultInjection
from podfleet.hardware.faults import FAULT_KINDS, LINK_FAULTS
from podfleet.hardware.topology import FleetTopology, Topology
from podfleet.wire import JsonObject

KILL_WORKER = "kill-worker"  # clusters of worker processes (control.drivers.process)
SLOW_WORKER = "slow-worker"  # likewise: one rank computes ``factor`` times slower per sample
WORKER_FAULTS = (KILL_WORKER, SLOW_WORKER)
# A twin fleet's pod lost as a whole (power, switch): every chip of ``pod`` at once
# (``control.podloss``). Not a ``FaultKind``: those strike one chip or link, with rates.
POD_LOSS = "pod-loss"
# Fields of InjectFault that another kind takes: given to this one, they are a mistake (a
# chip-failure with a factor), refused rather than ignored. The schema says the same.
_FOREIGN = {KILL_WORKER: ("chip", "link", "factor", "pod"), SLOW_WORKER: ("chip", "link", "pod"),
            POD_LOSS: ("chip", "link", "rank", "job_id", "factor")}
_TWIN_FOREIGN = ("rank", "job_id", "factor", "pod")


def refuse_foreign(kind: str, given: dict[str, object]) -> None:
    """422 when ``given`` (InjectFault's fields, None when absent) names one ``kind`` does not take."""
    foreign = _FOREIGN.get(kind, _TWIN_FOREIGN)
    extra = next((k for k in foreign if given.get(k) is not None), None)
    if extra is not None:
        takes = {KILL_WORKER: "rank and job_id", SLOW_WORKER: "rank, factor and job_id", POD_LOSS: "pod"}.get(
            kind, "link" if kind in LINK_FAULTS else "chip")
        raise InfeasibleError(f"{kind} takes {takes}, not {extra}", field=extra)


def inject(rt: ClusterRuntime, kind: str, *, chip: int | None, link: str | None,
           now: float) -> tuple[JsonObject, str]:
    """Inject ``kind`` at ``chip`` or ``link`` ("A-B"); the result and the audit target."""
    if kind not in FAULT_KINDS:
        raise UnknownNameError("fault kind", kind, (*FAULT_KINDS, *WORKER_FAULTS, POD_LOSS), field="kind")
    fabric = rt.fabric
    if not isinstance(fabric, FaultInjection):
        raise InfeasibleError(f"fault {kind} needs the twin (a fabric with fault injection); cluster "
                                f"{rt.rec.name} runs on fabric {rt.spec.fabric}: use kill-worker or slow-worker",
                                field="kind", allowed=list(WORKER_FAULTS))
    if rt.state != ClusterState.ACTIVE:
        raise ConflictError(f"cluster {rt.rec.name} is {rt.state.value}; faults need an active cluster")
    link_index = None
    if kind in LINK_FAULTS:
        if link is None or chip is not None:
            raise InfeasibleError(f"{kind} needs --link A-B (and no chip)", field="link")
        link_index = find_link(rt.topology, link)
    else:
        if chip is None or link is not None:
            raise InfeasibleError(f"{kind} needs --chip N (and no link)", field="chip")
        rt.check_chip(chip)
    target = f"{rt.id}/link/{link}" if link_index is not None else f"{rt.id}/chip/{chip}"
    fabric.inject_fault(kind, chip=chip, link=link_index)
    rt.logs.append(now, f"fault injected: {kind} at {target.split('/', 1)[1]}")
    return {"cluster_id": rt.id, "kind": kind, "chip": chip, "link": link,
            "link_index": link_index, "injected_at": now}, target


def pod_target(rt: ClusterRuntime, pod: int | None) -> tuple[FaultInjection, FleetTopology, int]:
    """What a pod-loss needs: the twin (fault injection), a fleet cluster, an active one,
    and ``pod`` one of its pods."""
    fabric, topo = rt.fabric, rt.topology
    if not isinstance(fabric, FaultInjection):
        raise InfeasibleError(f"{POD_LOSS} needs the twin (a fabric with fault injection); cluster {rt.rec.name} "
                              f"runs on fabric {rt.spec.fabric}", field="kind")
    if not isinstance(topo, FleetTopology):
        raise InfeasibleError(f"{POD_LOSS} needs a fleet cluster (--pods N); {rt.rec.name} is one pod", field="pod")
    if rt.state != ClusterState.ACTIVE:
        raise ConflictError(f"cluster {rt.rec.name} is {rt.state.value}; faults need an active cluster")
    if pod is None:
        raise InfeasibleError(f"{POD_LOSS} needs --pod N", field="pod")
    if not 0 <= pod < topo.count:
        raise InvalidInputError(f"pod must be 0-{topo.count - 1} (cluster {rt.rec.name} has {topo.count} pods), "
                                f"got {pod}", field="pod")
    return fabric, topo, pod


def find_link(topology: Topology, link: str) -> int:
    """The index of the link between chips A and B, from "A-B"."""
    try:
        a_s, b_s = link.split("-")
        a, b = int(a_s), int(b_s)
    except ValueError:
        raise InvalidInputError(f"link must look like A-B (two chip indices), got {link!r}", field="link") from None
    for lk in topology.links:
        if {lk.src, lk.dst} == {a, b}:
            return lk.index
    raise NotFoundError(
        f"no link between chips {a} and {b}; neighbours of {a}: "
        f"{topology.neighbours(a) if 0 <= a < topology.n_chips else 'none'}", field="link",
    )


def kill_worker(drv: JobDriver, rt: ClusterRuntime, rank: int | None, job_id: str | None) -> tuple[JsonObject, str]:
    """InjectFault kill-worker: SIGKILL one rank's worker (fabrics of worker processes)."""
    if not isinstance(drv, ProcessDriver):
        raise InfeasibleError(
            f"kill-worker needs a cluster of worker processes (local, ray, neuron); {rt.rec.name} runs on "
            f"fabric {rt.spec.fabric} (use --kind with a twin fault such as chip-failure)", field="kind")
    return drv.kill_worker(rank, job_id)


def slow_worker(drv: JobDriver, rt: ClusterRuntime, rank: int | None, job_id: str | None,
                factor: float | None) -> tuple[JsonObject, str]:
    """InjectFault slow-worker: one rank's worker computes ``factor`` times slower."""
    if not isinstance(drv, ProcessDriver):
        raise InfeasibleError(
            f"slow-worker needs a cluster of worker processes (local, ray, neuron); {rt.rec.name} runs on "
            f"fabric {rt.spec.fabric} (use --kind with a twin fault such as thermal-runaway)", field="kind")
    return drv.slow_worker(rank, job_id, factor)
