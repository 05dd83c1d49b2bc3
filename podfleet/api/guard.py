"""The request guard: what every request passes before any route code or body parsing.

Pure ASGI, outermost but for metrics. In order:

1. Identifiers: a path whose raw form carries an encoded ``/`` (``%2F``) or a ``.``/``..``
   segment is refused (404: no resource has such an id): an identifier never names
   another resource's path.
2. ``/v1`` and the console's streams: the presented token is checked *before the body
   is read*, so an anonymous caller cannot make the server parse (or even receive) a
   large body. A valid token spends from that token's bucket (429 with ``Retry-After``
   when empty) and nothing else: another client's failures never refuse it. A failed
   one spends a slot of its client address (``failed_authentication``, shared with the
   console's sign-in) and, aggregated, costs an audit row (``DenialLog``); an address
   out of slots gets 429 instead of 401.
3. The body is limited (413): by ``Content-Length`` up front, and by counting what
   actually arrives (chunked bodies carry no length); and it must arrive within
   ``body_timeout_s`` (408), so a client that trickles a body cannot hold a connection.
   (Headers have their own deadline, below ASGI: ``api/connections.py``.)
4. Security headers on every response.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from podfleet.api.auth import Principal, client_address, deny, presented_token
from podfleet.api.problems import MEDIA_TYPE
from podfleet.api.routemap import NO_SUCH_ROUTE, RouteMap
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
# Paths whose requests are authenticated here, before routing: the API and the console's
# live streams (which are answered for as long as their token lasts).
AUTHENTICATED = ("/v1/", "/console/stream/")
# A refusal in the middle of a body leaves the rest of it unread on the connection.
CLOSE = {"connection": "close"}


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
    # the whole body must arrive within this many seconds of the headers (408)
    body_timeout_s: float = 60.0
    # addresses/CIDRs whose X-Forwarded-For names the client (api/proxies.py); none by default
    trusted_proxies: tuple[str, ...] = ()
    tls: bool = False

    def __post_init__(self) -> None:
        if self.body_timeout_s <= 0:
            raise ValueError(f"body_timeout_s must be > 0, got {self.body_timeout_s}")


class Guard:
    def __init__(self, app: ASGIApp, config: GuardConfig | None = None) -> None:
        self.app = app
        self.config = config or GuardConfig()
        c = self.config
        self.per_token = TokenBuckets(c.token_rate_per_s, c.token_burst)
        self.routes = RouteMap()
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
        app = scope["app"]
        op = self.routes.operation(app, scope["method"], scope["path"])
        if scope["path"].startswith(AUTHENTICATED) and not await self._authenticate(scope, send, op):
            return
        limit = self.config.route_body_bytes.get(op or "", self.config.max_body_bytes)
        length = _content_length(scope)
        if length is not None and length > limit:
            await _problem(send, 413, "payload-too-large",
                           f"request body of {length} bytes exceeds the limit of {limit} bytes", field="body",
                           headers=CLOSE)
            return
        timeout_s = self.config.body_timeout_s
        deadline = asyncio.get_running_loop().time() + timeout_s
        # refused: our 413/408 went out (the app's answer is dropped); cut: the app was told
        # the client left, mid-body (and what it raises about that is moot).
        started = refused = cut = body_done = False
        seen = 0

        async def send_tracking(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413/408 was sent; whatever the app answers to the cut-off body is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        async def refuse(status: int, code: str, detail: str) -> Message:
            # The client gets its answer now and the app sees a disconnect: raising here
            # instead would reach the framework's body parser, which answers any error with 400.
            nonlocal refused, cut
            cut = True
            if not started:
                await _problem(send, status, code, detail, field="body", headers=CLOSE)
                refused = True
            return {"type": "http.disconnect"}

        async def receive_limited() -> Message:
            nonlocal seen, body_done
            if cut:
                return {"type": "http.disconnect"}
            if body_done:  # a stream waiting for the client to go away: no deadline
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                return await refuse(408, "request-timeout",
                                    f"the request body did not arrive within {timeout_s:g} s")
            if message["type"] == "http.request":
                # Counting what arrives (chunked bodies announce no length).
                seen += len(message.get("body", b""))
                if seen > limit:
                    return await refuse(413, "payload-too-large", f"request body exceeds the limit of {limit} bytes")
                body_done = not message.get("more_body", False)
            return message

        try:
            await self.app(scope, receive_limited, send_tracking)
        except Exception:
            if not cut:
                raise
            # What the app made of a body cut short (ClientDisconnect, a parse error) is
            # moot: the client has its 413 or 408, and the server log no traceback.

    async def _authenticate(self, scope: Scope, send: Send, op: str | None) -> bool:
        app = scope["app"]
        conn = HTTPConnection(scope)
        # The token first: a valid one is never refused for what others sent from its address.
        token = presented_token(conn)
        principal: Principal | None = app.state.tokens.lookup(token) if token else None
        if principal is None:
            client = client_address(conn)
            wait = failed_authentication(app, client)
            if wait is not None:
                await _problem(send, 429, "rate-limited",
                               f"too many failed authentications from {client}; retry in {wait:.0f} s",
                               headers={"retry-after": f"{wait:.0f}"})
                return False
            why = "missing bearer token" if token is None else "invalid or revoked token"
            await deny(app, client=client, actor="anonymous", action=op or NO_SUCH_ROUTE,
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


def failed_authentication(app: Any, client: str) -> float | None:
    """One failed authentication from ``client`` (the guard's, the console sign-in's):
    None while its address has slots left (answer 401), else the seconds until it has one
    again (answer 429). Only failures spend slots, so a flood of them from an address
    slows that flood, never a valid token sent from the same address."""
    failures: TokenBuckets = app.state.auth_failures
    if failures.take(client):
        return None
    return max(1.0, failures.retry_after_s(client))


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


_TITLES = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout",
           413: "Content Too Large", 429: "Too Many Requests"}
