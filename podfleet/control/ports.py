"""What the plane's helper modules may ask of the plane, declared below the plane.

``ControlPlane`` (``control.plane``) builds the job manager, the deployment, the chip
commands and the balancer, and hands each of them itself typed as one of these ports.
They never import ``control.plane``: an import that ran back up to the plane made the
whole of ``control/`` one import circle (each helper took the whole plane). A helper
sees only the members listed here, and a test (``tests/test_architecture.py``) keeps it
so.

    PlaneCore   time, the store, clusters, the job table, and the write path
    PlanePort   PlaneCore + the job manager's ``JobOps`` (chip commands, deployment)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from podfleet.control.connect import ConnectingCluster
from podfleet.control.drivers.base import JobOps
from podfleet.control.jobtable import JobTable
from podfleet.control.lifecycle import ClusterState
from podfleet.control.runtime import ClusterRuntime
from podfleet.engine.timeline import Timeline
from podfleet.store.protocol import StoreProtocol
from podfleet.wire import JsonObject


class PriorityResolver(Protocol):
    """Named priority classes (``control.priorities.PriorityClasses``)."""

    def resolve(self, body: JsonObject) -> JsonObject:
        """The submit body with a class name in ``priority`` turned into its value."""


class PlaneCore(Protocol):
    """What the job manager and the balancer use of the plane."""

    @property
    def tl(self) -> Timeline: ...

    @property
    def store(self) -> StoreProtocol: ...

    @property
    def workdir(self) -> str | None: ...

    @property
    def clusters(self) -> dict[str, ClusterRuntime]:
        """Live clusters by id (read: only the plane installs and removes them)."""

    @property
    def table(self) -> JobTable: ...

    @property
    def priorities(self) -> PriorityResolver: ...

    @property
    def hang_restarts(self) -> int:
        """Relaunches of a job whose ranks keep hanging before it fails (PODFLEET_HANG_RESTARTS)."""

    @property
    def connecting(self) -> Mapping[str, ConnectingCluster]:
        """Clusters whose fabric is being built off the engine thread (``control.connect``)."""

    def now(self) -> float: ...

    def timeline_at(self, unix: float) -> float:
        """The timeline (scheduler clock) time of a wall-clock instant."""

    def resolve(self, ref: str) -> ClusterRuntime: ...

    def render(self, rt: ClusterRuntime) -> None: ...

    def save_health(self, rt: ClusterRuntime) -> None: ...

    def set_cluster_state(self, rt: ClusterRuntime, dst: ClusterState, reason: str = "") -> None: ...

    def audit(self, actor: str, action: str, target: str, result: str,
              detail: JsonObject | None = None) -> None: ...

    def mutation(
        self, op: str, actor: str, target: str, fn: Callable[[], tuple[JsonObject, str]],
        *, body: JsonObject | None = None, client_token: str | None = None,
        replay: Callable[[str], JsonObject] | None = None,
    ) -> JsonObject: ...


class PlanePort(PlaneCore, Protocol):
    """PlaneCore and the job manager: what chip commands and the deployment use."""

    @property
    def jobs(self) -> JobOps: ...
