"""Connection deadlines, and the one uvicorn configuration that every server uses.

Below ASGI, uvicorn reads a request's headers with no deadline: its keep-alive timer is
cancelled by any byte that arrives, so a client that sends a header a byte at a time
(slowloris) holds a connection, and a file descriptor, for as long as it likes. Here a
connection waiting for a request's headers (from when it opens, and after each
response) must have them all within ``header_timeout_s``, or it gets a 408 and is
closed. The body's deadline is the request guard's (``api/guard.py``), which sees it
arrive.

uvicorn chooses its HTTP implementation (httptools when installed, else h11); both keep
the request in progress as ``cycle`` and call ``on_response_complete``, which is all the
deadline needs. ``options`` is what ``podfleet up`` and the test servers pass to uvicorn,
so tests run what is served.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
TIMEOUT_BODY = b"request headers not received in time\n"


class HeaderDeadline(asyncio.Protocol):
    """Mixin over a uvicorn HTTP protocol: whole headers within ``header_timeout_s``."""

    header_timeout_s = HEADER_TIMEOUT_S
    # Set by the uvicorn protocol this mixes into (typed loosely: its implementations differ).
    cycle: Any
    transport: Any
    loop: Any
    _deadline: asyncio.TimerHandle | None = None
    _waiting_after: Any = None  # the cycle that was current when the wait for headers began

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._deadline is not None and self.cycle is not self._waiting_after:
            self._disarm()  # a new request's headers are in: its body has the guard's deadline

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        # Waiting for the next request's headers, unless a pipelined one is already being served.
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._waiting_after = self.cycle
        self._deadline = self.loop.call_later(self.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.cycle is not self._waiting_after:
            return
        if self.transport.get_protocol() is not self:  # upgraded (a websocket): no longer HTTP's
            return
        self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                             b"connection: close\r\ncontent-length: " + str(len(TIMEOUT_BODY)).encode()
                             + b"\r\n\r\n" + TIMEOUT_BODY)
        self.transport.close()


class H11Deadlines(HeaderDeadline, H11Protocol):
    pass


def _fast_protocol() -> type[HeaderDeadline]:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools missing: uvicorn would use h11 too
        return H11Deadlines

    class HttpToolsDeadlines(HeaderDeadline, HttpToolsProtocol):
        pass

    return HttpToolsDeadlines


HttpDeadlines = _fast_protocol()


def protocol(header_timeout_s: float, *, impl: str = "auto") -> type[HeaderDeadline]:
    """The HTTP protocol class, with its header deadline (``impl``: auto, httptools or h11)."""
    if header_timeout_s <= 0:
        raise ValueError(f"header_timeout_s must be > 0, got {header_timeout_s}")
    base = H11Deadlines if impl == "h11" else HttpDeadlines
    return type(base.__name__, (base,), {"header_timeout_s": header_timeout_s})


def options(*, header_timeout_s: float = HEADER_TIMEOUT_S, impl: str = "auto", **more: Any) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config``."""
    return {
        "log_level": "warning", "access_log": False,
        "http": protocol(header_timeout_s, impl=impl),
        # X-Forwarded-For only from PODFLEET_TRUSTED_PROXIES (api/proxies.py, in the app);
        # uvicorn's own default would trust it from loopback.
        "proxy_headers": False,
        **more,
    }
