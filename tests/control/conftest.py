"""A control plane on a virtual-time timeline with the in-memory store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.fabric.factory import make_fabric
from podfleet.planner.adapter import PlannerAdapter
from podfleet.store import open_store
from podfleet.store.memory import MemoryStore
from podfleet.store.protocol import StoreProtocol


def make_plane(store: StoreProtocol | None = None, seed: int = 0) -> ControlPlane:
    return ControlPlane(store or MemoryStore(), Timeline(seed=seed), fabric_factory=make_fabric, planner=PlannerAdapter())


@pytest.fixture
def plane() -> ControlPlane:
    return make_plane()


def active_cluster(plane: ControlPlane, name: str = "pod", **spec: object) -> dict:
    view = plane.create_cluster({"name": name, "type": "trn2-ultraserver", **spec}, actor="test")
    plane.tl.run(plane.tl.now + 30)
    out = plane.describe_cluster(view["id"])
    assert out["state"] == "active", out
    return out


def advance(plane: ControlPlane, seconds: float) -> None:
    plane.tl.run(plane.tl.now + seconds)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreProtocol]:
    """The store a restart test's planes share: in memory, and SQLite (records through JSON)."""
    if request.param == "memory":
        yield MemoryStore()
        return
    s = open_store(f"sqlite:///{tmp_path / 'pf.db'}")
    yield s
    s.close()
