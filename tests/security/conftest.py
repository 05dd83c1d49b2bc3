"""A live API (uvicorn in a thread) over a plane whose real clusters work in a temporary
directory, with the app at hand (denial summaries, guard settings) and a token per role."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from podfleet.api.auth import flush_denials
from podfleet.api.guard import GuardConfig
from podfleet.api.main import create_app
from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import role_tokens, serve_in_thread
from podfleet.compose import build
from podfleet.control.plane import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.security.tokens import generate_token, hash_token, new_token_id
from podfleet.store.memory import MemoryStore
from podfleet.store.records import TokenRecord

ADMIN_TOKEN = "pf_security-admin-token-0123456789abcdef"


@dataclass
class Api:
    url: str
    plane: ControlPlane
    store: MemoryStore
    app: Any
    workdir: Path
    tokens: dict[str, str]  # role -> token

    def client(self, role: str | None = "admin", **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kw)

    def add_token(self, role: str, name: str) -> tuple[str, str]:
        tok, tid = generate_token(), new_token_id()
        self.store.add_token(TokenRecord(tid, name, role, hash_token(tok), 0.0))
        return tid, tok

    def flush_denials(self) -> None:
        asyncio.run(flush_denials(self.app))

    def denied(self, since: int = 0) -> list[Any]:
        return [r for r in list(self.store.iter_audit())[since:] if r.result == "denied"]


def serve(workdir: Path, guard: GuardConfig | None = None, **serving: Any) -> Iterator[Api]:
    """``serving``: ``serve_in_thread``'s header_timeout_s and http (uvicorn's implementation)."""
    store = MemoryStore()
    parts = build(store, Timeline(seed=5, speed=50.0), telemetry_interval_s=1.0, workdir=str(workdir))
    plane = parts.plane
    bootstrap_admin(plane, ADMIN_TOKEN)
    tokens = role_tokens(store, ADMIN_TOKEN)
    app = create_app(plane, parts.health, guard, recovery=parts.recovery, firmware=parts.firmware,
                     maintenance=parts.maintenance)
    with serve_in_thread(plane, app=app, health=parts.health, **serving) as url:
        yield Api(url, plane, store, app, workdir, tokens)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    yield from serve(tmp_path_factory.mktemp("work"))
