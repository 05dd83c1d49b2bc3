"""Accounting on the twin in virtual time: chip-seconds busy, reserved and lost per job,
kept in the job's record past its end and grouped per user, queue and team."""

from __future__ import annotations

import pytest

from podfleet.compose import build
from podfleet.control import accounting
from podfleet.control.lifecycle import JobState
from podfleet.control.plane import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.errors import UnknownNameError
from podfleet.store.memory import MemoryStore
from tests.control.conftest import active_cluster, advance, make_plane

LONG = {"model": "tiny", "steps": 10**6, "checkpoint_interval": 100}


def test_accrue_files_each_state_under_its_kind() -> None:
    u: dict[str, float] = {}
    accounting.accrue(u, JobState.RUNNING, JobState.CHECKPOINTING, 4, 10.0)
    accounting.accrue(u, JobState.CHECKPOINTING, JobState.RUNNING, 4, 1.0)
    accounting.accrue(u, JobState.RUNNING, JobState.RECOVERING, 4, 10.0, redone_s=3.0)  # 3 s of work thrown away
    accounting.accrue(u, JobState.RECOVERING, JobState.RUNNING, 4, 5.0)
    accounting.accrue(u, JobState.PENDING, JobState.PLACING, 4, 99.0)  # waiting holds no chips
    assert u == {"busy": 40.0 + 28.0, "reserved": 4.0, "lost": 12.0 + 20.0}
    with pytest.raises(UnknownNameError):
        accounting.summarize([], "planet")


def test_chip_seconds_per_job_and_per_group(plane: ControlPlane) -> None:
    active_cluster(plane)
    plane.queues.create("pod", {"name": "team-a", "nominal": 32}, actor="t")
    a = plane.jobs.submit("pod", {**LONG, "chips": 16, "queue": "team-a", "team": "ml"}, actor="alice")
    b = plane.jobs.submit("pod", {**LONG, "chips": 8}, actor="bob")
    advance(plane, 100)
    plane.jobs.stop(a["id"], actor="t")
    plane.jobs.stop(b["id"], actor="t")
    va = plane.jobs.describe(a["id"])
    held = sum(va["usage"].values())
    assert va["submitted_by"] == "alice"
    assert held == pytest.approx(16 * 100, rel=0.02)  # 16 chips for ~100 s, every second filed
    # The twin checkpoints in no time and places at once: all of it was training.
    assert va["usage"]["busy"] == held
    rep = accounting.report(plane.table, plane.now(), by="user")
    rows = {r["user"]: r for r in rep["rows"]}
    assert set(rows) == {"alice", "bob"} and rows["alice"]["busy"] > rows["bob"]["busy"]
    by_queue = {r["queue"]: r for r in accounting.report(plane.table, plane.now(), by="queue")["rows"]}
    assert set(by_queue) == {"team-a", "default"}
    by_team = {r["team"]: r for r in accounting.report(plane.table, plane.now(), by="team")["rows"]}
    assert by_team["ml"]["jobs"] == 1
    csv = accounting.to_csv(rep["rows"], "user").splitlines()
    assert csv[0] == "user,busy,reserved,lost,chip_hours,jobs" and len(csv) == 3
    assert accounting.report(plane.table, plane.now(), since=plane.now() + 1)["jobs"] == 0


def test_a_chip_failure_is_lost_time_and_usage_survives_a_restart() -> None:
    store = MemoryStore()
    p1 = build(store, Timeline(seed=0)).plane  # with recovery: a failed chip's job recovers
    active_cluster(p1, spares=4)
    j = p1.jobs.submit("pod", {**LONG, "chips": 16}, actor="t")
    advance(p1, 50)
    p1.inject_fault("pod", "chip-failure", chip=j["allocation"]["chips"][0], actor="t")
    advance(p1, 60)
    v = p1.jobs.describe(j["id"])
    assert v["usage"].get("lost", 0) > 0, v["usage"]
    p1.jobs.stop(j["id"], actor="t")
    before = p1.jobs.describe(j["id"])["usage"]
    p2 = make_plane(store, seed=1)
    p2.load()
    assert p2.jobs.describe(j["id"])["usage"] == before  # kept past the job, in its record
    t = p1.now()  # the job ended: its spans are closed, so both planes give one series
    over_time = accounting.report(p1.table, t, bucket="1m")["series"]
    assert sum(over_time["groups"][0]["chip_hours"]) > 0
    assert accounting.report(p2.table, t, bucket="1m")["series"] == over_time
    counters = accounting.counters(p2.jobs.views.values())
    assert counters[("default", "default", "lost")] == pytest.approx(before["lost"])


def test_spans_merge_runs_of_equal_chips() -> None:
    spans: list[list[float]] = []
    accounting.add_span(spans, JobState.PLACING, 0.0, 1.0, 4)
    accounting.add_span(spans, JobState.RUNNING, 1.0, 10.0, 4)
    accounting.add_span(spans, JobState.CHECKPOINTING, 10.0, 11.0, 4)  # a checkpoint: same chips, one span
    accounting.add_span(spans, JobState.PENDING, 11.0, 20.0, 0)  # waiting holds nothing
    accounting.add_span(spans, JobState.RUNNING, 20.0, 30.0, 8)
    assert spans == [[0.0, 11.0, 4.0], [20.0, 30.0, 8.0]]


def test_series_splits_spans_across_buckets() -> None:
    # 36 chips from 30 s to 150 s: 30 s in the first minute, 60 in the second, 30 in the third.
    s = accounting.series([("a", [[30.0, 150.0, 36.0]]), ("b", [])], now=170.0, bucket_s=60)
    assert s["t"] == [0, 60, 120]
    assert s["groups"] == [{"name": "a", "chip_hours": [0.3, 0.6, 0.3]}, {"name": "b", "chip_hours": [0.0] * 3}]
    late = accounting.series([("a", [[30.0, 150.0, 36.0]])], now=170.0, bucket_s=60, since=1000.0)
    assert late["t"] == [] and late["groups"] == [{"name": "a", "chip_hours": []}]
    # A long history keeps the newest MAX_BUCKETS buckets, the last one ending after now.
    long = accounting.series([("a", [[0.0, 10**6, 1.0]])], now=10**6, bucket_s=60)
    assert len(long["t"]) == accounting.MAX_BUCKETS and long["t"][-1] <= 10**6 < long["t"][-1] + 60


def test_usage_over_time_per_queue(plane: ControlPlane) -> None:
    active_cluster(plane)
    plane.queues.create("pod", {"name": "team-a", "nominal": 32}, actor="t")
    t0 = plane.now()
    a = plane.jobs.submit("pod", {**LONG, "chips": 16, "queue": "team-a"}, actor="alice")
    advance(plane, 120)
    plane.jobs.stop(a["id"], actor="t")
    advance(plane, 60)
    rep = accounting.report(plane.table, plane.now(), by="queue", bucket="1m", since=t0)
    s = rep["series"]
    assert s["bucket_s"] == 60 and len(s["t"]) >= 3
    hours = next(g["chip_hours"] for g in s["groups"] if g["name"] == "team-a")
    # Every chip-second of the totals lies in some bucket; the minute after the stop holds none.
    assert sum(hours) == pytest.approx(sum(rep["total"].values()) / 3600, rel=0.01) and hours[-1] == 0
    assert max(hours) == pytest.approx(16 / 60, rel=0.05)  # a full minute of 16 chips
    with pytest.raises(UnknownNameError):
        accounting.report(plane.table, plane.now(), bucket="2m")
    assert "series" not in accounting.report(plane.table, plane.now())
