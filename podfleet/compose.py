"""The composition root: the one place that builds the control plane's parts and wires
them, once.

    parts = build(store, timeline, telemetry_interval_s=1.0)
    parts.plane      # commands and read models (podfleet.control)
    parts.health     # telemetry, scans, alerts, failure prediction (podfleet.health)
    parts.recovery   # per-cluster recovery orchestrators, ListRecoveries (podfleet.recovery)
    parts.firmware   # rolling firmware updates (podfleet.recovery.rollouts)
    parts.maintenance  # rolling maintenance commands on real hosts (podfleet.recovery.maintenanceservice)

Each part gets only the ports it uses, through its constructor or a declared ``use_*``
method, and nothing is attached by patching attributes:

    plane      <- the fabric factory (``fabric.factory.make_fabric`` unless given): the
                  plane imports no fabric implementation and builds none itself
    plane      <- the planner adapter (``planner.adapter.PlannerAdapter``) as each cluster
                  scheduler's ``ShapePlanner`` port (``parallelism: auto``)
    jobs       <- the recovery service as its ``RecoveryPort``
    plane      <- the health service as its ``HealthPort`` (chip/link health in snapshots)
    health     <- the recovery service as its ``DrainPort`` (predicted failures)
    firmware   <- the plane (``PlaneCore``), the recovery service it drives and, for fabrics
                  that update through a host command, the maintenance service
    maintenance <- the plane (``MaintenancePlane``: its audited chip commands)
    timeline   <- the health scan and the recovery's housekeeping, every health interval

The scheduler and the balancer are per cluster and built by the plane when a cluster is
installed; the job driver is chosen there from what the cluster's fabric declares.
"""

from __future__ import annotations

from dataclasses import dataclass

from podfleet.control.connect import DEFAULT_CONNECT_TIMEOUT_S
from podfleet.control.fabricaccess import FabricAccess
from podfleet.control.plane import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import DEFAULT_HANG_RESTARTS, FabricFactory
from podfleet.fabric.factory import make_fabric, reaches_out
from podfleet.health.scan import HealthConfig
from podfleet.health.service import HealthService
from podfleet.planner.adapter import PlannerAdapter
from podfleet.recovery.maintenanceservice import MaintenanceService
from podfleet.recovery.model import Timings
from podfleet.recovery.rollouts import FirmwareService
from podfleet.recovery.service import RecoveryService
from podfleet.store.protocol import StoreProtocol


@dataclass(frozen=True)
class Parts:
    plane: ControlPlane
    health: HealthService
    recovery: RecoveryService
    firmware: FirmwareService
    maintenance: MaintenanceService


def build(store: StoreProtocol, timeline: Timeline, *, fabric_factory: FabricFactory | None = None,
          telemetry_interval_s: float = 1.0, default_fabric: str = "sim", workdir: str | None = None,
          balance_interval_s: float | None = None, schedule_interval_s: float = 10.0,
          health_config: HealthConfig | None = None, fabric_access: FabricAccess | None = None,
          connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
          hang_restarts: int = DEFAULT_HANG_RESTARTS, firmware_command: str | None = None,
          recovery_timings: Timings | None = None) -> Parts:
    """The whole control plane on ``timeline``: call ``plane.start()`` (served) or
    ``plane.load()`` (virtual time) next. ``firmware_command``: what a firmware update runs
    on each host of a cluster without online firmware updates but with host commands
    (``PODFLEET_FIRMWARE_COMMAND``)."""
    plane = ControlPlane(store, timeline, fabric_factory=fabric_factory or make_fabric, planner=PlannerAdapter(),
                         telemetry_interval_s=telemetry_interval_s, default_fabric=default_fabric, workdir=workdir,
                         balance_interval_s=balance_interval_s, schedule_interval_s=schedule_interval_s,
                         fabric_access=fabric_access, connect_timeout_s=connect_timeout_s,
                         hang_restarts=hang_restarts, reaches_out=reaches_out)
    recovery = RecoveryService(plane.table, timeline, plane.render, resolve=plane.resolve, timings=recovery_timings)
    plane.jobs.use_recovery(recovery)
    health = HealthService(plane, health_config, drain=recovery)
    plane.use_health(health)
    maintenance = MaintenanceService(plane)
    firmware = FirmwareService(plane, recovery, maintenance, command=firmware_command)
    health.start()
    # After the health scan at each interval (as it ran inside the scan before): journals a
    # previous control plane left open are closed, deleted clusters' orchestrators dropped.
    timeline.every(health.cfg.interval_s, lambda: recovery.housekeep(plane.clusters))
    return Parts(plane, health, recovery, firmware, maintenance)
