"""Workloads on the twin: progress, checkpoints, failure -> pause, move_rank, resume."""

from __future__ import annotations

import pytest

from podfleet.engine import Timeline
from podfleet.errors import ConflictError, InvalidInputError, NotFoundError
from podfleet.fabric.base import ChipState, RunState, WorkerGroupSpec
from podfleet.fabric.sim import SimFabric

CHIPS = tuple(range(16))


def run_until_done(tl: Timeline, run, limit_s: float = 1e6) -> None:
    while run.state in (RunState.RUNNING, RunState.PAUSED) and tl.now < limit_s:
        tl.run(tl.now + 1000.0)


def spec(steps: int = 200, ckpt: int = 50, model: str = "llama3-8b", chips=CHIPS, **opts) -> WorkerGroupSpec:
    return WorkerGroupSpec("job-1", tuple(chips), model, steps, ckpt, options=opts)


def test_job_runs_to_completion_with_checkpoints_and_progress(pod: SimFabric, tl: Timeline, events) -> None:
    run = pod.launch(spec())
    run_until_done(tl, run)
    assert run.state == RunState.FINISHED and run.step == 200
    ck = [e.detail["step"] for e in events if e.kind == "checkpoint"]
    assert ck == [50, 100, 150, 200]
    prog = [e for e in events if e.kind == "progress"]
    assert prog and prog[-1].detail["step"] == 200
    losses = [e.detail["loss"] for e in prog]
    assert losses[-1] < losses[0]
    assert all(e.detail["tokens_per_s"] > 0 and e.detail["step_time_s"] > 0 for e in prog)
    # Not flooded: at most one progress per telemetry interval and per 10 steps.
    assert len(prog) <= 200 // pod.progress_every_steps + 1
    assert events[-1].kind == "job-finished"
    # Load is released at the end.
    assert pod.telemetry.load.sum() == 0


def test_job_raises_utilization_and_power_on_its_chips(pod: SimFabric, tl: Timeline) -> None:
    pod.launch(spec(steps=10_000))
    tl.run(600.0)
    m = pod.chip_metrics()
    util = m["neuroncore_utilization"].mean(axis=1)
    assert util[list(CHIPS)].min() > 50 and util[16:].max() == 0
    assert m["power_w"][list(CHIPS)].min() > 300 > m["power_w"][16:].max()
    assert m["temperature_c"][0] > m["temperature_c"][40] + 10
    assert m["hbm_used_bytes"][0] > 0 and m["link_tx_bytes"][0] > 0
    assert pod.link_metrics()["utilization"].max() > 0


def test_chip_failure_pauses_job_then_move_rank_and_resume(pod: SimFabric, tl: Timeline, events) -> None:
    run = pod.launch(spec(steps=120, ckpt=20))
    tl.run(3000.0)
    step_before = run.step
    assert step_before > 20
    pod.inject_fault("chip-failure", chip=5)
    failed = [e for e in events if e.kind == "chip-failed"][-1]
    assert failed.chip == 5 and failed.job_id == "job-1"
    assert run.state == RunState.PAUSED and events[-1].kind == "job-paused"
    tl.run(4000.0)
    assert run.step == step_before  # no progress while paused
    with pytest.raises(ConflictError, match="chip 5"):
        pod.resume("job-1")
    with pytest.raises(ConflictError, match="in use"):
        pod.move_rank("job-1", 5, 6)
    pod.move_rank("job-1", 5, 60)
    assert run.chips[5] == 60
    pod.resume("job-1", from_step=run.last_checkpoint)
    assert run.step == run.last_checkpoint
    run_until_done(tl, run)
    assert run.state == RunState.FINISHED and run.step == 120


def test_pause_resume_stop(pod: SimFabric, tl: Timeline, events) -> None:
    run = pod.launch(spec(steps=10_000))
    tl.run(500.0)
    pod.pause("job-1")
    s = run.step
    tl.run(2000.0)
    assert run.step == s
    pod.resume("job-1")
    tl.run(3000.0)
    assert run.step > s
    pod.stop("job-1")
    s = run.step
    tl.run(5000.0)
    assert run.state == RunState.STOPPED and run.step == s
    assert pod.telemetry.load.sum() == 0
    with pytest.raises(ConflictError):
        pod.resume("job-1")


def test_launch_errors(pod: SimFabric) -> None:
    pod.launch(spec(steps=10))
    with pytest.raises(ConflictError, match="already running"):
        pod.launch(spec(steps=10))
    with pytest.raises(ConflictError, match="in use"):
        pod.launch(WorkerGroupSpec("job-2", (3, 20), "debug", 10))
    with pytest.raises(NotFoundError):
        pod.launch(WorkerGroupSpec("job-3", (99,), "debug", 10))
    with pytest.raises(InvalidInputError):
        pod.launch(WorkerGroupSpec("job-4", (), "debug", 10))
    pod.set_chip_state(30, ChipState.FAILED, "t")
    with pytest.raises(ConflictError, match="failed"):
        pod.launch(WorkerGroupSpec("job-5", (30,), "debug", 10))
    with pytest.raises(NotFoundError):
        pod.stop("job-nope")


def test_link_down_slows_the_job(pod: SimFabric) -> None:
    s = spec(model="llama3-70b", chips=range(64))
    before = pod.step_time_fn(s, pod)
    link = int(pod.links_among(s.chips)[0])
    pod.inject_fault("link-down", link=link)
    after = pod.step_time_fn(s, pod)
    assert after > before


def test_pluggable_step_time(tl: Timeline) -> None:
    calls: list[str] = []

    def fixed(spec: WorkerGroupSpec, fabric: SimFabric) -> float:
        calls.append(spec.job_id)
        return 2.5

    fab = SimFabric("trn2-node", tl, step_time_fn=fixed)
    run = fab.launch(WorkerGroupSpec("job-x", (0, 1), "debug", 100))
    tl.run(1000.0)
    assert run.state == RunState.FINISHED and calls
    assert run.step_time_s == 2.5
    assert fab.jobs["job-x"].summary()["state"] == "finished"


def test_launch_from_start_step(pod: SimFabric, tl: Timeline) -> None:
    run = pod.launch(spec(steps=30, ckpt=10, model="debug", start_step=20))
    assert run.step == 20 and run.last_checkpoint == 20
    run_until_done(tl, run)
    assert run.state == RunState.FINISHED and run.step == 30
    with pytest.raises(InvalidInputError, match="start_step"):
        pod.launch(WorkerGroupSpec("job-9", (40,), "debug", 5, options={"start_step": 5}))
