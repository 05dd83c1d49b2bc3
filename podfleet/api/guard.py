"""The request guard: what every request passes before any route code or body parsing.

Pure ASGI, outermost but for metrics. In order:

1. Identifiers: a path whose raw form carries an encoded ``/`` (``%2F``) or a ``.``/``..``
   segment is refused (404: no resource has such an id): an identifier never names
   another resource's path.
2. ``/v1``: the presented token is checked *before the body is read*, so an anonymous
   caller cannot make the server parse (or even receive) a large body; a failed call
   costs a rate-limit slot of its address and, aggregated, an audit row (``DenialLog``).
   A valid token spends from that token's bucket (429 with ``Retry-After`` when empty).
3. The body is limited (413): by ``Content-Length`` up front, and by counting what
   actually arrives (chunked bodies carry no length).
4. Security headers on every response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from podfleet.api.auth import Principal, client_address, deny, presented_token
from podfleet.api.problems import MEDIA_TYPE
from podfleet.security.ratelimit import TokenBuckets

MiB = 1 << 20
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    # Restricts framing, plugins and <base>, not scripts: the console serves its own.
    (b"content-security-policy", b"frame-ancestors 'none'; object-src 'none'; base-uri 'none'"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
)
HSTS = (b"strict-transport-security", b"max-age=31536000")


@dataclass(frozen=True)
class GuardConfig:
    max_body_bytes: int = MiB
    # operationId -> its own body limit (code uploads are larger than JSON commands)
    route_body_bytes: dict[str, int] = field(default_factory=dict)
    token_rate_per_s: float = 1000.0  # well above what one client of the benchmarks sends (200/s)
    token_burst: float = 2000.0
    # failed authentications per client address
    auth_fail_rate_per_s: float = 2.0
    auth_fail_burst: float = 60.0
    denial_window_s: float = 60.0  # refusals of one kind within it make one audit row
    tls: bool = False


class Guard:
    def __init__(self, app: ASGIApp, config: GuardConfig | None = None) -> None:
        self.app = app
        self.config = config or GuardConfig()
        c = self.config
        self.per_token = TokenBuckets(c.token_rate_per_s, c.token_burst)
        self.per_address = TokenBuckets(c.auth_fail_rate_per_s, c.auth_fail_burst)
        self._headers = [*SECURITY_HEADERS, *([HSTS] if c.tls else [])]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._with_headers(send)
        bad = bad_identifier(scope.get("raw_path") or scope["path"].encode())
        if bad:
            # 404: no resource has such an identifier (and the path must not be read as another).
            await _problem(send, 404, "not-found", f"no such resource: {bad}", field="path")
            return
        op = _operation(scope)
        v1 = scope["path"].startswith("/v1/") or scope["path"] == "/v1"
        if v1 and not await self._authenticate(scope, send, op):
            return
        limit = self.config.route_body_bytes.get(op or "", self.config.max_body_bytes)
        length = _content_length(scope)
        if length is not None and length > limit:
            await _problem(send, 413, "payload-too-large",
                           f"request body of {length} bytes exceeds the limit of {limit} bytes", field="body")
            return
        state = {"started": False, "refused": False}

        async def send_tracking(message: Message) -> None:
            if state["refused"]:
                return  # the 413 was sent; whatever the app answers to the cut-off body is dropped
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        seen = 0

        async def receive_limited() -> Message:
            # Counting what arrives (chunked bodies announce no length). Past the limit the
            # client gets its 413 now and the app sees a disconnect: raising here instead
            # would reach the framework's body parser, which answers any error with 400.
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request" and not state["refused"]:
                seen += len(message.get("body", b""))
                if seen > limit and not state["started"]:
                    state["refused"] = True
                    await _problem(send, 413, "payload-too-large",
                                   f"request body exceeds the limit of {limit} bytes", field="body")
                    return {"type": "http.disconnect"}
            return message

        await self.app(scope, receive_limited, send_tracking)

    async def _authenticate(self, scope: Scope, send: Send, op: str | None) -> bool:
        app = scope["app"]
        conn = HTTPConnection(scope)
        client = client_address(conn)
        if not self.per_address.allows(client):
            await _problem(send, 429, "rate-limited",
                           f"too many failed authentications from {client}; retry in "
                           f"{self.per_address.retry_after_s(client):.0f} s",
                           headers={"retry-after": f"{self.per_address.retry_after_s(client):.0f}"})
            return False
        token = presented_token(conn)
        principal: Principal | None = app.state.tokens.lookup(token) if token else None
        if principal is None:
            self.per_address.take(client)
            why = "missing bearer token" if token is None else "invalid or revoked token"
            await deny(app, client=client, actor="anonymous", action=op or "unknown",
                            target=scope["path"], detail={"reason": why})
            await _problem(send, 401, "unauthorized", f"{why}: send 'Authorization: Bearer <token>'",
                           headers={"www-authenticate": "Bearer"})
            return False
        if not self.per_token.take(principal.id):
            wait = self.per_token.retry_after_s(principal.id)
            await _problem(send, 429, "rate-limited",
                           f"token {principal.id} is over its rate limit "
                           f"({self.config.token_rate_per_s:g}/s); retry in {wait:.1f} s",
                           headers={"retry-after": f"{max(1, round(wait))}"})
            return False
        scope.setdefault("state", {})["principal"] = principal
        scope["state"]["token_hash"] = app.state.tokens.hash_of(token)
        return True

    def _with_headers(self, send: Send) -> Send:
        extra = self._headers

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                have = {k.lower() for k, _ in headers}
                headers.extend((k, v) for k, v in extra if k not in have)
                message = {**message, "headers": headers}
            await send(message)

        return wrapped


def bad_identifier(raw_path: bytes) -> str | None:
    """Why this raw request path is refused, or None."""
    lowered = raw_path.lower()
    if b"%2f" in lowered or b"%5c" in lowered or b"\\" in raw_path:
        return "an identifier in the path contains '/' or '\\'; identifiers never do"
    for seg in lowered.split(b"/"):
        if seg in (b".", b"..", b"%2e", b"%2e%2e", b".%2e", b"%2e."):
            return "a path segment is '.' or '..'; identifiers never are"
        if b"%00" in seg:
            return "an identifier in the path contains a NUL byte"
    return None


def _operation(scope: Scope) -> str | None:
    for route in scope["app"].router.routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return getattr(route, "operation_id", None)
    return None


def _content_length(scope: Scope) -> int | None:
    for k, v in scope.get("headers", []):
        if k == b"content-length":
            try:
                return int(v)
            except ValueError:
                return None
    return None


async def _problem(send: Send, status: int, code: str, detail: str, *, field: str | None = None,
                   headers: dict[str, str] | None = None) -> None:
    body: dict[str, Any] = {"type": f"urn:podfleet:problem:{code}", "title": _TITLES.get(status, "Error"),
                            "status": status, "detail": detail, "code": code}
    if field is not None:
        body["field"] = field
    data = json.dumps(body).encode()
    hdrs = [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", str(len(data)).encode())]
    hdrs.extend((k.encode(), v.encode()) for k, v in (headers or {}).items())
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": data})


_TITLES = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 413: "Content Too Large",
           429: "Too Many Requests"}
