"""Advance reservations (``scheduler.reservations``, the ``reservation_window`` filter):
backfill never delays a reservation, and its chips go to its queue only in its window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from podfleet.errors import InvalidInputError
from podfleet.hardware.catalog import get_topology
from podfleet.scheduler import DecisionKind, JobRequest, Scheduler
from podfleet.scheduler.queues import QueueSpec
from podfleet.scheduler.reservations import Reservation

POD = get_topology("trn2-ultraserver")  # 64 chips


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def scheduler(clock: Clock) -> Scheduler:
    return Scheduler(POD, clock=clock, queues=[QueueSpec("a", 64), QueueSpec("b", 64)])


def reserve(s: Scheduler, chips: int, start: float, end: float, queue: str | None = "a") -> Reservation:
    r = Reservation("r1", s.choose_reservation_chips(chips, start_s=start, end_s=end), start, end, queue)
    s.set_reservation(r)
    return r


def kinds(s: Scheduler) -> dict[str, DecisionKind]:
    return {d.job_id: d.kind for d in s.schedule()}


def test_a_time_limit_must_be_positive() -> None:
    with pytest.raises(InvalidInputError) as e:
        JobRequest("j", 4, time_limit_s=0)
    assert e.value.field == "time_limit_s"


def test_before_the_start_only_a_job_that_ends_by_then_backfills_onto_reserved_chips() -> None:
    clock = Clock()
    s = scheduler(clock)
    reserve(s, 64, 1000.0, 5000.0)  # every chip
    s.submit(JobRequest("crosses", 16, queue="b", time_limit_s=2000.0))
    s.submit(JobRequest("unlimited", 16, queue="b"))
    s.submit(JobRequest("fits", 16, queue="b", time_limit_s=1000.0))  # ends exactly at the start
    assert kinds(s) == {"fits": DecisionKind.BIND}
    why = s.reason("crosses")
    assert "64 chips reserved by 'r1' starting in 16m40s" in why
    assert "(the job time limit 33m20s would cross it)" in why
    assert "(the job has no time limit)" in s.reason("unlimited")


def test_in_the_window_only_the_reservation_queue_gets_its_chips_and_after_it_anyone() -> None:
    clock = Clock()
    s = scheduler(clock)
    reserve(s, 64, 1000.0, 5000.0)
    clock.t = 1500.0
    s.submit(JobRequest("other", 16, queue="b", time_limit_s=10.0))
    s.submit(JobRequest("mine", 16, queue="a"))
    assert kinds(s) == {"mine": DecisionKind.BIND}
    assert "64 chips held by reservation 'r1' for queue 'a' for 58m20s more" in s.reason("other")
    clock.t = 5000.0
    assert kinds(s) == {"other": DecisionKind.BIND}


def test_a_reservation_without_a_queue_holds_its_chips_for_nobody() -> None:
    clock = Clock()
    s = scheduler(clock)
    reserve(s, 64, 0.0, 100.0, queue=None)
    s.submit(JobRequest("a1", 4, queue="a"))
    assert kinds(s) == {}
    assert "for nobody" in s.reason("a1")


def test_unreserved_chips_stay_free_to_all_and_a_long_job_avoids_reserved_ones() -> None:
    clock = Clock()
    s = scheduler(clock)
    r = reserve(s, 16, 1000.0, 5000.0)
    assert len(r.chips) == 16 and len(set(r.chips)) == 16
    s.submit(JobRequest("long", 16, queue="b"))
    s.submit(JobRequest("whole", 64, queue="b", time_limit_s=5000.0))
    assert kinds(s) == {"long": DecisionKind.BIND}
    assert not set(s.allocations()["long"].chips) & set(r.chips)


def test_two_overlapping_reservations_take_different_chips() -> None:
    s = scheduler(Clock())
    a = reserve(s, 32, 100.0, 200.0)
    b = s.choose_reservation_chips(32, start_s=150.0, end_s=300.0)
    assert not set(a.chips) & set(b)
    s.set_reservation(Reservation("r2", b, 150.0, 300.0))
    with pytest.raises(ValueError, match="only 0 chips can be reserved"):
        s.choose_reservation_chips(4, start_s=150.0, end_s=160.0)
    assert len(s.choose_reservation_chips(64, start_s=300.0, end_s=400.0)) == 64  # after both


def test_preemption_does_not_win_reserved_chips() -> None:
    clock = Clock()
    s = scheduler(clock)
    reserve(s, 64, 0.0, 10_000.0)
    s.submit(JobRequest("low", 64, queue="a", priority=0))
    assert kinds(s) == {"low": DecisionKind.BIND}
    clock.t = 5000.0  # past preemption's minimum run time
    s.submit(JobRequest("high", 64, queue="b", priority=10))
    assert kinds(s) == {}


@settings(max_examples=40, deadline=None)
@given(jobs=hs.lists(hs.tuples(hs.sampled_from(["a", "b"]), hs.sampled_from([1, 2, 4, 8, 16]),
                               hs.one_of(hs.none(), hs.sampled_from([50.0, 200.0, 800.0, 3000.0]))),
                     min_size=1, max_size=25),
       start=hs.sampled_from([0.0, 300.0, 1000.0]))
def test_reserved_chips_never_go_to_another_queue_in_the_window(
        jobs: list[tuple[str, int, float | None]], start: float) -> None:
    clock = Clock()
    s = scheduler(clock)
    r = reserve(s, 16, start, start + 2000.0)
    held = set(r.chips)
    started: dict[str, float] = {}
    for i, (q, chips, limit) in enumerate(jobs):
        s.submit(JobRequest(f"j{i}", chips, queue=q, time_limit_s=limit))
    for t in range(0, 3200, 100):
        clock.t = float(t)
        # The control plane ends a job at its time limit (``control.timelimits``).
        for jid, rec in list(s.handle.running.items()):
            limit = rec.request.time_limit_s
            if limit is not None and clock.t >= started[jid] + limit:
                s.finish(jid)
        for d in s.schedule():
            if d.kind is DecisionKind.BIND:
                started[d.job_id] = clock.t
        if r.active(clock.t):
            for jid, rec in s.handle.running.items():
                assert rec.placement is not None
                if rec.request.queue != "a":
                    assert not set(rec.placement.chips) & held, (jid, clock.t)
