"""A twin fleet's pod lost as a whole (``pod-loss``): each job spanning it acts on its
on-pod-loss policy: requeue from its checkpoint, wait for the pod (or another), or shrink
to its other pods with a re-plan (issue 28, item 3)."""

from __future__ import annotations

import pytest

from podfleet.control import ControlPlane
from podfleet.errors import PodfleetError
from podfleet.store.protocol import StoreProtocol
from tests.control.conftest import active_cluster, advance, make_plane


def _job(plane: ControlPlane, cluster: str, **spec: object) -> dict:
    job = plane.jobs.submit(cluster, {"model": "llama3-8b", "steps": 100000, "checkpoint_interval": 5, **spec},
                            actor="test")
    advance(plane, 60)
    return plane.jobs.describe(job["id"])


def _pods(job: dict) -> set[int]:
    return {c // 64 for c in job["allocation"]["chips"]}


def _repair_pod(plane: ControlPlane, cluster: str, pod: int) -> None:
    for c in range(pod * 64, pod * 64 + 64):
        plane.chip_command(cluster, c, "repair", actor="test")


def test_requeue_goes_back_to_the_queue_from_its_checkpoint(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=4, pods_per_block=4)
    job = _job(plane, cl["id"], chips=256)  # every pod: nowhere else to go
    assert job["state"] == "RUNNING" and _pods(job) == {0, 1, 2, 3}, job
    ckpt = job["checkpoint_step"]
    assert ckpt > 0, job
    out = plane.inject_fault(cl["id"], "pod-loss", pod=2, actor="test")
    assert out["jobs"] == {job["id"]: "requeue"} and out["chips"] == 64, out
    after = plane.jobs.describe(job["id"])
    assert after["state"] == "PENDING", after
    # Queued again, with what it waits for; the log says why it went back.
    assert "needs 4 whole pods" in after["reason"], after["reason"]
    log = "\n".join(str(x) for x in plane.jobs.job_logs(job["id"]).since(0))
    assert "pod 2 lost" in log and "requeued, resumes from checkpoint step" in log, log
    assert f"resumes from checkpoint step {ckpt}" in log, log
    assert not any(rt_job == job["id"] for rt_job in plane.resolve(cl["id"]).owners.values())
    advance(plane, 30)
    assert plane.jobs.describe(job["id"])["state"] == "PENDING"  # three pods cannot hold four
    _repair_pod(plane, cl["id"], 2)
    advance(plane, 30)
    back = plane.jobs.describe(job["id"])
    assert back["state"] == "RUNNING" and _pods(back) == {0, 1, 2, 3}, back


def test_wait_keeps_its_pods_and_takes_a_free_pod_elsewhere(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=4, pods_per_block=2)
    job = _job(plane, cl["id"], chips=128, on_pod_loss="wait")
    assert job["state"] == "RUNNING" and _pods(job) in ({0, 1}, {2, 3}), job
    blocker = _job(plane, cl["id"], chips=128)  # the other two pods
    assert blocker["state"] == "RUNNING"
    lost = min(_pods(job))
    kept = max(_pods(job))
    plane.inject_fault(cl["id"], "pod-loss", pod=lost, actor="test")
    advance(plane, 30)
    w = plane.jobs.describe(job["id"])
    assert w["state"] == "RECOVERING", w
    assert f"waiting for pod {lost} to return" in w["reason"], w["reason"]
    owners = plane.resolve(cl["id"]).owners
    assert all(owners.get(c) == job["id"] for c in range(kept * 64, kept * 64 + 64))  # it keeps its other pod
    # Capacity elsewhere: the blocker ends, and the lost pod's ranks move to one of its pods.
    plane.jobs.stop(blocker["id"], actor="test")
    advance(plane, 30)
    moved = plane.jobs.describe(job["id"])
    assert moved["state"] == "RUNNING", moved
    assert lost not in _pods(moved) and kept in _pods(moved) and len(_pods(moved)) == 2, moved["allocation"]
    chips = moved["allocation"]["chips"]
    assert [c % 64 for c in chips] == [c % 64 for c in job["allocation"]["chips"]]  # same block, same order


def test_wait_resumes_when_the_pod_returns(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=2, pods_per_block=2)
    job = _job(plane, cl["id"], chips=128, on_pod_loss="wait")
    plane.inject_fault(cl["id"], "pod-loss", pod=1, actor="test")
    advance(plane, 30)
    assert plane.jobs.describe(job["id"])["state"] == "RECOVERING"
    _repair_pod(plane, cl["id"], 1)
    advance(plane, 30)
    back = plane.jobs.describe(job["id"])
    assert back["state"] == "RUNNING" and back["allocation"]["chips"] == job["allocation"]["chips"], back


def test_wait_survives_a_control_plane_restart(store: StoreProtocol) -> None:
    # The wait is persisted with the job: a restarted plane still waits for that pod (same
    # reason, same kept pod), rather than moving the lost ranks chip by chip, and resumes
    # on the same chips when the pod is repaired.
    p1 = make_plane(store)
    cl = active_cluster(p1, "fleet", pods=4, pods_per_block=2)
    job = _job(p1, cl["id"], chips=128, on_pod_loss="wait")
    blocker = _job(p1, cl["id"], chips=128)  # the other two pods: nowhere else to go
    assert job["state"] == blocker["state"] == "RUNNING"
    lost, kept = min(_pods(job)), max(_pods(job))
    p1.inject_fault(cl["id"], "pod-loss", pod=lost, actor="test")
    advance(p1, 30)
    before = p1.jobs.describe(job["id"])
    assert before["state"] == "RECOVERING" and f"waiting for pod {lost} to return" in before["reason"], before
    p2 = make_plane(store, seed=1)  # "crash": a new plane on the same store
    p2.load()
    advance(p2, 60)
    after = p2.jobs.describe(job["id"])
    assert after["state"] == "RECOVERING", after
    assert after["reason"] == before["reason"], after["reason"]
    owners = p2.resolve(cl["id"]).owners
    kept_chips = range(kept * 64, kept * 64 + 64)
    assert all(owners.get(c) == job["id"] for c in kept_chips)  # it keeps its other pod
    assert not any(owners.get(c) == job["id"] for c in range(lost * 64, lost * 64 + 64))
    assert p2.jobs.describe(blocker["id"])["state"] == "RUNNING"
    _repair_pod(p2, cl["id"], lost)
    advance(p2, 30)
    back = p2.jobs.describe(job["id"])
    assert back["state"] == "RUNNING" and back["allocation"]["chips"] == job["allocation"]["chips"], back
    log = "\n".join(str(x) for x in p2.jobs.job_logs(job["id"]).since(0))
    assert f"on-pod-loss wait: pod {lost} is back" in log, log


def test_shrink_goes_on_on_its_other_pods_re_planned(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=4, pods_per_block=4)
    job = _job(plane, cl["id"], chips=256, on_pod_loss="shrink")
    assert job["state"] == "RUNNING", job
    live = plane.resolve(cl["id"]).fabric.run_status(job["id"])
    assert live is not None and live.step > job["checkpoint_step"], (live, job["checkpoint_step"])
    out = plane.inject_fault(cl["id"], "pod-loss", pod=1, actor="test")
    assert out["jobs"] == {job["id"]: "shrink"}, out
    after = plane.jobs.describe(job["id"])
    assert after["state"] == "RUNNING", after
    assert _pods(after) == {0, 2, 3} and len(after["allocation"]["chips"]) == 192, after["allocation"]
    plan = after["plan"]
    assert plan["tp"] * plan["pp"] * plan["dp"] == 192, plan
    assert "shrunk to 192 chips on 3 pods" in after["reason"], after["reason"]
    # Its state comes from a replica that lost no rank (no ZeRO sharding), else the checkpoint.
    if job["plan"]["dp"] >= 2 and not job["plan"].get("zero_stage"):
        assert after["progress"]["step"] == live.step and "a data-parallel replica" in after["reason"], after
    else:
        assert after["progress"]["step"] == job["checkpoint_step"] and "its checkpoint" in after["reason"], after
    advance(plane, 60)
    later = plane.jobs.describe(job["id"])
    assert later["state"] == "RUNNING" and later["progress"]["step"] > after["progress"]["step"], later


def test_shrink_with_fixed_degrees_is_requeued_and_says_why(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=2, pods_per_block=2)
    job = _job(plane, cl["id"], chips=128, on_pod_loss="shrink", parallelism={"tp": 4, "pp": 1, "dp": 32})
    assert job["state"] == "RUNNING", job
    plane.inject_fault(cl["id"], "pod-loss", pod=0, actor="test")
    after = plane.jobs.describe(job["id"])
    assert after["state"] == "PENDING", after
    log = "\n".join(str(x) for x in plane.jobs.job_logs(job["id"]).since(0))
    assert "cannot shrink" in log and "parallelism auto" in log, log


def test_bad_input(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=2, pods_per_block=2)
    with pytest.raises(PodfleetError, match="on_pod_loss must be one of wait, requeue, shrink"):
        plane.jobs.submit(cl["id"], {"model": "llama3-8b", "chips": 64, "on_pod_loss": "migrate"}, actor="test")
    with pytest.raises(PodfleetError, match="pod must be 0-1"):
        plane.inject_fault(cl["id"], "pod-loss", pod=5, actor="test")
    with pytest.raises(PodfleetError, match="pod-loss takes pod, not chip"):
        plane.inject_fault(cl["id"], "pod-loss", pod=0, chip=3, actor="test")
    with pytest.raises(PodfleetError, match="chip-failure takes chip, not pod"):
        plane.inject_fault(cl["id"], "chip-failure", chip=3, pod=0, actor="test")
    one = active_cluster(plane, "one-pod")
    with pytest.raises(PodfleetError, match="needs a fleet cluster"):
        plane.inject_fault(one["id"], "pod-loss", pod=0, actor="test")
    plane.inject_fault(cl["id"], "pod-loss", pod=0, actor="test")
    with pytest.raises(PodfleetError, match="down already"):
        plane.inject_fault(cl["id"], "pod-loss", pod=0, actor="test")
