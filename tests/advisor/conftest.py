"""A twin pod under the whole control plane, in virtual time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from podfleet.compose import Parts, build
from podfleet.control.plane import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.store.memory import MemoryStore


@dataclass
class Pod:
    tl: Timeline
    parts: Parts

    @property
    def plane(self) -> ControlPlane:
        return self.parts.plane

    def run(self, seconds: float) -> None:
        self.tl.run(self.tl.now + seconds)

    def alerts(self) -> list[dict[str, Any]]:
        return self.parts.health.list_alerts("pod")

    def submit(self, chips: int, model: str = "llama3-8b") -> list[int]:
        view = self.plane.jobs.submit("pod", {"name": f"j{chips}", "model": model, "chips": chips,
                                              "steps": 10**6, "checkpoint_interval": 20})
        self.run(60)
        return list(self.plane.jobs.describe(view["id"])["allocation"]["chips"])


def make_pod(seed: int = 1, spares: int = 2) -> Pod:
    tl = Timeline(seed)
    parts = build(MemoryStore(), tl)
    parts.plane.load()
    parts.plane.create_cluster({"name": "pod", "type": "trn2-ultraserver", "spares": spares})
    pod = Pod(tl, parts)
    pod.run(60)
    return pod


@pytest.fixture
def pod() -> Pod:
    return make_pod()
