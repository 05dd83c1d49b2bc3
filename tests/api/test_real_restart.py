"""A control-plane restart with a real job running: the new control plane reloads the job
from the store (SQLite) and resumes it from its last committed checkpoint."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.fabric.factory import make_fabric
from podfleet.store import open_store

pytestmark = pytest.mark.realproc


def _until(cond, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s"
        time.sleep(0.1)


def test_restart_resumes_a_local_job_from_its_checkpoint(tmp_path: Path) -> None:
    db, work = f"sqlite:///{tmp_path / 'pf.db'}", str(tmp_path / "work")
    store = open_store(db)
    p1 = ControlPlane(store, Timeline(seed=1, speed=1.0), fabric_factory=make_fabric, workdir=work)
    p1.start()
    try:
        p1.call_sync(p1.create_cluster, {"name": "loc", "fabric": "local", "chips": 2}, actor="t")
        _until(lambda: p1.describe_cluster("loc")["state"] == "active", 30)
        job = p1.call_sync(p1.jobs.submit, "loc", {
            "model": "debug", "chips": 1, "steps": 200, "checkpoint_interval": 5,
            "options": {"seed": 3, "global_batch": 4, "seq_len": 32, "step_delay_s": 0.02}}, actor="t")
        _until(lambda: (store.latest_checkpoint(job["id"]) or _Step(0)).step >= 10)
        pids = list(p1.clusters[job["cluster_id"]].fabric.pids(job["id"]).values())
    finally:
        p1.stop()  # a server shutdown: the workers are killed
    _until(lambda: not any(_alive(p) for p in pids), 10)
    saved = store.latest_checkpoint(job["id"]).step
    store.close()

    store = open_store(db)
    p2 = ControlPlane(store, Timeline(seed=2, speed=1.0), fabric_factory=make_fabric, workdir=work)
    p2.start()
    try:
        assert p2.jobs.describe(job["id"])["state"] in ("RECOVERING", "RUNNING")
        _until(lambda: p2.jobs.describe(job["id"])["state"] in ("SUCCEEDED", "FAILED"), 120)
        out = p2.jobs.describe(job["id"])
        assert out["state"] == "SUCCEEDED", out["reason"]
        text = "\n".join(ln["message"] for ln in p2.jobs.job_logs(job["id"]).since(0))
        assert "control plane restarted" in text
        assert "no running gang to re-attach to" in text  # why it resumed instead (no agent held it)
        restored = [int(m) for m in re.findall(r"restored step (\d+)", text)]
        assert restored and restored[0] >= saved  # resumed from the checkpoint, not from scratch
        assert out["progress"]["step"] == 200
    finally:
        p2.stop()
        store.close()


def test_restart_with_an_agent_keeps_the_job_running(tmp_path: Path) -> None:
    """With the host's agent owning the workers, a restarted plane adopts the running gang:
    the same pids, the job RUNNING throughout, its step carried on, nothing restored."""
    from podfleet.fabric.factory import with_agent
    from podfleet.fabric.local.agent.client import stop_agent
    from podfleet.fabric.local.agent.protocol import agent_dir

    db, work = f"sqlite:///{tmp_path / 'pf.db'}", tmp_path / "work"
    factory = with_agent(work)
    store = open_store(db)
    p1 = ControlPlane(store, Timeline(seed=1, speed=1.0), fabric_factory=factory, workdir=str(work))
    p1.start()
    try:
        try:
            p1.call_sync(p1.create_cluster, {"name": "loc", "fabric": "local", "chips": 2}, actor="t")
            _until(lambda: p1.describe_cluster("loc")["state"] == "active", 30)
            job = p1.call_sync(p1.jobs.submit, "loc", {
                "model": "debug", "chips": 2, "steps": 100_000, "checkpoint_interval": 10,
                "options": {"step_delay_s": 0.05}}, actor="t")
            _until(lambda: p1.jobs.describe(job["id"])["progress"]["step"] >= 5, 120)
            fab = p1.clusters[job["cluster_id"]].fabric
            pids = fab.pids(job["id"])
        finally:
            p1.stop()  # the plane goes; the agent keeps the workers
        at_stop = p1.jobs.describe(job["id"])["progress"]["step"]
        store.close()
        time.sleep(0.5)
        assert all(_alive(p) for p in pids.values())

        store = open_store(db)
        p2 = ControlPlane(store, Timeline(seed=2, speed=1.0), fabric_factory=factory, workdir=str(work))
        p2.start()
        try:
            assert p2.jobs.describe(job["id"])["state"] == "RUNNING"
            _until(lambda: p2.jobs.describe(job["id"])["progress"]["step"] > at_stop + 3, 60)
            assert p2.clusters[job["cluster_id"]].fabric.pids(job["id"]) == pids
            text = "\n".join(ln["message"] for ln in p2.jobs.job_logs(job["id"]).since(0))
            assert "re-attached after a control-plane restart" in text and "restored step" not in text
            p2.call_sync(p2.jobs.stop, job["id"], actor="t")
            _until(lambda: not any(_alive(p) for p in pids.values()), 30)
        finally:
            p2.stop()
            store.close()
    finally:
        stop_agent(agent_dir(work))


class _Step:
    def __init__(self, step: int) -> None:
        self.step = step


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
