"""The follower side of the API without a database: the gate's answers, the SDK's retry."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from podfleet.api.leadership import FORWARDED, LeaderGate
from podfleet.errors import NotLeaderError
from podfleet.sdk.client import PodfleetClient
from podfleet.store.election import Role


@dataclass
class Following:
    holder: str = "me:1"
    term: int | None = None
    leader: str | None = None

    suspended: bool = False  # its own term lapsed in a store outage

    @property
    def role(self) -> Role:
        return Role.FOLLOWER

    @property
    def serves_reads(self) -> bool:
        return self.suspended

    def leader_url(self) -> str | None:
        return self.leader


async def here(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("answered here")(scope, receive, send)


def _get(gate: LeaderGate, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://t") as c:
            return await c.get(path, headers=headers)
    return asyncio.run(go())


def test_a_follower_without_a_leader_answers_503_with_retry_after() -> None:
    r = _get(LeaderGate(here, Following()), "/v1/jobs")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["code"] == "not-leader" and "takeover" in r.json()["detail"]


def test_a_forwarded_request_is_never_forwarded_again() -> None:
    r = _get(LeaderGate(here, Following(leader="http://127.0.0.1:1")), "/v1/jobs", {FORWARDED: "other"})
    assert r.status_code == 503 and r.json()["leader"] == "http://127.0.0.1:1"
    assert "already forwarded" in r.json()["detail"]


def test_an_unreachable_leader_is_503_and_the_servers_own_pages_stay_local() -> None:
    gate = LeaderGate(here, Following(leader="http://127.0.0.1:1"))  # nothing listens on port 1
    r = _get(gate, "/v1/clusters")
    assert r.status_code == 503 and "does not answer" in r.json()["detail"]
    assert _get(gate, "/healthz").text == "answered here"


def test_a_leader_suspended_by_a_store_outage_answers_reads_itself_and_refuses_writes() -> None:
    gate = LeaderGate(here, Following(suspended=True))

    async def go() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://t") as c:
            return await c.get("/v1/jobs"), await c.post("/v1/clusters/pod/jobs", json={})

    read, write = asyncio.run(go())
    assert read.text == "answered here"
    assert write.status_code == 503 and write.headers["retry-after"] == "1"
    assert "out of reach" in write.json()["detail"]


def test_the_sdk_retries_a_503_with_retry_after_and_gives_up_after_its_budget() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) < 3:
            return httpx.Response(503, headers={"retry-after": "0.1"},
                                  json={"code": "not-leader", "detail": "between leaders"})
        return httpx.Response(200, json={"clusters": []})

    sdk = PodfleetClient("http://x", "t", transport=httpx.MockTransport(handler))
    assert sdk.list_clusters() == {"clusters": []}
    assert len(calls) == 3

    def always(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"retry-after": "1"}, json={"code": "not-leader", "detail": "no leader"})

    impatient = PodfleetClient("http://x", "t", transport=httpx.MockTransport(always), retry_unavailable_s=0.5)
    with pytest.raises(NotLeaderError, match="no leader"):
        impatient.list_clusters()


def test_a_sole_server_says_it_leads_and_is_ready() -> None:
    from podfleet.api.main import create_app
    from podfleet.control.plane import ControlPlane
    from podfleet.engine.timeline import Timeline
    from podfleet.fabric.factory import make_fabric
    from podfleet.store.memory import MemoryStore

    app = create_app(ControlPlane(MemoryStore(), Timeline(speed=50.0), fabric_factory=make_fabric))

    async def go() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get("/healthz"), await c.get("/readyz"), await c.get("/metrics")

    health, ready, metrics = asyncio.run(go())
    assert health.json()["role"] == "leader" and ready.status_code == 200 and ready.json()["store"] == "ok"
    assert any(line.startswith("podfleet_leader{server=") and line.endswith(" 1.0")
               for line in metrics.text.splitlines())


def test_a_leader_still_reloading_answers_v1_with_503_starting_and_serves_once_reloaded() -> None:
    import threading

    from podfleet.api.leadership import Sole

    sole = Sole("me:1", ready=threading.Event())
    gate = LeaderGate(here, sole)
    r = _get(gate, "/v1/jobs")
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json()["code"] == "starting"
    assert _get(gate, "/healthz").text == "answered here"  # liveness answers from the first moment
    sole.ready.set()
    assert _get(gate, "/v1/jobs").text == "answered here"
