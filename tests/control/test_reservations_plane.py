"""Reservations and time limits in the control plane, on the twin in virtual time: a
reservation's chips go to its queue in its window, a backfill job whose time limit would
cross the start waits, and a job past its time limit fails with that reason."""

from __future__ import annotations

import pytest

from podfleet.control import ControlPlane
from podfleet.errors import ConflictError, InfeasibleError, InvalidInputError, NotFoundError
from podfleet.store.memory import MemoryStore
from tests.control.conftest import active_cluster, advance, make_plane

LONG = {"model": "tiny", "steps": 10**6, "checkpoint_interval": 100}


def with_queues(plane: ControlPlane) -> None:
    active_cluster(plane)
    plane.queues.create("pod", {"name": "team-a", "nominal": 64}, actor="t")
    plane.queues.create("pod", {"name": "team-b", "nominal": 64}, actor="t")


def test_a_job_past_its_time_limit_fails_with_the_reason(plane: ControlPlane) -> None:
    active_cluster(plane)
    job = plane.jobs.submit("pod", {**LONG, "chips": 16, "time_limit_s": 600}, actor="t")
    assert job["state"] == "RUNNING" and job["time_limit_s"] == 600
    advance(plane, 590)
    assert plane.jobs.describe(job["id"])["state"] == "RUNNING"
    advance(plane, 15)
    out = plane.jobs.describe(job["id"])
    assert (out["state"], out["reason"]) == ("FAILED", "time limit reached (10m)")
    assert plane.describe_cluster("pod")["jobs_running"] == 0  # its chips were given back


@pytest.mark.parametrize("bad", [0, -5, "2h"])
def test_a_time_limit_must_be_a_positive_number_of_seconds(plane: ControlPlane, bad: object) -> None:
    active_cluster(plane)
    with pytest.raises(InvalidInputError) as e:
        plane.jobs.submit("pod", {**LONG, "chips": 4, "time_limit_s": bad}, actor="t")
    assert e.value.field == "time_limit_s"


def test_backfill_never_delays_a_reservation(plane: ControlPlane) -> None:
    with_queues(plane)
    r = plane.reservations.create("pod", {"name": "big-run", "chips": 64, "start": "now+1h", "duration": "2h",
                                          "queue": "team-a"}, actor="t")
    assert (r["chips"], r["state"], r["queue"], r["duration_s"]) == (64, "pending", "team-a", 7200.0)
    crosses = plane.jobs.submit("pod", {**LONG, "chips": 16, "queue": "team-b", "time_limit_s": 7200}, actor="t")
    fits = plane.jobs.submit("pod", {**LONG, "chips": 16, "queue": "team-b", "time_limit_s": 1800}, actor="t")
    advance(plane, 1)
    assert plane.jobs.describe(fits["id"])["state"] == "RUNNING"
    waiting = plane.jobs.describe(crosses["id"])
    assert waiting["state"] == "PENDING" and "reserved by 'big-run'" in waiting["reason"]
    advance(plane, 3600)  # the window opens: fits ended at its limit, team-a's job starts at once
    assert plane.jobs.describe(fits["id"])["reason"] == "time limit reached (30m)"
    assert plane.reservations.describe("pod", "big-run")["state"] == "active"
    a = plane.jobs.submit("pod", {**LONG, "chips": 64, "queue": "team-a"}, actor="t")
    assert plane.jobs.describe(a["id"])["state"] == "RUNNING"
    assert plane.reservations.describe("pod", "big-run")["jobs"] == [a["id"]]
    assert "held by reservation 'big-run' for queue 'team-a'" in plane.jobs.describe(crosses["id"])["reason"]


def test_bad_reservations_name_the_field(plane: ControlPlane) -> None:
    with_queues(plane)
    ok = {"chips": 16, "start": "now+1h", "duration": "1h"}
    for body, err, field in [
        ({**ok, "start": "2020-01-01T00:00:00Z"}, InvalidInputError, "start"),
        ({**ok, "start": "tomorrow"}, InvalidInputError, "start"),
        ({**ok, "duration": "0"}, InvalidInputError, "duration"),
        ({**ok, "duration": -60}, InvalidInputError, "duration"),
        ({**ok, "duration": "soon"}, InvalidInputError, "duration"),
        ({**ok, "chips": 65}, InfeasibleError, "chips"),
        ({**ok, "chips": 0}, InvalidInputError, "chips"),
        ({**ok, "queue": "nope"}, NotFoundError, "queue"),
        ({**ok, "name": "Bad Name"}, InvalidInputError, "name"),
    ]:
        with pytest.raises(err) as e:
            plane.reservations.create("pod", body, actor="t")
        assert e.value.field == field, body
        assert "\n" not in str(e.value)
    plane.reservations.create("pod", {**ok, "name": "r1", "chips": 48}, actor="t")
    with pytest.raises(ConflictError) as e:
        plane.reservations.create("pod", {**ok, "name": "r1"}, actor="t")
    assert e.value.field == "name"
    with pytest.raises(ConflictError, match="only 16 chips can be reserved") as e:
        plane.reservations.create("pod", {**ok, "name": "r2", "chips": 32}, actor="t")
    assert e.value.field == "chips"
    with pytest.raises(NotFoundError, match="reservation 'r9' not found on cluster pod"):
        plane.reservations.describe("pod", "r9")


def test_reservations_survive_a_restart_and_deleting_one_frees_its_chips() -> None:
    store = MemoryStore()
    p1 = make_plane(store)
    with_queues(p1)
    p1.reservations.create("pod", {"name": "hold", "chips": 64, "start": "now", "duration": "1d"}, actor="t")
    job = p1.jobs.submit("pod", {**LONG, "chips": 8, "queue": "team-b"}, actor="t")
    advance(p1, 1)
    assert p1.jobs.describe(job["id"])["state"] == "PENDING"
    p2 = make_plane(store, seed=1)
    p2.load()
    got = p2.reservations.list_all("pod")
    assert [(r["name"], r["chips"]) for r in got] == [("hold", 64)]
    advance(p2, 60)  # (a virtual clock starts again from the wall clock: past the start by now)
    assert p2.reservations.describe("pod", "hold")["state"] == "active"
    assert p2.jobs.describe(job["id"])["state"] == "PENDING"  # still held after the restart
    assert p2.reservations.delete("pod", "hold", actor="t")["state"] == "deleted"
    advance(p2, 1)
    assert p2.jobs.describe(job["id"])["state"] == "RUNNING"
    assert p2.reservations.list_all("pod") == []
    assert store.list_reservations() == []
