"""kill -9 of a real ``podfleet up`` under load: every acknowledged write survives the
restart, running jobs are resumed (not lost), and retries of unacknowledged requests
with their client_token create each object exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from podfleet.api.testing import free_port, spawn_server

TOKEN = "pf_durability-test-token-0123456789"
pytestmark = pytest.mark.realproc


def start(db: Path, port: int) -> subprocess.Popen[bytes]:
    return spawn_server(db, port, TOKEN, "--speed", "20", log=db.parent / "server.log", timeout_s=30)


def test_kill9_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db, port = tmp_path / "pf.db", free_port()
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    proc = start(db, port)
    acked_jobs: dict[str, str] = {}  # client_token -> job id
    acked_clusters: dict[str, str] = {}
    tried: list[tuple[str, str, dict]] = []  # (path, client_token, body)
    lock = threading.Lock()
    stop = threading.Event()
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=10) as c:
            r = c.post("/v1/clusters", json={"name": "pod", "spares": 2, "client_token": "pod"})
            assert r.status_code == 201, (r.text, (tmp_path / "server.log").read_text()[-3000:])
            acked_clusters["pod"] = r.json()["id"]
            while c.get("/v1/clusters/pod").json()["state"] != "active":
                time.sleep(0.05)
            running = c.post("/v1/clusters/pod/jobs", json={
                "model": "debug", "chips": 16, "steps": 10**7, "checkpoint_interval": 1000,
                "client_token": "long"}).json()
            acked_jobs["long"] = running["id"]
            assert running["state"] == "RUNNING"

        def load(worker: int) -> None:
            with httpx.Client(base_url=url, headers=headers, timeout=10) as c:
                i = 0
                while not stop.is_set():
                    i += 1
                    if i % 10 == 0:
                        path, tok = "/v1/clusters", f"c{worker}-{i}"
                        body = {"name": f"c{worker}-{i}", "type": "trn2-node", "client_token": tok}
                        bucket = acked_clusters
                    else:
                        path, tok = "/v1/clusters/pod/jobs", f"j{worker}-{i}"
                        body = {"model": "debug", "chips": 1, "steps": 10**6, "client_token": tok}
                        bucket = acked_jobs
                    with lock:
                        tried.append((path, tok, body))
                    try:
                        r = c.post(path, json=body)
                    except httpx.HTTPError:
                        return  # the server died mid-request: not acknowledged
                    if r.status_code == 201:
                        with lock:
                            bucket[tok] = r.json()["id"]

        threads = [threading.Thread(target=load, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        time.sleep(2.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        stop.set()
        for t in threads:
            t.join(timeout=15)
        assert len(acked_jobs) > 10, "the load never got going"

        proc = start(db, port)
        with httpx.Client(base_url=url, headers=headers, timeout=10) as c:
            for tok, job_id in acked_jobs.items():
                r = c.get(f"/v1/jobs/{job_id}")
                assert r.status_code == 200, (tok, job_id, r.text)
            for tok, cl_id in acked_clusters.items():
                assert c.get(f"/v1/clusters/{cl_id}").status_code == 200, tok
            long = c.get(f"/v1/jobs/{acked_jobs['long']}").json()
            assert long["state"] in ("RUNNING", "RECOVERING")
            assert "RECOVERING" in long["timestamps"]  # reconciled, not silently continued
            # Retrying every request (acknowledged or not) with its client_token never duplicates.
            for path, tok, body in tried:
                r = c.post(path, json=body)
                assert r.status_code == 201, r.text
                if tok in acked_jobs:
                    assert r.json()["id"] == acked_jobs[tok]
                if tok in acked_clusters:
                    assert r.json()["id"] == acked_clusters[tok]
            jobs = c.get("/v1/jobs", params={"max_results": 1000}).json()["jobs"]
            assert len(jobs) == len({tok for p, tok, _ in tried if "jobs" in p}) + 1
            assert c.get("/v1/audit/verify").json()["ok"] is True
    finally:
        stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


def _up_json(db: Path, port: int) -> tuple[subprocess.Popen[bytes], dict]:
    env = {k: v for k, v in os.environ.items() if k != "PODFLEET_ADMIN_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "podfleet", "up", "--db", f"sqlite:///{db}", "--port", str(port), "-o", "json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    text = b""
    while not text.rstrip().endswith(b"}"):
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("podfleet up exited before printing its JSON")
        text += line
    return proc, json.loads(text)


def test_up_prints_the_admin_token_once(tmp_path: Path) -> None:
    db, port = tmp_path / "pf.db", free_port()
    proc, info = _up_json(db, port)
    try:
        token = info["admin_token"]
        assert token and token.startswith("pf_") and info["url"] == f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"{info['url']}/v1/clusters", headers={"Authorization": f"Bearer {token}"})
                if r.status_code != 503:  # 503 starting: listening, the engine still reloading
                    break
                time.sleep(0.1)
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert r.status_code == 200
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    proc, again = _up_json(db, port)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert again["admin_token"] is None
