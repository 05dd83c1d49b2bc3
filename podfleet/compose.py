"""The composition root: builds the control plane and wires its parts, once.

    parts = build(store, timeline, telemetry_interval_s=1.0)
    parts.plane      # commands and read models (podfleet.control)
    parts.health     # scans, alerts, telemetry ranges, firmware rollouts (podfleet.health)
    parts.recovery   # per-cluster recovery orchestrators (podfleet.recovery)

Each part gets what it uses through its constructor or a declared ``use_*`` method
(``ControlPlane.use_health`` takes a ``HealthPort``, ``JobManager.use_recovery`` a
``RecoveryPort``); nothing is attached by patching attributes. The scheduler and the
balancer are per cluster and built by the plane when a cluster is installed; the job
driver is chosen there from what the cluster's fabric declares.
"""

from __future__ import annotations

from dataclasses import dataclass

from podfleet.control.connect import DEFAULT_CONNECT_TIMEOUT_S
from podfleet.control.fabricaccess import FabricAccess
from podfleet.control.plane import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import DEFAULT_HANG_RESTARTS
from podfleet.fabric.factory import FabricFactory
from podfleet.health.scan import HealthConfig
from podfleet.health.service import HealthService
from podfleet.recovery.service import RecoveryService
from podfleet.store.protocol import StoreProtocol


@dataclass(frozen=True)
class Parts:
    plane: ControlPlane
    health: HealthService
    recovery: RecoveryService


def build(store: StoreProtocol, timeline: Timeline, *, fabric_factory: FabricFactory | None = None,
          telemetry_interval_s: float = 1.0, default_fabric: str = "sim", workdir: str | None = None,
          balance_interval_s: float | None = None, schedule_interval_s: float = 10.0,
          health_config: HealthConfig | None = None, fabric_access: FabricAccess | None = None,
          connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
          hang_restarts: int = DEFAULT_HANG_RESTARTS) -> Parts:
    """The whole control plane on ``timeline``: call ``plane.start()`` (served) or
    ``plane.load()`` (virtual time) next."""
    plane = ControlPlane(store, timeline, fabric_factory=fabric_factory, telemetry_interval_s=telemetry_interval_s,
                         default_fabric=default_fabric, workdir=workdir, balance_interval_s=balance_interval_s,
                         schedule_interval_s=schedule_interval_s, fabric_access=fabric_access,
                         connect_timeout_s=connect_timeout_s, hang_restarts=hang_restarts)
    recovery = RecoveryService(plane.table, timeline, plane.render)
    plane.jobs.use_recovery(recovery)
    health = HealthService(plane, recovery, health_config)
    plane.use_health(health)
    health.start()
    return Parts(plane, health, recovery)
