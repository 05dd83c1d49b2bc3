"""The one timeline: virtual time, the command inbox, paced mode, the event log."""

from __future__ import annotations

import json
import threading

import pytest

from podfleet.engine import Timeline
from podfleet.engine.eventlog import EventLog


def test_virtual_time_runs_every_and_call_at_in_order() -> None:
    tl = Timeline(0)
    seen: list[tuple[str, float]] = []
    tl.every(10.0, lambda: seen.append(("tick", tl.now)))
    tl.call_at(25.0, lambda: seen.append(("once", tl.now)))
    tl.run(40.0)
    assert seen == [("tick", 10.0), ("tick", 20.0), ("once", 25.0), ("tick", 30.0)]
    assert tl.now == 40.0
    assert tl.events_processed >= 4


def test_periodic_work_of_one_interval_and_round_shares_a_process_in_registration_order() -> None:
    from podfleet.errors import UnavailableError

    tl = Timeline(0)
    seen: list[tuple[str, float]] = []

    def refused() -> None:
        seen.append(("b", tl.now))
        raise UnavailableError("store down")

    pa = tl.every(2.0, lambda: seen.append(("a", tl.now)))
    pb = tl.every(2.0, refused)
    pc = tl.every(2.0, lambda: seen.append(("c", tl.now)))
    pd = tl.every(2.0, lambda: seen.append(("d", tl.now)), start_delay=1.0)  # another first round
    assert pa is pb is pc and pd is not pa
    tl.run(2.5)
    # Registered after the group's first round: rounds of its own, after the group's.
    pe = tl.every(1.5, lambda: seen.append(("e", tl.now)))
    assert pe is not pa
    tl.run(4.5)
    assert seen == [("d", 1.0), ("a", 2.0), ("b", 2.0), ("c", 2.0), ("d", 3.0),
                    ("a", 4.0), ("b", 4.0), ("c", 4.0), ("e", 4.0)]
    # A refused round is logged and the group's other work still runs.
    assert len(tl.log.filter("round-skipped")) == 2
    # Three processes (the group, d, e): their starts and 5 rounds; one process each: 14.
    assert tl.events_processed == 9


def test_run_moves_clock_to_until_with_empty_schedule() -> None:
    tl = Timeline(0)
    tl.run(123.5)
    assert tl.now == 123.5


def test_submit_from_other_thread_runs_on_engine_thread() -> None:
    tl = Timeline(0)
    tl.every(1.0, lambda: None)
    result: dict[str, object] = {}

    def worker() -> None:
        fut = tl.submit(lambda a, b: (a + b, threading.get_ident()), 2, b=3)
        result["value"] = fut.result(timeout=30)

    th = threading.Thread(target=worker)
    th.start()
    # Keep advancing virtual time until the command has run.
    while th.is_alive():
        tl.run(tl.now + 1000.0)
    th.join()
    value, ident = result["value"]  # type: ignore[misc]
    assert value == 5
    assert ident == tl.engine_thread


def test_submit_exception_goes_to_the_caller() -> None:
    tl = Timeline(0)
    fut = tl.submit(lambda: 1 / 0)
    tl.run(1.0)
    with pytest.raises(ZeroDivisionError):
        fut.result(timeout=5)


def test_paced_mode_runs_submitted_command_promptly() -> None:
    tl = Timeline(0, speed=100.0)
    tl.every(3600.0, lambda: None)  # nothing due for 36 wall seconds
    th = threading.Thread(target=tl.serve_forever, daemon=True)
    th.start()
    try:
        fut = tl.submit(lambda: tl.now)
        sim_t = fut.result(timeout=10)  # liveness, not a timing target
        assert 0.0 <= sim_t < 3600.0  # it ran before the next scheduled event
    finally:
        tl.stop()
        th.join(timeout=10)
    assert not th.is_alive()


def test_paced_needs_speed_and_rejects_bad_speed() -> None:
    with pytest.raises(RuntimeError):
        Timeline(0).serve_forever()
    with pytest.raises(ValueError):
        Timeline(0, speed=0)


def test_event_log_filter_subscribe_and_jsonl(tmp_path) -> None:
    tl = Timeline(0)
    got: list[dict] = []
    unsub = tl.log.subscribe(got.append)
    tl.emit("a", x=1)
    tl.call_at(5.0, lambda: tl.emit("b", x=2))
    tl.run(10.0)
    unsub()
    tl.emit("a", x=3)
    assert [r["kind"] for r in got] == ["a", "b"]
    assert [r["x"] for r in tl.log.filter("a")] == [1, 3]
    assert tl.log.filter(x=2)[0]["t"] == 5.0
    path = tmp_path / "log.jsonl"
    tl.log.to_jsonl(path)
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    assert list(json.loads(lines[0])) == sorted(json.loads(lines[0]))


def test_event_log_keep_bounds_memory_but_counts_all() -> None:
    log = EventLog(keep=2)
    for i in range(5):
        log.append(float(i), "k", {})
    assert len(log) == 5
    assert [r["seq"] for r in log] == [4, 5]


def test_stop_ends_a_virtual_run_without_skipping_events() -> None:
    tl = Timeline(0)
    seen: list[float] = []

    def tick() -> None:
        seen.append(tl.now)
        if tl.now >= 30.0:
            tl.stop()

    tl.every(10.0, tick)
    tl.run(100.0)
    assert seen == [10.0, 20.0, 30.0]
    assert tl.now == 30.0  # the clock did not jump past unprocessed events
