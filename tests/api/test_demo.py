"""``podfleet up --demo``: the jobs and the fault it sets up, in virtual time."""

from __future__ import annotations

from podfleet.api.demo import DEMO_SPEED, FAULT_AFTER_WALL_S, setup_jobs
from podfleet.compose import build
from podfleet.engine.timeline import Timeline
from podfleet.store.memory import MemoryStore
from tests.control.conftest import active_cluster, advance


def test_demo_runs_one_job_queues_one_and_fails_a_chip() -> None:
    plane = build(MemoryStore(), Timeline(seed=1)).plane
    active_cluster(plane, "pod-0", spares=2)
    first, second = setup_jobs(plane, "pod-0")
    assert setup_jobs(plane, "pod-0") == []  # set up once per store
    advance(plane, 600)
    a, b = plane.jobs.describe(first), plane.jobs.describe(second)
    assert a["state"] == "RUNNING" and a["progress"]["step"] > 5
    assert b["state"] == "PENDING"
    advance(plane, FAULT_AFTER_WALL_S * DEMO_SPEED)
    faults = [r for r in plane.store.iter_audit() if r.action == "InjectFault"]
    assert faults and faults[0].actor == "system:demo"
    advance(plane, 300)
    assert plane.jobs.describe(first)["state"] in ("RUNNING", "CHECKPOINTING")
    assert len(plane.describe_cluster("pod-0")["spares"]) == 2  # the used spare was replaced
