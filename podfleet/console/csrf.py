"""CSRF check for writes made with the console's session cookie (pure ASGI, outermost:
it runs before authentication, so a forged write never reaches a route).

A request with an ``Authorization`` header is not the browser's ambient credential and
is let through; so is one without a live session cookie (it will fail authentication on
its own), and sign-in itself, which checks its Origin."""

from __future__ import annotations

import json

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from podfleet.console.sessions import SAFE_METHODS, SessionStore, csrf_ok

EXEMPT = frozenset({("POST", "/console/session")})


class CsrfGuard:
    def __init__(self, app: ASGIApp, sessions: SessionStore) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS \
                and (scope["method"], scope["path"]) not in EXEMPT:
            conn = HTTPConnection(scope)
            s = self.sessions.session_of(conn) if "authorization" not in conn.headers else None
            why = csrf_ok(conn, s) if s is not None else None
            if why is not None:
                body = json.dumps({"type": "urn:podfleet:problem:csrf", "title": "Forbidden", "status": 403,
                                   "detail": why, "code": "csrf", "field": "X-CSRF-Token"}).encode()
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"application/problem+json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
