"""A Ray head (2 CPUs) and a second raylet (1 CPU) on this machine, and a control plane
built on it through compose, shared by the Ray tests that need two nodes
(test_ray_recovery.py, test_ray_rank_move.py).

Token authentication is off for this private, loopback-only cluster: the test process
imported Ray (and read its auth mode) at collection, before any fixture could give it a
token (docs/ray.md has the token set-up)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def two_raylets(tmp: Path) -> Iterator[dict[str, Any]]:
    from podfleet.fabric.ray.local_cluster import LocalRayCluster

    saved = os.environ.pop("PODFLEET_RAY_ADDRESS", None)
    cluster = LocalRayCluster(head_cpus=2, node_cpus=(1,), env={"RAY_AUTH_MODE": "disabled"}, log_dir=tmp)
    try:
        cluster.start()
        [raylet] = cluster.wait_nodes()
        yield {"address": cluster.address, "raylet": raylet, "tmp": tmp}
    finally:
        cluster.stop()
        if saved is not None:
            os.environ["PODFLEET_RAY_ADDRESS"] = saved


@contextmanager
def built_on(ray_cluster: dict[str, Any]) -> Iterator[Any]:
    """``compose.build`` on a paced timeline, allowed the cluster's address, started."""
    from podfleet import compose
    from podfleet.control.fabricaccess import FabricAccess
    from podfleet.engine.timeline import Timeline
    from podfleet.store.memory import MemoryStore

    built = compose.build(MemoryStore(), Timeline(seed=3, speed=1.0), workdir=str(ray_cluster["tmp"] / "work"),
                          fabric_access=FabricAccess(ray_addresses=(ray_cluster["address"],)))
    built.plane.start()
    built.plane.call_timeout_s = 120
    try:
        yield built
    finally:
        built.plane.stop()
