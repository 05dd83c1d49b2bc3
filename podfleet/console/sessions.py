"""Console sign-in sessions: an opaque cookie that maps, on the server only, to the
access token it was opened with, and a CSRF token that every mutating request made
with the cookie must echo in a header.

The browser never sees the access token again after sign-in: the cookie is
``HttpOnly`` (no script reads it) and ``SameSite=Strict`` (no other site sends it).
``SameSite`` alone leaves same-site subdomains and old browsers, so writes also need
``X-CSRF-Token`` equal to the session's token (synchronizer pattern: the server holds
it; the page gets it from ``GET /console/session``) and, when the browser sends one, an
``Origin`` equal to the server's own (checked by ``podfleet.console.csrf`` before any
route or authentication runs).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from starlette.requests import HTTPConnection

COOKIE = "podfleet_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Session:
    token: str  # the access token it was opened with (checked again on every request)
    csrf: str
    expires_at: float  # time.monotonic()


class SessionStore:
    """Session id hash -> session, in this process's memory: a restart signs everyone out
    (the access tokens themselves stay valid)."""

    def __init__(self, ttl_s: float = 8 * 3600.0, max_sessions: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(session_id: str) -> str:
        return hashlib.sha256(session_id.encode()).hexdigest()

    def open(self, token: str) -> tuple[str, Session]:
        """A new session for ``token`` (already checked): its id (the cookie) and record."""
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        s = Session(token, secrets.token_urlsafe(32), now + self.ttl_s)
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                self._sessions = {k: v for k, v in self._sessions.items() if v.expires_at > now}
                while len(self._sessions) >= self.max_sessions:  # all live: drop the oldest
                    del self._sessions[next(iter(self._sessions))]
            self._sessions[self._key(sid)] = s
        return sid, s

    def get(self, session_id: str | None) -> Session | None:
        if not session_id or len(session_id) > 128:
            return None
        key = self._key(session_id)
        with self._lock:
            s = self._sessions.get(key)
            if s is not None and s.expires_at <= time.monotonic():
                del self._sessions[key]
                s = None
        return s

    def close(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._sessions.pop(self._key(session_id), None)

    def session_of(self, conn: HTTPConnection) -> Session | None:
        return self.get(conn.cookies.get(COOKIE))

    def presented_token(self, conn: HTTPConnection) -> str | None:
        """The access token behind the request's session cookie, or None without a live
        session. (Writes made with the cookie were CSRF-checked before they got here:
        ``podfleet.console.csrf``.)"""
        s = self.session_of(conn)
        return s.token if s is not None else None


def csrf_ok(conn: HTTPConnection, s: Session) -> str | None:
    """Why a write made with session ``s`` is refused (no or wrong CSRF token, another
    origin), or None when it may go on."""
    sent = conn.headers.get(CSRF_HEADER, "")
    if not sent or not hmac.compare_digest(sent.encode(), s.csrf.encode()):
        return ("missing or wrong CSRF token: a write made with the console's session cookie needs the "
                "X-CSRF-Token header from GET /console/session")
    origin = conn.headers.get("origin")
    if origin is not None and not same_origin(conn, origin):
        return f"cross-origin write refused (Origin {origin!r} is not this server)"
    return None


def same_origin(conn: HTTPConnection, origin: str) -> bool:
    host = conn.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")
