"""Server-sent events over a ``LogBuffer``: one ``log`` event per line, optional
``progress`` events, then ``end`` when the buffer closes (or the client goes away)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from fastapi import Request
from fastapi.responses import StreamingResponse

from podfleet.api.auth import credential_live
from podfleet.control.logbuf import LogBuffer

POLL_S = 0.1
HEARTBEAT_S = 10.0


def _event(kind: str, data: object, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, default=str)}\n\n"


async def _stream(request: Request, buf: LogBuffer, since: int,
                  progress: Callable[[], object] | None, max_s: float) -> AsyncIterator[str]:
    offset = since
    last_progress: object = None
    idle = 0.0
    waited = 0.0
    while True:
        # A stream outlives the request that authorised it: every loop asks again (a
        # cached lookup), so a revoked token or a closed session ends it within a poll.
        if not credential_live(request):
            yield _event("end", {"next": offset, "reason": "token revoked"})
            return
        lines = buf.since(offset)
        for ln in lines:
            yield _event("log", ln, ln["offset"])
            offset = ln["offset"] + 1
        if progress is not None:
            p = progress()
            if p != last_progress:
                last_progress = p
                yield _event("progress", p)
        if buf.closed and not lines:
            yield _event("end", {"next": offset})
            return
        if lines:
            idle = 0.0
        elif idle >= HEARTBEAT_S:
            idle = 0.0
            yield ": keep-alive\n\n"
        if waited >= max_s or await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
        idle += POLL_S
        waited += POLL_S


def stream(request: Request, buf: LogBuffer, since: int = 0,
           progress: Callable[[], object] | None = None, max_s: float = 3600.0) -> StreamingResponse:
    return StreamingResponse(
        _stream(request, buf, since, progress, max_s), media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
