"""A served control plane with the console (``build_server``: the composition ``podfleet
up`` uses, console mounted), uvicorn in a thread, and a token per role."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import uvicorn

from podfleet.api import connections
from podfleet.api.server import Server, build_server, ensure_default_cluster
from podfleet.api.testing import free_port, role_tokens
from podfleet.console.routes import DIST
from podfleet.settings import Settings
from podfleet.store.memory import MemoryStore

ADMIN_TOKEN = "pf_console-admin-token-0123456789abcdef"


@dataclass
class Served:
    url: str
    server: Server
    tokens: dict[str, str]  # role -> token

    def client(self, role: str = "admin") -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.tokens[role]}"}, timeout=30)


def serve(speed: float = 1.0, default_cluster: str | None = "pod-0") -> Iterator[Served]:
    settings = Settings(speed=speed, admin_token=ADMIN_TOKEN, rate_limit_per_s=10_000, rate_limit_burst=10_000)
    server = build_server(settings, MemoryStore())
    tokens = role_tokens(server.store, ADMIN_TOKEN)
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(server.app, host="127.0.0.1", port=port, lifespan="off",
                                       **connections.options(header_timeout_s=settings.header_timeout_s)))
    server.plane.start()
    ensure_default_cluster(server.plane, default_cluster)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield Served(f"http://127.0.0.1:{port}", server, tokens)
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
        server.plane.stop()


def wait_active(c: httpx.Client, name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if c.get(f"/v1/clusters/{name}").json()["state"] == "active":
            return
        time.sleep(0.1)
    raise AssertionError(f"cluster {name} not active within {timeout_s} s")


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    yield from serve()


def console_built() -> bool:
    return (DIST / "index.html").is_file()
