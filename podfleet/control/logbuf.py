"""Bounded, append-only log lines of a cluster or job, readable from any thread.

The engine thread appends; API threads read by absolute offset (``since``), so a
server-sent-event stream resumes exactly where it left off even after old lines drop.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import deque
from typing import Any

from podfleet.wire import JsonObject


@functools.lru_cache(maxsize=8192)
def rfc3339(t: float) -> str:
    # Cached: job views re-render the same created/updated stamps many times over.
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LogBuffer:
    def __init__(self, keep: int = 2000) -> None:
        self._lines: deque[JsonObject] = deque(maxlen=keep)
        self._next = 0  # absolute offset of the next line
        # A follower (SSE) stops here: the job ended or the deployment finished. Lines
        # may still be appended later (a cluster logs faults) and read with ``since``.
        self.closed = False

    def append(self, t: float, message: str, **fields: Any) -> None:
        self._lines.append({"offset": self._next, "time": rfc3339(t), "message": message, **fields})
        self._next += 1

    @property
    def end(self) -> int:
        return self._next

    def since(self, offset: int = 0, limit: int = 1000) -> list[JsonObject]:
        lines = list(self._lines)  # a copy: the engine may append meanwhile
        return [ln for ln in lines if ln["offset"] >= offset][:limit]
