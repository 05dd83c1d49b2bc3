"""Which fabric drives a cluster: ``sim`` (the twin), ``local`` (worker processes on this
host, ``podfleet.fabric.local``) or ``ray`` (Ray actors, ``podfleet.fabric.ray``)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from podfleet.errors import InfeasibleError
from podfleet.fabric.base import Fabric
from podfleet.hardware.topology import Topology

# (kind, topology, timeline, spares, seed, *, options) -> Fabric. ``options``: ``workdir``
# (the cluster's own directory, stable across restarts) and ``ray_address``.
FabricFactory = Callable[..., Fabric]
# Heartbeat silence that counts as a hang for control-plane local workers: more than the
# fabric's 1 s default, because the control plane shares its host's cores with them.
LOCAL_HANG_TIMEOUT_S = 3.0


def available_fabrics() -> list[str]:
    out = ["sim"]
    if importlib.util.find_spec("podfleet.fabric.local") is not None:
        out.append("local")
    if importlib.util.find_spec("podfleet.fabric.ray") is not None and importlib.util.find_spec("ray") is not None:
        out.append("ray")
    return out


def make_fabric(kind: str, topology: Topology, timeline: Any, spares: tuple[int, ...], seed: int,
                *, options: Mapping[str, Any] | None = None) -> Fabric:
    """A fresh fabric for one cluster, attached to the timeline. A non-twin fabric may
    bring its own topology (``fabric.topology``), which the cluster then uses."""
    opts = dict(options or {})
    if kind not in available_fabrics():
        raise InfeasibleError(
            f"fabric {kind!r} not available on this control plane; available: {', '.join(available_fabrics())}",
            field="fabric", allowed=available_fabrics(),
        )
    if kind == "sim":
        from podfleet.fabric.sim import SimFabric

        # Progress at most once per telemetry tick but after every step: an operator
        # watching a job whose steps take seconds should not wait for ten of them.
        return SimFabric(topology, timeline, spares=spares, progress_every_steps=1)
    if kind == "local":
        from podfleet.fabric.local import LocalFabric

        return LocalFabric(topology.n_chips, timeline, spares=spares, workdir=opts.get("workdir"),  # type: ignore[return-value]
                           hang_timeout_s=LOCAL_HANG_TIMEOUT_S)
    from podfleet.checkpoint import keys
    from podfleet.fabric.ray import make_ray_fabric

    fabric = make_ray_fabric(topology, timeline, spares, address=opts.get("ray_address"))
    workdir = opts.get("workdir")
    if workdir:
        fabric.workdir = str(workdir)
        if not os.environ.get("PODFLEET_CHECKPOINT_KEY"):
            # One KEK per cluster, kept across restarts (as LocalFabric does); with a
            # multi-machine Ray cluster the workdir must be shared storage.
            kek = Path(workdir) / "keys" / "checkpoint.kek"
            fabric.key_file = str(kek if kek.exists() else keys.new_key_file(kek))  # type: ignore[attr-defined]
    return fabric  # type: ignore[return-value]


def close_fabric(fabric: Fabric) -> None:
    """Release what a fabric holds (worker processes, a Ray instance); the twin holds nothing."""
    close = getattr(fabric, "close", None)
    if callable(close):
        close()
