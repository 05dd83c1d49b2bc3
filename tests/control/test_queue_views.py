"""The shown reason of pending jobs with a queue: a submit shows its own at once, a cycle
that places or preempts shows everyone's, and the rest catch up within ``SWEEP_S``."""

from __future__ import annotations

from podfleet.control import ControlPlane
from podfleet.control.jobs import SWEEP_S
from tests.control.conftest import active_cluster, advance


def _shown_is_the_schedulers(plane: ControlPlane, cluster_id: str, job_ids: list[str]) -> bool:
    sched = plane.clusters[cluster_id].scheduler
    return all(plane.jobs.describe(j)["reason"] == sched.reason(j)
               for j in job_ids if plane.jobs.describe(j)["state"] == "PENDING")


def test_a_submit_behind_a_queue_shows_its_reason_at_once(plane: ControlPlane) -> None:
    active_cluster(plane, spares=4)
    big = [plane.jobs.submit("pod", {"model": "debug", "chips": 24, "steps": 10**6}, actor="t") for _ in range(2)]
    assert [j["state"] for j in big] == ["RUNNING", "RUNNING"]
    waiting = []
    for _ in range(12):  # one instant: only the first cycle sweeps the whole queue
        j = plane.jobs.submit("pod", {"model": "debug", "chips": 16, "steps": 10**6}, actor="t")
        assert j["state"] == "PENDING" and j["reason"].startswith("Unschedulable: no free ")
        assert j["allocation"] == {"chips": [], "shape": [], "reason": j["reason"]}
        waiting.append(j["id"])
    cid = big[0]["cluster_id"]
    assert _shown_is_the_schedulers(plane, cid, waiting)
    # A cycle that places a job shows every pending job's reason, in the same call.
    plane.jobs.stop(big[0]["id"], actor="t")
    assert plane.jobs.describe(waiting[0])["state"] == "RUNNING"
    assert _shown_is_the_schedulers(plane, cid, waiting)
    advance(plane, SWEEP_S + 0.1)
    assert _shown_is_the_schedulers(plane, cid, waiting)


def test_shown_waits_catch_up_without_a_submit(plane: ControlPlane) -> None:
    active_cluster(plane, spares=4)
    for _ in range(2):
        plane.jobs.submit("pod", {"model": "debug", "chips": 24, "steps": 10**6}, actor="t")
    waiting = [plane.jobs.submit("pod", {"model": "debug", "chips": 16, "steps": 10**6}, actor="t")["id"]
               for _ in range(5)]
    advance(plane, 12)  # past the periodic queue pass (aging): every pending view is re-shown
    for j in waiting:
        view = plane.jobs.describe(j)
        assert view["state"] == "PENDING"
        assert view["scheduling"]["queue_wait_s"] >= 5.0
