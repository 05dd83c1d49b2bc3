"""What a gang's start (``starter``) and a rank move (``rankmove``) both use of the fabric
and of the runner; each extends these with its own needs. Declared as protocols so neither
module imports the runner or the fabric that import it."""

from __future__ import annotations

from typing import Any, Protocol

from podfleet.fabric.ray.gang import GangConfig
from podfleet.fabric.ray.jobs import RayState
from podfleet.fabric.ray.nodes import NodeMap


class GangFabric(Protocol):
    """What placing and greeting a gang's actors uses of the fabric (``RayFabric``,
    through ``runner.RunnerHost``)."""

    @property
    def gang(self) -> GangConfig: ...

    @property
    def nodes(self) -> NodeMap: ...

    @property
    def unreachable(self) -> str | None: ...

    @property
    def namespace(self) -> str: ...

    @property
    def placement_timeout_s(self) -> float: ...

    def emit(self, kind: str, *, job_id: str | None = None, chip: int | None = None, **detail: Any) -> None: ...


class GangRunner(Protocol):
    """What placing a gang's actors uses of the runner (``runner.JobRunner``)."""

    @property
    def state(self) -> RayState: ...

    def actor_class(self) -> Any: ...
