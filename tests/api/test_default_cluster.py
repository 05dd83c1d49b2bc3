"""``podfleet up --default-cluster NAME`` (what ``make run`` does) serves a simulated
64-chip pod, created once: a restart finds it in the store and does not add another."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from podfleet.api.testing import free_port, spawn_server

TOKEN = "pf_default-cluster-test-token-0123456789"
pytestmark = pytest.mark.realproc


def _serve(db: Path, port: int) -> subprocess.Popen[bytes]:
    return spawn_server(db, port, TOKEN, "--default-cluster", "pod-0")


def _clusters(port: int) -> list[dict]:
    r = httpx.get(f"http://127.0.0.1:{port}/v1/clusters", headers={"Authorization": f"Bearer {TOKEN}"})
    r.raise_for_status()
    return r.json()["clusters"]


def test_default_pod_is_created_once(tmp_path: Path) -> None:
    db = tmp_path / "pf.db"
    for _ in range(2):
        port = free_port()
        proc = _serve(db, port)
        try:
            pods = [c for c in _clusters(port) if c["name"] == "pod-0"]
            assert len(pods) == 1 and pods[0]["type"] == "trn2-ultraserver"
            hw = httpx.get(f"http://127.0.0.1:{port}/v1/clusters/pod-0/hardware",
                           headers={"Authorization": f"Bearer {TOKEN}"}).json()
            assert len(hw["chips"]) == 64 and len(hw["links"]) == 192
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
