"""Health, balancing and diagnosis on a local cluster of real worker processes, through the
REST API (issue 26 items 3, 5, 6): the local fabric's telemetry feeds the health scan, a
hung worker (SIGSTOP) raises an alert and is recovered, a worker slowed by the
``slow-worker`` fault is found by the balancer from measured samples/s and given less
work, and diagnosis names each from the fault log and telemetry.

One control plane (paced timeline, in-memory store) and one 8-slot ``local`` cluster with
a spare for the module; small ``debug`` jobs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import serve_in_thread
from podfleet.compose import build
from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.health.scan import HealthConfig
from podfleet.store.memory import MemoryStore

pytestmark = pytest.mark.realproc

TOKEN = "pf_test-admin-token-0123456789abcdef"
OPTS = {"seed": 3, "global_batch": 24, "seq_len": 16, "step_delay_s": 0.05, "encrypt_checkpoints": False}


class Env:
    def __init__(self, url: str, plane: ControlPlane) -> None:
        self.url, self.plane = url, plane
        self.c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)

    def job(self, job_id: str) -> dict[str, Any]:
        return self.c.get(f"/v1/jobs/{job_id}").json()

    def submit(self, chips: int, steps: int = 100_000) -> str:
        r = self.c.post("/v1/clusters/loc/jobs", json={"model": "debug", "chips": chips, "steps": steps,
                                                        "checkpoint_interval": 10, "options": OPTS})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def stop(self, job_id: str) -> None:
        self.c.post(f"/v1/jobs/{job_id}/stop")
        wait(lambda: self.job(job_id)["state"] in ("STOPPED", "FAILED", "SUCCEEDED"), 60)

    def pids(self, job_id: str) -> dict[int, int]:
        workers = self.c.get("/v1/clusters/loc/hardware").json()["chips"]
        return {int(w["worker"]["rank"]): int(w["worker"]["pid"]) for w in workers
                if w.get("worker") and w["worker"].get("job_id") == job_id}

    def findings(self) -> list[dict[str, Any]]:
        r = self.c.get("/v1/clusters/loc/diagnosis")
        assert r.status_code == 200, r.text
        return list(r.json()["findings"])


def wait(cond: Callable[[], Any], timeout_s: float = 90.0, show: Callable[[], Any] = lambda: "") -> None:
    """Until ``cond()``; on a timeout the error says what ``show()`` returns then."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s: {show()}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    parts = build(MemoryStore(), Timeline(seed=1, speed=1.0), telemetry_interval_s=0.5, balance_interval_s=0.5,
                  health_config=HealthConfig(interval_s=0.5), workdir=str(tmp_path_factory.mktemp("work")))
    bootstrap_admin(parts.plane, TOKEN)
    with serve_in_thread(parts.plane, parts=parts) as url:
        e = Env(url, parts.plane)
        r = e.c.post("/v1/clusters", json={"name": "loc", "fabric": "local", "chips": 8, "spares": 1})
        assert r.status_code == 201, r.text
        wait(lambda: e.c.get("/v1/clusters/loc").json()["state"] == "active", 30)
        yield e
        e.c.close()


def running_at(e: Env, job_id: str, step: int) -> bool:
    j = e.job(job_id)
    return j["state"] == "RUNNING" and int(j["progress"].get("step", 0)) >= step


def test_health_scans_run_on_what_the_workers_measure(env: Env) -> None:
    jid = env.submit(2, steps=40)
    wait(lambda: running_at(env, jid, 5))
    chip = int(env.job(jid)["allocation"]["chips"][0])

    def memory_seen() -> bool:
        got = env.c.get("/v1/clusters/loc/telemetry", params={"metric": "hbm_used_bytes", "target": chip}).json()
        return max([v for v in got["max"] if v is not None] or [0.0]) > 1e6  # a torch worker's RSS

    wait(memory_seen)
    # Unmeasured metrics (temperature, ECC, throttling) raise nothing on worker slots.
    alerts = env.c.get("/v1/clusters/loc/alerts").json()["alerts"]
    assert not [a for a in alerts if a["rule"] in ("thermal-throttle", "ecc-uncorrected")], alerts
    env.stop(jid)


def test_a_slowed_worker_is_rebalanced_by_the_balancer_and_diagnosed(env: Env) -> None:
    jid = env.submit(3)
    wait(lambda: running_at(env, jid, 5))
    r = env.c.post("/v1/clusters/loc/faults", json={"kind": "slow-worker", "rank": 1, "factor": 4, "job_id": jid})
    assert r.status_code == 202, r.text
    chips = [int(c) for c in env.job(jid)["allocation"]["chips"]]

    def rebalanced() -> bool:
        split = env.job(jid)["scheduling"].get("work_split") or {}
        shares = split.get("shares") or []
        return bool(split.get("applied")) and len(shares) == 3 and shares[1] < min(shares[0], shares[2])

    wait(rebalanced, 120)
    assert "rebalance (move-microbatches): rank 1" in "\n".join(
        ln["message"] for ln in env.c.get(f"/v1/jobs/{jid}/logs").json()["lines"])
    slow = [f for f in env.findings() if f["kind"] == "worker-slow"]
    assert [f["chips"] for f in slow] == [[chips[1]]], env.findings()
    # Bad input is a one-line 4xx naming the problem.
    r = env.c.post("/v1/clusters/loc/faults", json={"kind": "slow-worker", "rank": 1, "job_id": jid})
    assert r.status_code == 422 and "factor" in r.json()["detail"]
    env.stop(jid)


def test_a_hung_worker_raises_an_alert_is_recovered_and_diagnosed(env: Env) -> None:
    jid = env.submit(2)
    wait(lambda: running_at(env, jid, 5))
    pid = env.pids(jid)[1]
    chip = int(env.job(jid)["allocation"]["chips"][1])
    os.kill(pid, signal.SIGSTOP)  # a hung worker: alive, silent
    try:
        wait(lambda: any(a["rule"] == "worker-hung" and a["target"] == f"chip:{chip}"
                         for a in env.c.get("/v1/clusters/loc/alerts").json()["alerts"]))
    finally:
        with_pid_gone_or_continued(pid)
    before = int(env.job(jid)["progress"]["step"])
    wait(lambda: running_at(env, jid, before + 3))  # recovered: it trains again
    hung = [f for f in env.findings() if f["kind"] == "worker-hung"]
    assert [f["chips"] for f in hung] == [[chip]], env.findings()
    assert hung[0]["evidence"]["events"][-1]["observed"] == "hang"
    env.stop(jid)


def with_pid_gone_or_continued(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # killed as hung already: nothing to continue
        os.kill(pid, signal.SIGCONT)


def test_a_worker_killed_from_outside_is_diagnosed_as_killed(env: Env) -> None:
    jid = env.submit(2)
    wait(lambda: running_at(env, jid, 5))
    pid = env.pids(jid)[0]
    chip = int(env.job(jid)["allocation"]["chips"][0])
    os.kill(pid, signal.SIGKILL)
    wait(lambda: any(f["kind"] == "worker-killed" and f["chips"] == [chip] for f in env.findings()))
    f = next(f for f in env.findings() if f["kind"] == "worker-killed")
    assert f["evidence"]["events"][-1]["signal"] == "SIGKILL"
    env.stop(jid)
