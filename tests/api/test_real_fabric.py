"""Real fabrics through the REST API: a local cluster of worker processes trains real
PyTorch jobs, recovers a killed worker on a spare, and fails bad jobs cleanly.

One control plane (paced timeline, in-memory store) and one ``local`` cluster for the
module; jobs of the ``debug`` preset, a few steps each, run side by side to keep the
file short on two cores.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import serve_in_thread
from podfleet.compose import build
from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.store.memory import MemoryStore

pytestmark = pytest.mark.realproc

TOKEN = "pf_test-admin-token-0123456789abcdef"
# Small and slow enough that a kill lands mid-run: ~30 steps of 0.05 s after start-up.
OPTS = {"seed": 7, "global_batch": 8, "seq_len": 32, "step_delay_s": 0.05}
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class Env:
    def __init__(self, url: str, plane: ControlPlane, store: MemoryStore) -> None:
        self.url, self.plane, self.store = url, plane, store
        self.c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    store = MemoryStore()
    # As `podfleet up` builds it: health must coexist with real fabrics.
    parts = build(store, Timeline(seed=1, speed=1.0), telemetry_interval_s=0.5,
                  workdir=str(tmp_path_factory.mktemp("work")))
    plane = parts.plane
    bootstrap_admin(plane, TOKEN)
    with serve_in_thread(plane, parts=parts) as url:
        e = Env(url, plane, store)
        r = e.c.post("/v1/clusters", json={"name": "loc", "fabric": "local", "chips": 8, "spares": 2})
        assert r.status_code == 201, r.text
        assert r.json()["type"] == "custom" and r.json()["fabric"] == "local"
        wait(e, lambda: e.c.get("/v1/clusters/loc").json()["state"] == "active", 30)
        yield e
        e.c.close()


def wait(e: Env, cond, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s")
        time.sleep(0.1)


def job(e: Env, job_id: str) -> dict:
    return e.c.get(f"/v1/jobs/{job_id}").json()


def ended(e: Env, job_id: str, timeout_s: float = 120.0) -> dict:
    wait(e, lambda: job(e, job_id)["state"] in TERMINAL, timeout_s)
    return job(e, job_id)


def logs(e: Env, job_id: str) -> str:
    return "\n".join(ln["message"] for ln in e.c.get(f"/v1/jobs/{job_id}/logs").json()["lines"])


def submit(e: Env, **body) -> str:
    r = e.c.post("/v1/clusters/loc/jobs", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_deployment_steps_are_visible(env: Env) -> None:
    out = env.c.get("/v1/clusters/loc").json()
    assert [s["state"] for s in out["deployment"]["steps"]] == ["succeeded"] * 4
    assert "worker slots on fabric local" in out["deployment"]["steps"][0]["detail"]


def test_bad_submissions_are_4xx_listing_valid_names(env: Env) -> None:
    r = env.c.post("/v1/clusters/loc/jobs", json={"model": "llama3-8b", "chips": 1})
    assert r.status_code == 422 and r.json()["allowed"] == ["debug", "medium", "small", "tiny"]
    r = env.c.post("/v1/clusters/loc/jobs", json={"model": "debug", "chips": 1, "options": {"batch": 3}})
    assert r.status_code == 400 and "global_batch" in r.json()["detail"]
    r = env.c.post("/v1/clusters/loc/jobs", json={"model": "debug", "chips": 3, "options": {"global_batch": 8}})
    assert r.status_code == 400 and "divisible" in r.json()["detail"]


def test_kill_worker_recovers_on_a_spare_with_the_same_losses(env: Env) -> None:
    spec = {"model": "debug", "chips": 2, "steps": 30, "checkpoint_interval": 10, "options": OPTS}
    plain = submit(env, **spec)
    killed = submit(env, **spec)
    wait(env, lambda: job(env, killed)["state"] == "RUNNING" and job(env, killed)["progress"]["step"] >= 5
         and job(env, plain)["state"] == "RUNNING")

    # Two jobs run: the job must be named; ranks and jobs are checked with the valid ones.
    r = env.c.post("/v1/clusters/loc/faults", json={"kind": "kill-worker", "rank": 1})
    assert r.status_code == 422 and set(r.json()["allowed"]) == {plain, killed}
    r = env.c.post("/v1/clusters/loc/faults", json={"kind": "kill-worker", "rank": 2, "job_id": killed})
    assert r.status_code == 404 and "0-1" in r.json()["detail"]
    r = env.c.post("/v1/clusters/loc/faults", json={"kind": "kill-worker", "rank": 0, "job_id": "job-nope"})
    assert r.status_code == 404 and killed in r.json()["detail"]
    old_chips = job(env, killed)["allocation"]["chips"]
    spares_before = env.c.get("/v1/clusters/loc").json()["spares"]
    pid = env.plane.clusters[job(env, killed)["cluster_id"]].fabric.pids(killed)[1]
    r = env.c.post("/v1/clusters/loc/faults", json={"kind": "kill-worker", "rank": 1, "job_id": killed})
    assert r.status_code == 202, r.text
    assert r.json()["pid"] == pid

    a, b = ended(env, plain), ended(env, killed)
    assert a["state"] == b["state"] == "SUCCEEDED", (a["reason"], b["reason"])
    assert a["progress"]["step"] == b["progress"]["step"] == 30
    assert a["progress"]["tokens_per_s"] > 0
    # Bitwise: the replica holds the exact state, batches are a function of (seed, step).
    assert b["progress"]["loss"] == a["progress"]["loss"]
    assert "RECOVERING" in b["timestamps"] and "RECOVERING" not in a["timestamps"]
    assert b["runtime"]["infra_failures"] == 1 and b["runtime"]["user_failures"] == 0
    assert b["runtime"]["recoveries"][0]["source"] in ("replica", "checkpoint")
    spares = env.c.get("/v1/clusters/loc").json()["spares"]
    new_chips = b["allocation"]["chips"]
    # The rank moved onto a spare; a spare that takes a rank is no longer one (issue 15).
    assert new_chips[0] == old_chips[0] and new_chips[1] != old_chips[1] and new_chips[1] in spares_before
    assert new_chips[1] not in spares
    text = logs(env, killed)
    assert "fault injected: kill-worker: rank 1" in text and "RECOVERING" in text
    assert "startup: torch ready" in text  # the workers' own log lines
    hw = env.c.get("/v1/clusters/loc/hardware").json()
    # A killed worker is no chip fault: its slot stays in service and refills the spares.
    assert hw["chips"][old_chips[1]]["state"] == "healthy"
    assert len(spares) == len(spares_before)
    assert b["runtime"]["recoveries"][0]["mechanism"] == "rank-move"
    # Checkpoints are recorded in the store (a restarted control plane resumes from them).
    steps = [ck.step for ck in [env.store.latest_checkpoint(plain)] if ck]
    assert steps == [30]
    audit = env.c.get("/v1/audit").json()["events"]
    faults = [ev for ev in audit if ev["action"] == "InjectFault"]
    assert faults[-1]["result"] == "ok" and faults[-1]["detail"] == {"kind": "kill-worker", "rank": 1, "job_id": killed}
    assert [ev["result"] for ev in faults[:-1]] == ["error:infeasible", "error:not-found", "error:not-found"]


def test_bad_jobs_fail_with_their_cause_and_the_plane_stays_healthy(env: Env, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODFLEET_CODE_DIRS", str(tmp_path))  # an admin allowed scripts from here
    crash = tmp_path / "crash.py"
    crash.write_text("raise RuntimeError('boom at import')\n")
    blocker = tmp_path / "a-file"  # a directory below a file: not creatable, even as root
    blocker.write_text("")
    missing = submit(env, entrypoint=str(tmp_path / "nope.py"), chips=1, steps=3)
    crashing = submit(env, entrypoint=str(crash), chips=1, steps=3, max_retries=1)
    unwritable = submit(env, model="debug", chips=1, steps=3, checkpoint_interval=1,
                        options={**OPTS, "checkpoint_dir": str(blocker / "ck")})
    m, c, u = ended(env, missing), ended(env, crashing), ended(env, unwritable)
    assert m["state"] == "FAILED" and "nope.py" in m["reason"] and "nope.py" in logs(env, missing)
    assert c["state"] == "FAILED" and "boom at import" in c["reason"]
    assert "max_retries=1" in c["reason"] and c["runtime"]["user_failures"] == 2
    assert "boom at import" in logs(env, crashing)
    assert u["state"] == "FAILED" and "a-file" in u["reason"] and "bad input" in u["reason"]
    assert env.c.get("/healthz").status_code == 200
    assert env.c.get("/v1/clusters/loc").json()["state"] == "active"


def test_kill_worker_on_the_twin_is_refused(env: Env) -> None:
    r = env.c.post("/v1/clusters", json={"name": "twin", "type": "custom", "chips": 4, "fabric": "sim"})
    assert r.status_code == 201
    r = env.c.post("/v1/clusters/twin/faults", json={"kind": "kill-worker", "rank": 0})
    assert r.status_code == 422 and "needs a cluster of worker processes" in r.json()["detail"]
    r = env.c.post("/v1/clusters/loc/faults", json={"kind": "chip-failure", "chip": 0})
    assert r.status_code == 422 and r.json()["allowed"] == ["kill-worker", "slow-worker"]
    r = env.c.post("/v1/clusters/twin/jobs", json={"model": "debug", "chips": 1, "options": {"seed": 1}})
    assert r.status_code == 422 and r.json()["field"] == "options"


def test_stop_and_delete_kill_the_workers(env: Env) -> None:
    running = submit(env, model="debug", chips=2, steps=1000, checkpoint_interval=0, options=OPTS)
    wait(env, lambda: job(env, running)["progress"]["step"] >= 2)
    fab = env.plane.clusters[job(env, running)["cluster_id"]].fabric
    pids = list(fab.pids(running).values())
    assert env.c.post(f"/v1/jobs/{running}/stop").json()["state"] == "STOPPED"
    wait(env, lambda: not any(_alive(p) for p in pids), 10)
    # The stopped job's slots are free at once: the next job may start on them.
    second = submit(env, model="debug", chips=2, steps=1000, checkpoint_interval=0, options=OPTS)
    assert job(env, second)["allocation"]["chips"] == job(env, running)["allocation"]["chips"]
    wait(env, lambda: job(env, second)["progress"]["step"] >= 1, 60)
    pids = list(fab.pids(second).values())
    assert env.c.delete("/v1/clusters/loc").status_code == 200
    assert job(env, second)["state"] == "STOPPED"
    wait(env, lambda: not any(_alive(p) for p in pids), 10)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
