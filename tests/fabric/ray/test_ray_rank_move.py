"""Rank moves on a real two-node Ray cluster (fabric/ray/rankmove.py): a head (2 CPUs) and a
second raylet (1 CPU) started with ``ray start`` on this machine, driven by the control
plane as users run it. The process of one rank's actor is killed with SIGKILL (as the OOM
killer or a crash would), and:

* with a spare on the second raylet, rank 1 moves there;
* with no spare, rank 0 (the rendezvous host) comes back on its own chip;
* with a warm standby actor on the node (``PODFLEET_RAY_WARM_ACTORS``), the standby takes
  the rank;

each time the other rank's actor keeps its process (same pid), the job is RECOVERING and
then RUNNING again, the recovery record says ``mechanism: rank-move`` (no relaunch), and
the loss goes on from where it was: the step is not reset and the loss does not jump back
to a fresh model's.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.realproc]
pytest.importorskip("ray")

from tests.fabric.ray.clusters import built_on, two_raylets  # noqa: E402

JOB = {"model": "debug", "chips": 2, "steps": 100_000, "checkpoint_interval": 0,
       "options": {"seed": 5, "global_batch": 4, "seq_len": 32, "step_delay_s": 0.1}}


def _until(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := cond()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.2)
    return got


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with two_raylets(tmp_path_factory.mktemp("raymove")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def plane(ray_cluster: dict[str, Any]) -> Iterator[Any]:
    with built_on(ray_cluster) as built:
        yield built.plane


def _kill_and_move(plane: Any, cluster: str, rank: int) -> dict[str, Any]:
    """Run the job, SIGKILL rank ``rank``'s actor process mid-run, wait for the recovery."""
    job = plane.call_sync(plane.jobs.submit, cluster, JOB, actor="t")
    jid, cid = job["id"], job["cluster_id"]
    fab = plane.clusters[cid].fabric  # read only: the ranks' pids and the fabric's events
    losses: dict[int, float] = {}
    fab.subscribe(lambda ev: losses.__setitem__(int(ev.detail["step"]), float(ev.detail["loss"]))
                  if ev.kind == "progress" and ev.job_id == jid else None)

    def view() -> dict[str, Any]:
        v = dict(plane.jobs.describe(jid))
        assert v["state"] not in ("FAILED", "STOPPED", "SUCCEEDED"), f"{v['state']}: {v.get('reason')}"
        return v

    _until(lambda: view()["state"] == "RUNNING" and int(view()["progress"]["step"] or 0) >= 12, 240,
           "twelve steps")
    pids = {r["rank"]: r["pid"] for r in fab.job_status(jid)["ranks"]}
    os.kill(int(pids[rank]), signal.SIGKILL)
    killed_at = max(losses)
    _until(lambda: view()["state"] == "RECOVERING" or (view().get("runtime") or {}).get("recoveries"), 60,
           "RECOVERING")
    [rec] = _until(lambda: (view().get("runtime") or {}).get("recoveries"), 180, "the recovery")
    done = _until(lambda: view() if view()["state"] == "RUNNING" else None, 60, "RUNNING again")
    after = {r["rank"]: r["pid"] for r in fab.job_status(jid)["ranks"]}
    _until(lambda: max(losses) >= int(rec["restored_step"]) + 5, 120, "five steps after the move")
    lines = "\n".join(ln["message"] for ln in plane.jobs.job_logs(jid).since(0))
    plane.call_sync(plane.jobs.stop, jid, actor="t")
    return {"rec": rec, "job": done, "before": pids, "after": after, "losses": dict(losses),
            "killed_at": killed_at, "log": lines}


def _assert_moved(out: dict[str, Any], rank: int) -> None:
    rec, losses = out["rec"], out["losses"]
    other = 1 - rank
    assert out["after"][other] == out["before"][other], "the surviving rank's process was replaced"
    assert out["after"][rank] != out["before"][rank]
    assert rec["mechanism"] == "rank-move" and rec["state"] == "done" and rec["rank"] == rank, rec
    assert rec["source"] == "replica" and rec["steps_lost"] <= 1 and rec["resume_s"] > 0
    assert "RECOVERING" in out["job"]["timestamps"]
    assert "relaunch" not in (rec.get("path") or "")
    restored = int(rec["restored_step"])
    assert restored >= out["killed_at"] - 1  # the step is not reset to a checkpoint or to 0
    # Loss continuous: the steps after the move train on from the survivor's state, so their
    # loss stays near the loss before the kill, far below a fresh model's (step 1).
    before = [losses[s] for s in range(restored - 4, restored + 1) if s in losses]
    after = [losses[s] for s in range(restored + 1, restored + 4) if s in losses]
    assert before and after, sorted(losses)
    fresh = losses[min(losses)]
    assert max(after) < fresh - 0.5 * (fresh - min(before)), (fresh, before, after)
    assert "rank move generation 1 done" in out["log"]


def test_a_killed_rank_moves_to_the_spare_on_the_other_raylet(plane: Any, ray_cluster: dict[str, Any]) -> None:
    plane.call_sync(plane.create_cluster, {"name": "mv-spare", "fabric": "ray", "chips": 3, "spares": 1,
                                           "spare_chips": [2], "ray_address": ray_cluster["address"]}, actor="t")
    try:
        _until(lambda: plane.describe_cluster("mv-spare")["state"] == "active", 60, "the cluster")
        out = _kill_and_move(plane, "mv-spare", rank=1)
        _assert_moved(out, 1)
        assert out["rec"]["path"] == "spare" and out["rec"]["moves"] == {"1": [1, 2]}
        assert out["job"]["allocation"]["chips"] == [0, 2]
        assert f"rank 1 on chip 2: node {ray_cluster['raylet'][:12]}" in out["log"]
    finally:
        plane.call_sync(plane.delete_cluster, "mv-spare", actor="t")


def test_a_killed_rank_0_comes_back_on_its_own_chip_without_a_spare(plane: Any, ray_cluster: dict[str, Any]) -> None:
    plane.call_sync(plane.create_cluster, {"name": "mv-own", "fabric": "ray", "chips": 2, "spares": 0,
                                           "ray_address": ray_cluster["address"]}, actor="t")
    try:
        _until(lambda: plane.describe_cluster("mv-own")["state"] == "active", 60, "the cluster")
        out = _kill_and_move(plane, "mv-own", rank=0)
        _assert_moved(out, 0)
        assert out["rec"]["path"] == "own-chip" and out["job"]["allocation"]["chips"] == [0, 1]
    finally:
        plane.call_sync(plane.delete_cluster, "mv-own", actor="t")


def test_a_warm_standby_takes_the_killed_rank(plane: Any, ray_cluster: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``PODFLEET_RAY_WARM_ACTORS=1``: each node keeps a standby actor with torch imported;
    the move takes the one on the rank's node instead of starting a cold actor, and the
    poller starts a new one. (The tests' workers run in their actors' processes: the
    single-user opt-in, tests/conftest.py.)"""
    from podfleet.fabric.ray.standby import WARM_ENV

    monkeypatch.setenv(WARM_ENV, "1")  # read when the cluster's fabric is built
    view = plane.call_sync(plane.create_cluster, {"name": "mv-warm", "fabric": "ray", "chips": 2, "spares": 0,
                                                  "ray_address": ray_cluster["address"]}, actor="t")
    try:
        _until(lambda: plane.describe_cluster("mv-warm")["state"] == "active", 60, "the cluster")
        fab = plane.clusters[view["id"]].fabric
        _until(lambda: fab.warm_ready() >= 1, 240, "a warm standby on the head (both chips are there)")
        out = _kill_and_move(plane, "mv-warm", rank=1)
        _assert_moved(out, 1)
        [job] = [j for j in fab.state.jobs.values() if j.job_id == out["rec"]["job_id"]]
        assert job.ranks[1].info["standby"] is True and job.ranks[1].name.startswith("standby/")
        assert out["rec"]["path"] == "own-chip"
        _until(lambda: fab.warm_ready() >= 1, 240, "the standby replaced")
    finally:
        plane.call_sync(plane.delete_cluster, "mv-warm", actor="t")
    assert not fab.state.standby_names  # closed with its cluster: no standby left on Ray
