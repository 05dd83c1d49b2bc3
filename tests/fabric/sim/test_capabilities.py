"""The twin declares its capabilities as protocols, and introspection / resumable runs work."""

from __future__ import annotations

import pytest

from podfleet.engine import Timeline
from podfleet.fabric.base import (
    Closeable,
    Fabric,
    FaultInjection,
    FirmwareUpdate,
    Introspection,
    ResumableRuns,
    RunState,
    TelemetrySource,
    WorkerGroupSpec,
    WorkerKill,
)
from podfleet.fabric.sim import METRIC_NAMES, SimFabric

CHIPS = tuple(range(8))


def spec(steps: int = 40, ckpt: int = 10, **opts) -> WorkerGroupSpec:
    return WorkerGroupSpec("job-c", CHIPS, "llama3-8b", steps, ckpt, options=opts)


def test_declares_exactly_its_capabilities(pod: SimFabric) -> None:
    for cap in (Fabric, Introspection, ResumableRuns, FaultInjection, FirmwareUpdate, TelemetrySource):
        assert isinstance(pod, cap), cap.__name__
    for cap in (WorkerKill, Closeable):
        assert not isinstance(pod, cap), cap.__name__


def test_telemetry_metrics_name_the_chip_metrics(pod: SimFabric) -> None:
    assert pod.telemetry_metrics() == frozenset(METRIC_NAMES) == frozenset(pod.chip_metrics())


def test_run_status_follows_the_run(pod: SimFabric, tl: Timeline) -> None:
    assert pod.run_status("job-c") is None and pod.run_logs("job-c") == []
    run = pod.launch(spec(steps=10_000))
    st = pod.run_status("job-c")
    assert st is not None and st.state is RunState.RUNNING and st.live
    assert st.chips == CHIPS and st.step == 0 and st.loss is None and st.checkpoint_step == 0
    tl.run(300.0)
    pod.inject_fault("chip-failure", chip=3)
    st = pod.run_status("job-c")
    assert st.state is RunState.PAUSED and st.step == run.step > 0 and st.loss is not None
    assert "chip 3 failed" in (st.reason or "")
    pod.move_rank("job-c", 3, 60)
    assert pod.run_status("job-c").chips[3] == 60
    pod.stop("job-c")
    st = pod.run_status("job-c")
    assert st.state is RunState.STOPPED and not st.live
    logs = pod.run_logs("job-c")
    kinds = [line.split()[1] for line in logs]
    assert kinds[0] == "job-started" and {"job-paused", "rank-moved", "job-stopped"} <= set(kinds)
    assert st.log_tail == tuple(logs[-len(st.log_tail):])


def test_finished_run(pod: SimFabric, tl: Timeline) -> None:
    pod.launch(spec())
    tl.run(1e5)
    st = pod.run_status("job-c")
    assert st.state is RunState.FINISHED and st.step == 40 and st.checkpoint_step == 40
    assert pod.checkpoint_now("job-c") is None  # nothing left to save


def test_checkpoint_now_returns_the_step_and_records_it(pod: SimFabric, tl: Timeline, events) -> None:
    assert pod.checkpoint_now("job-none") is None
    run = pod.launch(spec(steps=10_000, ckpt=0))
    tl.run(200.0)
    n_events = len(events)
    step = pod.checkpoint_now("job-c")
    assert step == run.step > 0 and run.last_checkpoint == step
    assert len(events) == n_events  # the caller records it: no event that would look like a periodic one
    pod.pause("job-c")
    assert pod.checkpoint_now("job-c") == run.step
    tl.run(400.0)
    pod.resume("job-c", from_step=step)
    assert run.step == step and run.state is RunState.RUNNING


def test_launch_honours_start_step(pod: SimFabric, tl: Timeline, events) -> None:
    pod.launch(spec(steps=30, start_step=25))
    st = pod.run_status("job-c")
    assert st.step == 25 and st.checkpoint_step == 25
    started = next(e for e in events if e.kind == "job-started")
    assert started.detail["start_step"] == 25
    tl.run(1e5)
    st = pod.run_status("job-c")
    assert st.state is RunState.FINISHED and st.step == 30


def test_job_on_and_busy_chips(pod: SimFabric) -> None:
    pod.launch(spec(steps=10_000))
    assert pod.job_on(2) == "job-c" and pod.job_on(20) is None
    assert pod.busy_chips() == frozenset(CHIPS)
    pod.stop("job-c")
    assert pod.busy_chips() == frozenset()


def test_attached_to_one_timeline(pod: SimFabric, tl: Timeline) -> None:
    pod.attach(tl)  # the same one: fine
    with pytest.raises(Exception, match="another timeline"):
        pod.attach(Timeline(1))
