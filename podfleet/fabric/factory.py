"""The fabric factory: the one place that maps a fabric's name to its class: ``sim``
(the twin), ``local`` (worker processes on this host, ``podfleet.fabric.local``), ``ray``
(Ray actors, ``podfleet.fabric.ray``) or ``neuron`` (a real Trainium host: neuron-ls and
neuron-monitor, ``podfleet.fabric.neuron``). Implementations are imported lazily. The
composition root (``podfleet.compose``) hands ``make_fabric`` to the control plane as its
``FabricFactory`` (``fabric.base``): the plane never imports this module."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from podfleet.engine.timeline import Timeline
from podfleet.errors import InfeasibleError, PodfleetError
from podfleet.fabric.base import DEFAULT_HANG_RESTARTS, Fabric, FabricFactory
from podfleet.fabric.commands import DEFAULT_NEURON_LS, DEFAULT_NEURON_MONITOR
from podfleet.hardware.topology import Topology

# Heartbeat silence that counts as a hang for control-plane local workers: more than the
# fabric's 1 s default, because the control plane shares its host's cores with them.
LOCAL_HANG_TIMEOUT_S = 3.0
# Warm standby workers (torch imported, waiting for a rank) a local cluster keeps, so a
# rank move's replacement starts in well under a second: PODFLEET_LOCAL_WARM_WORKERS
# (default 0: each idle standby holds a few hundred MB).
LOCAL_WARM_ENV = "PODFLEET_LOCAL_WARM_WORKERS"


def local_warm_workers() -> int:
    raw = os.environ.get(LOCAL_WARM_ENV, "0").strip() or "0"
    if not raw.isdigit():
        raise InfeasibleError(f"{LOCAL_WARM_ENV}={raw!r} is not a whole number of standby workers",
                              field=LOCAL_WARM_ENV)
    return int(raw)


# Fabrics whose construction reaches outside this process (a Ray cluster's GCS, the host's
# neuron-ls): the control plane builds them off its engine thread, with a timeout.
REACHES_OUT = frozenset({"ray", "neuron"})


def library_error(exc: BaseException) -> PodfleetError | None:
    """A fabric library's own exception that reached a surface, in podfleet's words (None:
    not one this knows; a bug). Ray's token refusal outside the connect, where the fabric
    maps it itself, would otherwise be an ``internal error (AuthenticationError)``."""
    from podfleet.fabric.ray.auth import auth_lost, is_auth_error  # no Ray import

    return auth_lost(exc) if is_auth_error(exc) else None


def reaches_out(kind: str) -> bool:
    """True when building fabric ``kind`` may wait on the network or an external command."""
    return kind in REACHES_OUT


def available_fabrics() -> list[str]:
    out = ["sim"]
    if importlib.util.find_spec("podfleet.fabric.local") is not None:
        out.append("local")
    if importlib.util.find_spec("podfleet.fabric.ray") is not None and importlib.util.find_spec("ray") is not None:
        out.append("ray")
    if "local" in out:  # a neuron host runs its workers as local processes
        out.append("neuron")
    return out


def check_worker_settings(kind: str, *, ray_address: str | None = None) -> None:
    """Refuse, with the fix in the message (InvalidInputError), a fabric whose workers the
    settings would run as root or could not run at all (``security.sandbox.from_env``):
    ``podfleet up`` asks before it serves, ``cluster create`` when it builds the fabric.
    A Ray cluster of its own (an address) decides on its nodes; a private one inherits
    this server's settings, so they are checked here."""
    if kind == "sim" or (kind == "ray" and (ray_address or os.environ.get("PODFLEET_RAY_ADDRESS"))):
        return
    from podfleet.security.sandbox import from_env

    from_env()


def with_agent(data_dir: Path) -> FabricFactory:
    """``make_fabric`` whose local clusters' workers are owned by the agent of ``data_dir``
    (started on first use, ``fabric.local.agent.launch``): they outlive this server and the
    next one re-attaches to them."""
    from podfleet.fabric.local.agent.protocol import agent_dir as where

    agent_dir = where(data_dir)

    def make(kind: str, topology: Topology, timeline: Timeline, spares: tuple[int, ...], seed: int,
             *, options: Mapping[str, Any] | None = None) -> Fabric:
        return make_fabric(kind, topology, timeline, spares, seed, options=options, agent_dir=agent_dir)

    return make


def make_fabric(kind: str, topology: Topology, timeline: Timeline, spares: tuple[int, ...], seed: int,
                *, options: Mapping[str, Any] | None = None, agent_dir: Path | None = None) -> Fabric:
    """A fresh fabric for one cluster, attached to the timeline. A non-twin fabric may
    bring its own topology (``fabric.topology``), which the cluster then uses."""
    opts = dict(options or {})
    hang_restarts = int(opts.get("hang_restarts", DEFAULT_HANG_RESTARTS))
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

        agent = None
        if agent_dir is not None:
            from podfleet.fabric.local.agent.launch import ensure_agent

            agent = ensure_agent(agent_dir)
        return LocalFabric(topology.n_chips, timeline, spares=spares, workdir=opts.get("workdir"),
                           hang_timeout_s=LOCAL_HANG_TIMEOUT_S, max_hang_restarts=hang_restarts,
                           warm_workers=local_warm_workers(), refill_delay_s=1.0, agent=agent)
    if kind == "neuron" and opts.get("ray_address"):
        from podfleet.fabric.neuron.hosts import CORES_PER_DEVICE, NeuronHostsFabric
        from podfleet.fabric.ray import supervisor
        from podfleet.fabric.ray.factory import per_chip_setting

        # Trainium hosts as the Ray cluster's nodes with neuron_cores: the tools run on each.
        workdir = opts.get("workdir") or None
        return NeuronHostsFabric(str(opts["ray_address"]), timeline,
                                 neuron_ls=opts.get("neuron_ls") or DEFAULT_NEURON_LS,
                                 neuron_monitor=opts.get("neuron_monitor") or DEFAULT_NEURON_MONITOR,
                                 spares=spares, workdir=str(workdir) if workdir else None,
                                 per_chip=per_chip_setting(CORES_PER_DEVICE),
                                 namespace=supervisor.namespace_for(Path(workdir).name) if workdir else None)
    if kind == "neuron":
        from podfleet.fabric.neuron.fabric import NeuronFabric

        # The topology is neuron-ls's (the cluster takes ``fabric.topology``), not ``topology``.
        return NeuronFabric(timeline, neuron_ls=opts.get("neuron_ls") or DEFAULT_NEURON_LS,
                            neuron_monitor=opts.get("neuron_monitor") or DEFAULT_NEURON_MONITOR,
                            spares=spares, workdir=opts.get("workdir"), hang_timeout_s=LOCAL_HANG_TIMEOUT_S,
                            max_hang_restarts=hang_restarts)
    from podfleet.fabric.ray import make_ray_fabric

    check_worker_settings(kind, ray_address=opts.get("ray_address"))

    # The cluster's workdir also keeps its checkpoint KEK (make_ray_fabric), which the
    # fabric hands to its workers itself.
    return make_ray_fabric(topology, timeline, spares, address=opts.get("ray_address"),
                           workdir=opts.get("workdir") or None)
