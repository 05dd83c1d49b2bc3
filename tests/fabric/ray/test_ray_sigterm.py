"""``podfleet up`` with a Ray cluster stops cleanly on SIGTERM.

Ray is initialised on the engine thread (a cluster created through the API), where it
cannot install its Python SIGTERM handler; its C++ failure-signal handler used to take
the signal and abort the process (exit 134) before the graceful shutdown ran. Now the
server's own handler runs: exit 128 + 15, and Ray's private instance goes with it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.realproc]
pytest.importorskip("ray")

TOKEN = "pf_test-admin-token-0123456789abcdef"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_podfleet_up_with_ray_initialised(tmp_path: Path) -> None:
    port = _port()
    env = {**os.environ, "PODFLEET_ADMIN_TOKEN": TOKEN, "HOME": str(tmp_path), "PODFLEET_WORKDIR": str(tmp_path / ".podfleet" / "work"),
           "RAY_AUTH_MODE": "disabled"}
    env.pop("PODFLEET_RAY_ADDRESS", None)
    env.pop("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", None)
    err = tmp_path / "err.log"
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("podfleet")), "up", "--fabric", "ray", "--db",
         f"sqlite:///{tmp_path / 'pf.db'}", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=err.open("wb"), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    head_pid: int | None = None
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
            deadline = time.monotonic() + 90
            while True:
                assert proc.poll() is None, err.read_text()
                try:
                    if c.get("/readyz").status_code == 200:  # listening and reloaded
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "podfleet up did not start"
                time.sleep(0.5)
            r = c.post("/v1/clusters", json={"name": "r", "fabric": "ray", "chips": 1})
            assert r.status_code in (200, 201, 202), r.text
            while c.get("/v1/clusters/r").json()["state"] != "active":
                assert time.monotonic() < deadline + 60, "the Ray cluster did not come up"
                time.sleep(0.5)
        record = tmp_path / ".podfleet" / "work" / "ray" / "head.json"  # the private head (no address)
        head_pid = int(json.loads(record.read_text())["pid"])
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
        # No job ran: the shutdown leaves no Ray head behind (one with running gangs is
        # left for the next server: test_ray_private.py).
        gone = time.monotonic() + 30
        while _group_alive(head_pid):
            assert time.monotonic() < gone, "the private Ray head outlived a shutdown with nothing to keep"
            time.sleep(0.2)
        assert not record.exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if head_pid is not None and _group_alive(head_pid):
            os.killpg(head_pid, signal.SIGKILL)
    text = err.read_text()
    assert rc == 128 + signal.SIGTERM, text  # the server's own handler, after its graceful shutdown
    assert "SIGTERM received" not in text
