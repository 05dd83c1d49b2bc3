"""A two-pod twin cluster on the real control plane in virtual time, for the recovery
benchmarks (``bench/recovery_time.py``, ``bench/firmware.py``, ``bench/ettr.py``).

The control plane is ``compose.build`` on a seeded ``Timeline`` and an in-memory store;
the cluster is created, jobs submitted, faults injected and firmware rolled out through
the commands the API calls. Only the cluster's fabric is built here: a fleet of two
Trn2 UltraServers (128 chips, one cluster, as ``podfleet sim`` does) whose failed chips a
technician replaces after ``repair_s`` (the twin's repair model; an assumption).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podfleet.compose import Parts, build
from podfleet.control.plane import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import Fabric
from podfleet.fabric.sim.fabric import SimFabric
from podfleet.fabric.sim.faults import FaultRates
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.topology import Topology
from podfleet.recovery.model import Timings
from podfleet.store.memory import MemoryStore

ACTOR = "bench"
CLUSTER = "pod"


@dataclass
class RecoveryRehearsal:
    tl: Timeline
    parts: Parts
    fabric: SimFabric
    cluster_id: str
    jobs: list[str] = field(default_factory=list)

    @property
    def plane(self) -> ControlPlane:
        return self.parts.plane

    def submit(self, body: dict[str, Any], *, limit_s: float = 600.0) -> str:
        """Submit a job and run until it is RUNNING; its id."""
        job_id = str(self.plane.jobs.submit(CLUSTER, body, actor=ACTOR)["id"])
        end = self.tl.now + limit_s
        while self.plane.jobs.describe(job_id)["state"] != "RUNNING":
            if self.tl.now > end:
                raise RuntimeError(f"job {job_id} did not start: {self.plane.jobs.describe(job_id)['reason']}")
            self.tl.run(self.tl.now + 5.0)
        self.jobs.append(job_id)
        return job_id

    def chips(self, job_id: str) -> list[int]:
        return list(self.plane.jobs.describe(job_id)["allocation"]["chips"])

    def recoveries(self) -> list[dict[str, Any]]:
        return self.parts.recovery.recoveries(CLUSTER)


def rehearse(seed: int, *, fleet: str = "trn2-ultraserver:2", n_spares: int = 4, repair_s: float | None = 600.0,
             fault_rates: FaultRates | None = None, telemetry_interval_s: float = 2.0,
             timings: Timings | None = None) -> RecoveryRehearsal:
    """The control plane with one active twin cluster (no faults until ``fault_rates``
    are set, once it is active)."""
    tl = Timeline(seed)
    made: list[SimFabric] = []

    def make(kind: str, topology: Topology, timeline: Timeline, spares: tuple[int, ...], seed: int,
             *, options: Mapping[str, Any] | None = None) -> Fabric:
        fab = SimFabric(get_topology(fleet), timeline, fault_rates=FaultRates.none(), spares=spares,
                        telemetry_interval_s=telemetry_interval_s, auto_repair_s=repair_s, progress_every_steps=1)
        made.append(fab)
        return fab

    parts = build(MemoryStore(), tl, fabric_factory=make, telemetry_interval_s=telemetry_interval_s,
                  recovery_timings=timings)
    parts.plane.load()
    view = parts.plane.create_cluster({"name": CLUSTER, "type": "trn2-ultraserver", "spares": n_spares},
                                      actor=ACTOR)
    while parts.plane.describe_cluster(view["id"])["state"] != "active":
        if tl.now > 3600.0:
            raise RuntimeError("cluster did not become active")
        tl.run(tl.now + 1.0)
    fab = made[-1]
    if fault_rates is not None:
        fab.set_fault_rates(fault_rates)
    return RecoveryRehearsal(tl, parts, fab, str(view["id"]))
