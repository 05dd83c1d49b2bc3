"""A ``ray`` cluster driven by the control plane, on a private local Ray instance: a
2-rank job trains, a killed actor's rank moves to the spare while the other rank's actor
trains on (an infrastructure failure: no retry used)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.fabric.factory import make_fabric
from podfleet.store.memory import MemoryStore

pytestmark = [pytest.mark.ray, pytest.mark.realproc]
pytest.importorskip("ray")


def _until(cond, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s"
        time.sleep(0.1)


def test_ray_cluster_job_recovers_a_killed_actor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PODFLEET_RAY_ADDRESS", raising=False)
    store = MemoryStore()
    plane = ControlPlane(store, Timeline(seed=1, speed=1.0), fabric_factory=make_fabric, workdir=str(tmp_path))
    plane.start()
    plane.call_timeout_s = 120  # starting a local Ray instance takes a while on two cores
    try:
        view = plane.call_sync(plane.create_cluster, {"name": "rc", "fabric": "ray", "chips": 3, "spares": 1},
                               actor="t")
        assert view["fabric"] == "ray" and view["type"] == "custom"
        _until(lambda: plane.describe_cluster("rc")["state"] == "active", 30)
        job = plane.call_sync(plane.jobs.submit, "rc", {
            "model": "debug", "chips": 2, "steps": 40, "checkpoint_interval": 5,
            "options": {"seed": 5, "global_batch": 4, "seq_len": 32, "step_delay_s": 0.05}}, actor="t")
        jid = job["id"]
        _until(lambda: (store.latest_checkpoint(jid) is not None
                        and plane.jobs.describe(jid)["state"] == "RUNNING"))
        before = plane.jobs.describe(jid)["allocation"]["chips"]
        out = plane.call_sync(plane.inject_fault, "rc", "kill-worker", rank=1, actor="t")
        assert out["job_id"] == jid and out["rank"] == 1
        _until(lambda: plane.jobs.describe(jid)["state"] in ("SUCCEEDED", "FAILED"), 150)
        done = plane.jobs.describe(jid)
        assert done["state"] == "SUCCEEDED", done["reason"]
        assert "RECOVERING" in done["timestamps"]
        assert done["runtime"]["infra_failures"] == 1 and done["runtime"]["user_failures"] == 0
        after = done["allocation"]["chips"]
        assert after[0] == before[0] and after[1] in view["spares"]  # the rank moved to the spare
        text = "\n".join(ln["message"] for ln in plane.jobs.job_logs(jid).since(0))
        # Rank 0's actor kept training: rank 1's replacement took its state (a rank move).
        assert "rank move generation 1 done" in text and done["runtime"]["recoveries"][0]["mechanism"] == "rank-move"
    finally:
        plane.stop()
