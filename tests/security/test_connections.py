"""Connection deadlines with slow clients: real sockets against a real uvicorn server,
with each of uvicorn's HTTP implementations (finding 12: slow-header and slow-body
connections never timed out, and every one held a file descriptor)."""

from __future__ import annotations

import json
import os
import select
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlparse

import httpx
import pytest

from podfleet.api.guard import GuardConfig
from tests.security.conftest import Api, serve

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0


@pytest.fixture(scope="module", params=["httptools", "h11"])
def slow(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    yield from serve(tmp_path_factory.mktemp("slow"), GuardConfig(body_timeout_s=BODY_TIMEOUT_S),
                     header_timeout_s=HEADER_TIMEOUT_S, http=request.param)


def connect(api: Api) -> socket.socket:
    u = urlparse(api.url)
    return socket.create_connection((u.hostname, u.port), timeout=10)


def trickle_until_closed(sock: socket.socket, limit_s: float = 8.0) -> tuple[float, bytes]:
    """Send a byte every 0.2 s (a slowloris client) until the server closes; returns how
    long that took and what the server sent."""
    start, got = time.monotonic(), b""
    while time.monotonic() - start < limit_s:
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return time.monotonic() - start, got
            got += chunk
            continue
        try:
            sock.send(b"x")
        except OSError:  # closed under us
            return time.monotonic() - start, got
    raise AssertionError(f"the server kept a slow connection open for {limit_s} s (got {got!r})")


def test_slow_headers_are_cut_off(slow: Api) -> None:
    with connect(slow) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: podfleet\r\nX-Slow: ")
        took, got = trickle_until_closed(s)
    assert HEADER_TIMEOUT_S * 0.8 <= took <= HEADER_TIMEOUT_S + 2.0, took
    assert got.startswith(b"HTTP/1.1 408"), got


def test_a_kept_alive_connection_that_trickles_is_cut_off(slow: Api) -> None:
    with connect(slow) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: podfleet\r\n\r\n")
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: podfleet\r\nX-Slow: ")  # the next request, slowly
        took, got = trickle_until_closed(s)
    assert took <= HEADER_TIMEOUT_S + 2.0 and got.startswith(b"HTTP/1.1 408"), (took, got)


def test_prompt_clients_keep_their_connections(slow: Api) -> None:
    # Requests spaced under the deadline on one kept-alive connection, for longer than it.
    with httpx.Client(base_url=slow.url, headers={"Authorization": f"Bearer {slow.tokens['viewer']}"}) as c:
        codes = []
        for _ in range(5):
            codes.append(c.get("/v1/clusters").status_code)
            time.sleep(HEADER_TIMEOUT_S / 2)
    assert codes == [200] * 5


def test_a_slow_body_is_cut_off_with_408(slow: Api) -> None:
    body = json.dumps({"model": "llama3-8b", "chips": 64}).encode()
    with connect(slow) as s:
        s.sendall(b"POST /v1/plan HTTP/1.1\r\nHost: podfleet\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + slow.tokens["viewer"].encode() + b"\r\n"
                  b"Content-Length: " + str(len(body) + 4096).encode() + b"\r\n\r\n" + body[:10])
        took, got = trickle_until_closed(s)
    assert BODY_TIMEOUT_S * 0.8 <= took <= BODY_TIMEOUT_S + 2.0, took
    head, _, payload = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower(), got
    assert json.loads(payload)["code"] == "request-timeout"


def test_a_prompt_body_is_served(slow: Api) -> None:
    with slow.client("viewer") as c:
        r = c.post("/v1/plan", json={"model": "llama3-8b", "chips": 64})
        assert r.status_code == 200, r.text


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_slow_connections_give_their_descriptors_back(slow: Api) -> None:
    base = _fds()
    socks = [connect(slow) for _ in range(100)]
    for s in socks:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: podfleet\r\nX-Slow: x")
    time.sleep(0.3)
    held = _fds()
    assert held >= base + 190, (base, held)  # each connection: our end and the server's
    deadline = time.monotonic() + HEADER_TIMEOUT_S + 5
    while _fds() > base + 110 and time.monotonic() < deadline:
        time.sleep(0.1)
    after = _fds()
    for s in socks:
        s.settimeout(5)
        assert s.recv(65536).startswith(b"HTTP/1.1 408")
        s.close()
    assert after <= base + 110, (base, held, after)  # the server's ends are closed
    assert _fds() <= base + 10
