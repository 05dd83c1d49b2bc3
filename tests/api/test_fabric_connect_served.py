"""A real ``podfleet up`` whose operator names a Ray address that never answers.

The address is a TCP port that accepts connections and says nothing (what a firewall
black hole or a wrong service looks like to Ray's client, which then waits for many
minutes). The create answers at once, writes to other clusters keep answering, the
cluster fails with the reason within the connection timeout, an address not in
``PODFLEET_RAY_ADDRESSES`` is refused, and SIGTERM stops the server within 10 s while
the connection attempt still hangs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.realproc, pytest.mark.ray]
pytest.importorskip("ray")

TOKEN = "pf_test-admin-token-0123456789abcdef"
CONNECT_TIMEOUT_S = 15  # covers importing Ray on a loaded machine; the refused port fails well before


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent() -> Iterator[str]:
    """A listener that never accepts: the TCP handshake completes (the kernel's backlog),
    then nothing is ever said."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def test_a_ray_address_that_never_answers_blocks_nothing(tmp_path: Path, silent: str) -> None:
    port = _port()
    env = {**os.environ, "PODFLEET_ADMIN_TOKEN": TOKEN, "HOME": str(tmp_path), "RAY_AUTH_MODE": "disabled",
           "PODFLEET_RAY_ADDRESSES": f"{silent},127.0.0.1:1",
           "PODFLEET_FABRIC_CONNECT_TIMEOUT_S": str(CONNECT_TIMEOUT_S)}
    env.pop("PODFLEET_RAY_ADDRESS", None)
    err = tmp_path / "err.log"
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("podfleet")), "up", "--db", f"sqlite:///{tmp_path / 'pf.db'}",
         "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=err.open("wb"), start_new_session=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=10) as c:
            deadline = time.monotonic() + 90
            while True:
                assert proc.poll() is None, err.read_text()
                try:
                    if c.get("/readyz").status_code == 200:  # listening and reloaded
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "podfleet up did not start"
                time.sleep(0.3)
            t0 = time.monotonic()
            r = c.post("/v1/clusters", json={"name": "hung", "fabric": "ray", "chips": 1, "ray_address": silent})
            assert r.status_code == 201, r.text
            assert time.monotonic() - t0 < 5 and r.json()["state"] == "deploying"  # loose: a loaded CI
            # A refused port fails at once, with the reason (no ray.init at all).
            r = c.post("/v1/clusters", json={"name": "refused", "fabric": "ray", "chips": 1,
                                             "ray_address": "127.0.0.1:1"})
            assert r.status_code == 201, r.text
            # Not allow-listed: refused, naming the setting.
            r = c.post("/v1/clusters", json={"name": "other", "fabric": "ray", "ray_address": "192.0.2.1:6379"})
            assert r.status_code == 403 and "PODFLEET_RAY_ADDRESSES" in r.json()["detail"], r.text
            # Writes to other clusters keep answering while the connection hangs.
            for i in range(3):
                t = time.monotonic()
                r = c.post("/v1/clusters", json={"name": f"sim-{i}", "type": "trn2-node"})
                assert r.status_code == 201, r.text
                assert c.delete(f"/v1/clusters/sim-{i}").status_code == 200
                assert time.monotonic() - t < 5
            for name, needle in (("refused", "Connection refused"),
                                 ("hung", f"timed out after {CONNECT_TIMEOUT_S} s")):
                while (view := c.get(f"/v1/clusters/{name}").json())["state"] == "deploying":
                    assert time.monotonic() - t0 < CONNECT_TIMEOUT_S + 20, view
                    time.sleep(0.2)
                assert view["state"] == "failed" and needle in view["reason"], view
        # SIGTERM while ray.init still hangs on its thread.
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    print(f"SIGTERM to exit while ray.init hangs: {took:.2f} s")  # shown with -s
    assert took < 10, f"SIGTERM took {took:.1f} s"
    assert rc == 128 + signal.SIGTERM, err.read_text()
