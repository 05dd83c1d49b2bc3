"""A live API server in this process (uvicorn in a thread, paced timeline, in-memory
store) and a token per role."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import role_tokens, serve_in_thread
from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.fabric.factory import make_fabric
from podfleet.planner.adapter import PlannerAdapter
from podfleet.store.memory import MemoryStore

ADMIN_TOKEN = "pf_test-admin-token-0123456789abcdef"


@dataclass
class Live:
    url: str
    plane: ControlPlane
    store: MemoryStore
    tokens: dict[str, str]  # role -> token

    def client(self, role: str | None = "admin") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def start_live(speed: float = 50.0) -> Iterator[Live]:
    store = MemoryStore()
    plane = ControlPlane(store, Timeline(seed=3, speed=speed), fabric_factory=make_fabric, planner=PlannerAdapter(), telemetry_interval_s=1.0)
    bootstrap_admin(plane, ADMIN_TOKEN)
    tokens = role_tokens(store, ADMIN_TOKEN)
    with serve_in_thread(plane) as url:
        yield Live(url, plane, store, tokens)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    yield from start_live()


@pytest.fixture(scope="module")
def admin(live: Live) -> Iterator[httpx.Client]:
    with live.client("admin") as c:
        yield c


def wait_active(c: httpx.Client, name: str) -> dict:
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        view = c.get(f"/v1/clusters/{name}").json()
        if view["state"] != "deploying":
            return view
        time.sleep(0.05)
    raise AssertionError(f"cluster {name} still deploying")
