"""Which server answers: the leader runs the engine; a follower forwards the API to it.

``LeaderGate`` (pure ASGI, outermost after the metrics) lets every request through on the
leader. On a follower a ``/v1`` request is forwarded to the leader's URL, as it came
(method, path, query, headers with the caller's token, body; the answer streamed back,
so live streams work too), because only the leader's engine holds the read models and
may write. A request that cannot be forwarded (no leader known during a takeover, the
leader unreachable, or a request already forwarded once: two servers that each think the
other leads must not bounce it for ever) is answered ``503`` with ``Retry-After`` and the
leader's URL in ``leader`` when one is known, which the SDK and CLI retry.

A leader whose lease lapsed only because the store is out of reach (``Elector.serves_reads``)
answers reads (GET, HEAD) itself, from its memory, which no other server can have moved on
from while nobody reaches the store; its writes are refused with ``503`` and ``Retry-After``.

The console's pages, ``/healthz``, ``/readyz`` and ``/metrics`` are always this server's own.

``Sole`` is the leadership of a server that shares its store with nobody (SQLite): it
always leads, with no term.

A server listens before its engine has reloaded the store (``api.server.run``): until then
(``Leadership.reloaded`` false) a leader answers ``/v1`` with ``503`` and ``Retry-After``
(code ``starting``), never from a plane that is still being rebuilt.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from podfleet.store.election import Role

FORWARDED = "x-podfleet-forwarded"
# Hop-by-hop headers (RFC 9110 7.6.1) and the ones httpx sets again itself.
_DROP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
         "host", "content-length"}
RETRY_AFTER_S = 1
FORWARD_TIMEOUT_S = 30.0


class Leadership(Protocol):
    """What the API reads of the election (``store.election.Elector``, or ``Sole``)."""

    @property
    def holder(self) -> str: ...

    @property
    def term(self) -> int | None: ...

    @property
    def role(self) -> Role: ...

    @property
    def serves_reads(self) -> bool:
        """Whether reads may be answered from this server's memory while it does not lead."""
        ...

    @property
    def reloaded(self) -> bool:
        """Whether this server's engine has reloaded the store: a leader answers ``/v1`` only then."""
        ...

    def leader_url(self) -> str | None: ...


def _reloaded() -> threading.Event:
    ready = threading.Event()
    ready.set()
    return ready


@dataclass
class Sole:
    holder: str
    term: int | None = None
    # Set once the engine has reloaded the store (``podfleet up`` listens before that); a
    # plane built and started by its caller (tests, embedding) is reloaded from the start.
    ready: threading.Event = field(default_factory=_reloaded)

    @property
    def reloaded(self) -> bool:
        return self.ready.is_set()

    @property
    def role(self) -> Role:
        return Role.LEADER

    @property
    def serves_reads(self) -> bool:
        return True

    def leader_url(self) -> str | None:
        return None


def problem_body(status: int, code: str, detail: str, leader: str | None) -> bytes:
    title = "Service Unavailable" if status == 503 else "Bad Gateway"
    body: dict[str, object] = {"type": f"urn:podfleet:problem:{code}", "title": title, "status": status,
                               "detail": detail, "code": code}
    if leader:
        body["leader"] = leader
    return json.dumps(body).encode()


def not_leader_body(leader: str | None, why: str) -> bytes:
    return problem_body(503, "not-leader", f"this server follows and {why}; nothing was changed, retry in "
                        f"{RETRY_AFTER_S} s" + (f" or ask the leader at {leader}" if leader else ""), leader)


async def _answer(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    start: Message = {"type": "http.response.start", "status": status,
                      "headers": [(b"content-type", b"application/problem+json"), *(extra or [])]}
    await send(start)
    await send({"type": "http.response.body", "body": body})


class LeaderGate:
    def __init__(self, app: ASGIApp, leadership: Leadership) -> None:
        self.app = app
        self.leadership = leadership
        # One pooled client for every forwarded request (no new connection per call).
        self.client = httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        if self.leadership.role == Role.LEADER:
            if self.leadership.reloaded:
                await self.app(scope, receive, send)
            else:
                await _answer(send, 503, problem_body(
                    503, "starting", "this server is starting: it answers once its engine has reloaded the "
                    f"store (re-attaching to running jobs); nothing was changed, retry in {RETRY_AFTER_S} s", None),
                    [(b"retry-after", str(RETRY_AFTER_S).encode())])
            return
        if self.leadership.serves_reads:  # the store is out of reach: memory answers reads
            if scope["method"] in ("GET", "HEAD"):
                await self.app(scope, receive, send)
            else:
                await self._refuse(send, None, "its lease lapsed while the store is out of reach (an outage)")
            return
        leader = self.leadership.leader_url()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if leader is None:
            await self._refuse(send, None, "no leader is known yet (a takeover is under way)")
            return
        if FORWARDED in headers:
            await self._refuse(send, leader, "the request was already forwarded once")
            return
        await self._forward(scope, receive, send, leader, headers)

    async def _forward(self, scope: Scope, receive: Receive, send: Send, leader: str,
                       headers: dict[str, str]) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        out = {k: v for k, v in headers.items() if k not in _DROP}
        out[FORWARDED] = self.leadership.holder
        query = scope.get("query_string", b"").decode("latin-1")
        url = leader.rstrip("/") + scope["path"] + (f"?{query}" if query else "")
        request = self.client.build_request(scope["method"], url, headers=out, content=body)
        try:
            response = await self.client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing reached the leader
            await self._refuse(send, leader, f"the leader does not answer ({type(exc).__name__})")
            return
        except httpx.HTTPError as exc:
            # Sent, then the leader went away: it may have applied the request. 502, which
            # clients do not retry blindly (a retry with the same client_token is safe).
            await _answer(send, 502, problem_body(
                502, "leader-lost", f"the leader at {leader} went away while answering ({type(exc).__name__}); "
                "the request may or may not have been applied: retry with the same client_token", leader))
            return
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k.encode("latin-1"), v.encode("latin-1"))
                                    for k, v in response.headers.multi_items() if k.lower() not in _DROP]})
            async for chunk in _chunks(response):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    @staticmethod
    async def _refuse(send: Send, leader: str | None, why: str) -> None:
        await _answer(send, 503, not_leader_body(leader, why), [(b"retry-after", str(RETRY_AFTER_S).encode())])


async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    except httpx.HTTPError:
        return  # the leader went away mid-answer: the caller sees a cut stream, as from the leader


class LeaderCollector(Collector):
    """``podfleet_leader{server}`` (1 on the leader) and ``podfleet_leader_term``."""

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership

    def collect(self) -> Iterator[Metric]:
        leads = self.leadership.role == Role.LEADER
        g = GaugeMetricFamily("podfleet_leader", "1 while this server leads (runs the engine), else 0",
                              labels=["server"])
        g.add_metric([self.leadership.holder], 1.0 if leads else 0.0)
        yield g
        t = GaugeMetricFamily("podfleet_leader_term", "the leadership term (fencing token) this server holds; "
                              "0 while it follows or shares its store with nobody", labels=["server"])
        t.add_metric([self.leadership.holder], float(self.leadership.term or 0) if leads else 0.0)
        yield t
