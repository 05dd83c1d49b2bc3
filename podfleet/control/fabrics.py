"""Which fabric drives a cluster: ``sim`` (the twin), ``local`` (worker processes on this
host, ``podfleet.fabric.local``) or ``ray`` (Ray actors, ``podfleet.fabric.ray``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from podfleet.errors import InfeasibleError
from podfleet.fabric.base import Fabric
from podfleet.hardware.topology import Topology

FabricFactory = Callable[[str, Topology, Any, tuple[int, ...], int], Fabric]


def available_fabrics() -> list[str]:
    out = ["sim"]
    if importlib.util.find_spec("podfleet.fabric.local") is not None:
        out.append("local")
    if importlib.util.find_spec("podfleet.fabric.ray") is not None and importlib.util.find_spec("ray") is not None:
        out.append("ray")
    return out


def make_fabric(kind: str, topology: Topology, timeline: Any, spares: tuple[int, ...], seed: int) -> Fabric:
    """A fresh fabric for one cluster, attached to the timeline. A non-twin fabric may
    bring its own topology (``fabric.topology``), which the cluster then uses."""
    if kind not in available_fabrics():
        raise InfeasibleError(
            f"fabric {kind!r} not available on this control plane; available: {', '.join(available_fabrics())}",
            field="fabric", allowed=available_fabrics(),
        )
    if kind == "sim":
        from podfleet.fabric.sim import SimFabric

        return SimFabric(topology, timeline, spares=spares)
    if kind == "local":
        from podfleet.fabric.local import LocalFabric

        return LocalFabric(topology.n_chips, timeline, spares=spares)  # type: ignore[return-value]
    from podfleet.fabric.ray import make_ray_fabric

    return make_ray_fabric(topology, timeline, spares)  # type: ignore[return-value]


def close_fabric(fabric: Fabric) -> None:
    """Release what a fabric holds (worker processes, a Ray instance); the twin holds nothing."""
    close = getattr(fabric, "close", None)
    if callable(close):
        close()
