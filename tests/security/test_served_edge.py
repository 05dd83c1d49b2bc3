"""The request edge of a real ``podfleet up`` process, probed as the second security
review probed it: X-Forwarded-For from loopback, slow clients holding descriptors, a
3 MB ``code push`` and a chunked over-limit upload (finding 4 and finding 12)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from podfleet.api.testing import free_port, spawn_server, stop_server
from podfleet.sdk.client import PodfleetClient

TOKEN = "pf_served-edge-admin-token-0123456789abcdef"
CODE_MAX = 4 << 20

pytestmark = pytest.mark.realproc


@dataclass
class Up:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    tmp = tmp_path_factory.mktemp("up")
    port = free_port()
    log = tmp / "server.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PODFLEET_KEY_DIR", str(tmp / "keys"))
        mp.setenv("PODFLEET_HEADER_TIMEOUT_S", "1")
        mp.setenv("PODFLEET_CODE_MAX_BYTES", str(CODE_MAX))
        mp.setenv("PODFLEET_AUTH_FAIL_PER_S", "0.01")  # burst 60, and (nearly) no refill while the test runs
        mp.delenv("PODFLEET_TRUSTED_PROXIES", raising=False)
        proc = spawn_server(tmp / "pf.db", port, TOKEN, log=log)
    try:
        yield Up(f"http://127.0.0.1:{port}", proc, log)
    finally:
        stop_server(proc)


def test_forwarded_for_from_loopback_neither_bypasses_nor_locks_out(up: Up) -> None:
    with httpx.Client(base_url=up.url, headers={"Authorization": "Bearer pf_bogus"}) as c:
        codes = [c.get("/v1/clusters", headers={"X-Forwarded-For": f"198.51.100.{i}"}).status_code for i in range(70)]
    assert codes[:60] == [401] * 60 and set(codes[60:]) == {429}  # rotating the header bought no fresh buckets
    r = httpx.get(f"{up.url}/v1/clusters", headers={"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": "127.0.0.1"})
    assert r.status_code == 200  # and the admin, from the flooded address, is served


def test_slow_clients_do_not_keep_descriptors(up: Up) -> None:
    base = up.fds()
    socks = []
    for _ in range(100):
        s = socket.create_connection(("127.0.0.1", int(up.url.rsplit(":", 1)[1])), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: podfleet\r\nX-Slow: x")
        socks.append(s)
    time.sleep(0.3)
    held = up.fds()
    deadline = time.monotonic() + 8
    while up.fds() > base + 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    after = up.fds()
    for s in socks:
        s.close()
    assert held >= base + 90, (base, held)
    assert after <= base + 10, (base, held, after)  # the probe saw 21 -> 321, for good


def test_code_push_of_3_mb_and_a_clean_413_for_a_chunked_over_limit_upload(up: Up, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    (src / "data.bin").write_bytes(os.urandom(3 << 20))
    out = PodfleetClient(up.url, TOKEN).push_code(str(src))
    assert out["ref"].startswith("code:") and out["bytes"] > 3_000_000

    def chunks() -> Iterator[bytes]:
        for _ in range(CODE_MAX // 65536 + 16):
            yield os.urandom(65536)

    r = httpx.post(f"{up.url}/v1/code", content=chunks(), timeout=30,
                   headers={"Authorization": f"Bearer {TOKEN}", "content-type": "application/gzip"})
    assert r.status_code == 413 and r.json()["code"] == "payload-too-large", r.text
    time.sleep(0.5)
    log = up.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]
