"""Build a ``RayFabric`` for a cluster from settings (what the control plane calls).

``PODFLEET_RAY_ADDRESS`` (or ``address=``) names the cluster: ``HOST:6379`` for the head
node's GCS, ``ray://HOST:10001`` for Ray Client, ``auto`` for a cluster already running on
this machine; unset starts (or finds) the data directory's private head (``private.py``).
``PODFLEET_RAY_RESOURCE`` is ``CPU`` (default), ``GPU`` or ``neuron_cores``;
``PODFLEET_RAY_PER_CHIP`` how many units of it one chip is (e.g. 4 neuron_cores = one
Trn2 device at LNC=2).

``workdir`` is the cluster's own directory (stable across restarts; shared storage on a
multi-machine Ray cluster). Unless ``key_file`` is given or ``PODFLEET_CHECKPOINT_KEY``
is set, the checkpoint KEK is kept there (one per cluster, as ``LocalFabric`` does), so
old checkpoints stay readable; the fabric hands it to every worker itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from podfleet.checkpoint import keys
from podfleet.errors import InvalidInputError
from podfleet.fabric.ray import supervisor
from podfleet.fabric.ray.fabric import RayFabric
from podfleet.fabric.ray.private import make_private_fabric
from podfleet.hardware.topology import Topology
from podfleet.training.config import KEY_ENV_DEFAULT


def per_chip_setting(default: float) -> float:
    """``PODFLEET_RAY_PER_CHIP``: units of the Ray resource one chip is (``default`` unset)."""
    raw = os.environ.get("PODFLEET_RAY_PER_CHIP", "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInputError(f"PODFLEET_RAY_PER_CHIP must be a number, got {raw!r}", field="ray_per_chip") from None
    if not value > 0:
        raise InvalidInputError(f"PODFLEET_RAY_PER_CHIP must be positive, got {raw!r}", field="ray_per_chip")
    return value


def make_ray_fabric(
    topology: Topology,
    timeline: Any,
    spares: Iterable[int] = (),
    *,
    address: str | None = None,
    resource: str | None = None,
    per_chip: float | None = None,
    workdir: str | Path | None = None,
    key_file: str | None = None,
) -> RayFabric:
    address = address or os.environ.get("PODFLEET_RAY_ADDRESS") or None
    resource = resource or os.environ.get("PODFLEET_RAY_RESOURCE") or "CPU"
    if per_chip is None:
        per_chip = per_chip_setting(1.0)
    if workdir is not None and key_file is None and not os.environ.get(KEY_ENV_DEFAULT):
        key_file = str(keys.ensure_kek_file(workdir))  # outside the checkpoint tree
    # The cluster's directory is named by its id: its gangs' detached actors live in the
    # namespace ``podfleet-<cluster id>``, on a Ray cluster that outlives this server: the
    # one named by the address, or without one the data directory's private head
    # (``private.py``). Without a directory (a library caller), a private Ray is started
    # in this process and ends with it.
    namespace = supervisor.namespace_for(Path(workdir).name if workdir is not None else "default")
    if address is None and workdir is not None:
        return make_private_fabric(workdir, timeline, topology, resource=resource, spares=spares, per_chip=per_chip,
                                   key_file=key_file, namespace=namespace)
    return RayFabric(address, timeline, topology.n_chips, resource=resource, spares=spares, topology=topology,
                     per_chip=per_chip, workdir=str(workdir) if workdir is not None else None, key_file=key_file,
                     namespace=namespace, outlive_plane=address is not None)
