"""A paced timeline re-anchors after a stall: what the plane stamps never lags the wall clock."""

from __future__ import annotations

import threading
import time

from podfleet.engine.timeline import REANCHOR_S, Timeline


def test_a_stalled_engine_reanchors_and_stamps_track_the_wall_clock() -> None:
    tl = Timeline(speed=1.0)
    ticks: list[tuple[float, float]] = []  # (stamp, wall clock) of each tick
    stall = threading.Event()
    start_wall = time.time() - tl.now

    def tick() -> None:
        ticks.append((start_wall + tl.now + tl.skew_s, time.time()))
        if len(ticks) == 2:
            time.sleep(REANCHOR_S * 3)  # the engine blocks: a long GC, a stuck call, SIGSTOP
            stall.set()

    tl.every(0.2, tick)
    thread = threading.Thread(target=tl.serve_forever, daemon=True)
    thread.start()
    try:
        assert stall.wait(30)
        deadline = time.monotonic() + 30
        while len(ticks) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        tl.stop()
        thread.join(5)
    assert tl.skew_s >= REANCHOR_S, tl.skew_s
    assert any(r["kind"] == "timeline-reanchored" for r in tl.log)
    # Every tick after the stall stamps within a re-anchor (plus slack for a loaded
    # machine) of the wall clock; without re-anchoring the backlog stamps the stall's past.
    lags = [wall - stamp for stamp, wall in ticks[2:]]
    assert max(lags) < REANCHOR_S + 1.0, lags


def test_virtual_time_never_skews() -> None:
    tl = Timeline()
    tl.every(1.0, lambda: None)
    tl.run(until=100.0)
    assert tl.skew_s == 0.0


def test_a_fast_timeline_stamps_the_wall_clock_not_its_own() -> None:
    # A demo runs at 20x: its stamps are when things happened on the wall clock (not a
    # clock running 20 times too fast, 30 minutes ahead after 90 s), and back again.
    tl = Timeline(speed=20.0)
    tl.every(0.5, lambda: None)
    thread = threading.Thread(target=tl.serve_forever, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)
        t, wall = tl.now, time.time()
    finally:
        tl.stop()
        thread.join(5)
    assert t >= 10.0, t  # the timeline ran 20 times the wall clock
    assert abs(tl.wall_at(t) - wall) < 1.0, (tl.wall_at(t), wall)
    assert abs(tl.wall_at(t + 20.0) - tl.wall_at(t) - 1.0) < 1e-3
    assert abs(tl.timeline_at(tl.wall_at(t)) - t) < 1e-3
