"""The console's own routes: sign-in and sign-out, the live hardware stream, and the
single page (with its assets) for every console path. The pages read and write
through the ``/v1`` API with the session cookie (``podfleet.console.sessions``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from podfleet.console.auth_port import auth_of, authorized
from podfleet.console.live import SnapshotHub
from podfleet.console.sessions import COOKIE, SessionStore, same_origin
from podfleet.control.plane import ControlPlane
from podfleet.errors import AuthError, ForbiddenError, PodfleetError, RateLimitedError

DIST = Path(__file__).parent / "dist"
# Console paths answered with the page (the page routes itself); everything else is the API's.
PAGES = ("/", "/login", "/clusters", "/clusters/{rest:path}", "/jobs", "/jobs/{rest:path}", "/queues", "/alerts",
         "/recoveries", "/firmware", "/audit", "/tokens")
STREAM_MAX_S = 3600.0
HEARTBEAT_S = 10.0
STREAM_RECHECK_MIN_S = 0.5  # the shortest wait before a stream re-checks an unchanged snapshot
# The longest a stream waits between two checks of its token (revocation ends it).
TOKEN_RECHECK_S = 1.0
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                                "base-uri 'none'; form-action 'self'; object-src 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

router = APIRouter(tags=["console"], include_in_schema=False)


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(..., min_length=1, max_length=256)


def sessions(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.console_sessions
    return store


Sessions = Annotated[SessionStore, Depends(sessions)]


def _session_body(name: str, role: str, csrf: str) -> dict[str, str]:
    return {"name": name, "role": role, "csrf": csrf}


@router.post("/console/session", operation_id="ConsoleSignIn")
async def sign_in(body: SignIn, request: Request, response: Response, store: Sessions) -> dict[str, str | bool]:
    """Exchange an access token for a session cookie (HttpOnly, SameSite=Strict)."""
    origin = request.headers.get("origin")
    if origin is not None and not same_origin(request, origin):
        raise ForbiddenError(f"cross-origin sign-in refused (Origin {origin!r} is not this server)", field="Origin")
    plane = request.app.state.plane
    principal = request.app.state.tokens.lookup(body.token.strip())
    if principal is None:  # the same per-address limit as the API's failed authentications
        auth = auth_of(request)
        client = auth.client_address(request)
        wait = auth.failed_authentication(request.app, client)
        if wait is not None:
            raise RateLimitedError(f"too many failed authentications from {client}; retry in {wait:.0f} s",
                                   field="token", retry_after_s=wait)
        await auth.deny(request.app, client=client, actor="anonymous", action="ConsoleSignIn",
                        target="/console/session", detail={"reason": "invalid or revoked token"})
        raise AuthError("invalid or revoked token", field="token")
    sid, s = store.open(body.token.strip())
    await plane.call(plane.audit, principal.actor, "ConsoleSignIn", principal.id, "ok", {})
    response.set_cookie(COOKIE, sid, max_age=int(store.ttl_s), path="/", httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    response.headers["Cache-Control"] = "no-store"
    return {"signed_in": True, **_session_body(principal.name, principal.role.value, s.csrf)}


@router.get("/console/session", operation_id="ConsoleSession")
async def session(request: Request, response: Response, store: Sessions) -> dict[str, str | bool]:
    """Who the cookie signs in as, and the CSRF token its writes must send (200 either
    way: the page asks before it knows, and a 401 would be an error in its console)."""
    s = store.session_of(request)
    principal = request.app.state.tokens.lookup(s.token) if s is not None else None
    response.headers["Cache-Control"] = "no-store"
    if s is None or principal is None:  # never signed in, expired, or its token revoked
        return {"signed_in": False}
    return {"signed_in": True, **_session_body(principal.name, principal.role.value, s.csrf)}


@router.post("/console/logout", operation_id="ConsoleSignOut", status_code=204)
async def sign_out(request: Request, store: Sessions) -> Response:
    store.close(request.cookies.get(COOKIE))  # CSRF-checked already (podfleet.console.csrf)
    out = Response(status_code=204)
    out.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return out


# Authorized as the operation it streams (the same rule, the same audit of denials).
@router.get("/console/stream/clusters/{cluster}/hardware", operation_id="DescribeClusterHardware",
            dependencies=[Depends(authorized)])
async def hardware_stream(request: Request, cluster: str) -> StreamingResponse:
    """Server-sent ``hardware`` events: the cluster's snapshot each time it is re-rendered
    (every telemetry tick, and at once after a fault); each event's id is the wall-clock
    time of its sample in unix ms (``podfleet.console.live.sample_wall_ms``)."""
    plane = request.app.state.plane
    plane.resolve(cluster)  # 404 before the stream starts
    return StreamingResponse(_hardware_events(request, cluster), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _hardware_events(request: Request, cluster: str) -> AsyncIterator[bytes]:
    plane: ControlPlane = request.app.state.plane
    hub: SnapshotHub = request.app.state.snapshot_hub
    cid = plane.resolve(cluster).id
    last: bytes | None = None
    # No disconnect probe here: the response listens for the disconnect itself and
    # cancels this generator at its next wait.
    hub.opened()
    try:
        deadline = time.monotonic() + STREAM_MAX_S
        quiet_since = time.monotonic()
        while True:
            # Every loop: a stream outlives the request that authorised it (a cached lookup).
            if not auth_of(request).credential_live(request):
                yield b'event: end\ndata: {"reason": "token revoked"}\n\n'
                return
            changed = hub.changed(cid)  # before the read: a render after it sets this
            try:
                if plane.snapshot_stale(cid):  # nobody read it lately: a fresh one first
                    await plane.call(plane.refresh_hardware, cid)
                rt = plane.resolve(cid)
                rendered_at = rt.rendered_at  # read first: the bytes are as new or newer
                snap: bytes = plane.hardware(cid)  # marks it wanted: the next tick re-renders it
            except PodfleetError as exc:  # the cluster went away (deleted): say so and end
                hub.forget(cid)
                yield f"event: end\ndata: {json.dumps({'reason': exc.message})}\n\n".encode()
                return
            now = time.monotonic()
            if snap is not last:
                last, quiet_since = snap, now
                yield hub.frame(cid, snap, rendered_at).event
            elif now - quiet_since >= HEARTBEAT_S:
                quiet_since = now
                yield b": keep-alive\n\n"
            left = deadline - now
            if left <= 0:
                return
            # Woken by the next render (each telemetry tick while watched, at once after a
            # fault); after two ticks without one the snapshot is re-checked (and refreshed
            # if stale); the heartbeat keeps idle proxies from closing the stream; and the
            # token is asked again at least every TOKEN_RECHECK_S.
            wait_s = min(left, HEARTBEAT_S, TOKEN_RECHECK_S,
                         max(2 * plane.telemetry_interval_s, STREAM_RECHECK_MIN_S))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), wait_s)
    finally:
        hub.closed()


def _not_built() -> HTMLResponse:
    return HTMLResponse(
        "<!doctype html><title>podfleet console not built</title><h1>The console is not built</h1>"
        "<p>Run <code>make console</code> (or <code>make run</code>): it builds <code>console/</code> "
        "into <code>podfleet/console/dist</code>. The API is served under <code>/v1</code>.</p>",
        status_code=503, headers=SECURITY_HEADERS)


async def page(request: Request) -> Response:
    index = DIST / "index.html"
    if not index.is_file():
        return _not_built()
    return FileResponse(index, media_type="text/html", headers=SECURITY_HEADERS)


for _path in PAGES:
    router.add_api_route(_path, page, methods=["GET"], include_in_schema=False, response_class=HTMLResponse)
