"""Build a ``RayFabric`` for a cluster from settings (what the control plane calls).

``PODFLEET_RAY_ADDRESS`` (or ``address=``) names the cluster: ``HOST:6379`` for the head
node's GCS, ``ray://HOST:10001`` for Ray Client, ``auto`` for a cluster already running on
this machine; unset starts a private local instance. ``PODFLEET_RAY_RESOURCE`` is
``CPU`` (default), ``GPU`` or ``neuron_cores``; ``PODFLEET_RAY_PER_CHIP`` how many units
of it one chip is (e.g. 4 neuron_cores = one Trn2 device at LNC=2).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from podfleet.errors import InvalidInputError
from podfleet.fabric.ray.fabric import RayFabric
from podfleet.hardware.topology import Topology


def make_ray_fabric(
    topology: Topology,
    timeline: Any,
    spares: Iterable[int] = (),
    *,
    address: str | None = None,
    resource: str | None = None,
    per_chip: float | None = None,
) -> RayFabric:
    address = address or os.environ.get("PODFLEET_RAY_ADDRESS") or None
    resource = resource or os.environ.get("PODFLEET_RAY_RESOURCE") or "CPU"
    if per_chip is None:
        raw = os.environ.get("PODFLEET_RAY_PER_CHIP", "1")
        try:
            per_chip = float(raw)
        except ValueError:
            raise InvalidInputError(
                f"PODFLEET_RAY_PER_CHIP must be a number, got {raw!r}", field="ray_per_chip"
            ) from None
    return RayFabric(address, timeline, topology.n_chips, resource=resource, spares=spares, topology=topology,
                     per_chip=per_chip)
