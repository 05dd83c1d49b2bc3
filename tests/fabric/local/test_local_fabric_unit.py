"""LocalFabric without workers: protocol, validation, exit classification, no torch on import."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from podfleet.errors import (
    ConflictError,
    InvalidInputError,
    InvalidTransitionError,
    NotFoundError,
    UnknownNameError,
)
from podfleet.fabric.base import ChipState, Fabric, RunState, WorkerGroupSpec
from podfleet.fabric.local import Cause, LocalFabric
from podfleet.fabric.local.jobs import check_job_transition, classify_exit, crash_words, signal_name
from podfleet.training.config import EXIT_BAD_INPUT, EXIT_PEER_LOST, EXIT_USER_ERROR, WorkerConfig


@pytest.fixture
def fab(tmp_path: Path):
    f = LocalFabric(4, spares=(3,), workdir=tmp_path)
    yield f
    f.close()


def test_importing_the_local_fabric_does_not_import_torch() -> None:
    code = "import sys, podfleet.fabric.local, podfleet.training.worker; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_is_a_fabric(fab: LocalFabric) -> None:
    assert isinstance(fab, Fabric)
    assert fab.kind == "local" and fab.topology.n_chips == 4
    assert fab.chip_states() == [ChipState.HEALTHY] * 4
    m = fab.chip_metrics()
    assert {"cpu_percent", "mem_bytes", "step_time_s", "heartbeat_age_s"} <= set(m)
    assert all(v.shape == (4,) for v in m.values())
    # The KEK lives outside the checkpoint tree, owner-only.
    kek = Path(fab.key_file)
    assert kek.exists() and fab.workdir not in kek.parents and kek.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    ("code", "killed_by", "cause"),
    [
        (0, None, Cause.OK),
        (-signal.SIGKILL, None, Cause.INFRA),  # kill -9 from outside, OOM killer
        (-signal.SIGTERM, None, Cause.INFRA),
        (-signal.SIGSEGV, None, Cause.USER_CODE),  # the job's own native code crashed
        (EXIT_USER_ERROR, None, Cause.USER_CODE),
        (EXIT_BAD_INPUT, None, Cause.BAD_INPUT),
        (EXIT_PEER_LOST, None, Cause.PEER_LOST),
        (-signal.SIGKILL, "fault", Cause.INFRA),
        (-signal.SIGKILL, "hang", Cause.INFRA),
        (-signal.SIGTERM, "stop", Cause.STOPPED),
        (-signal.SIGKILL, "recovery", Cause.STOPPED),
        (3, None, Cause.USER_CODE),
    ],
)
def test_classify_exit(code: int, killed_by: str | None, cause: Cause) -> None:
    assert classify_exit(code, killed_by) is cause


def test_crash_words_start_at_the_abort_message() -> None:
    log = ["step 3 done", "terminate called after throwing an instance of 'gloo::IoException'",
           "  what():  [../gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:4242", ""]
    assert crash_words(log) == ("terminate called after throwing an instance of 'gloo::IoException' | "
                                "what():  [../gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:4242")
    assert crash_words(["a", "b", "c"]) == "b | c"  # no abort message: the last two lines
    assert crash_words(["", "  "]) == ""
    assert len(crash_words(["terminate called after " + "x" * 1000])) == 400


def test_signal_name() -> None:
    assert signal_name(signal.SIGABRT) == "SIGABRT"
    assert signal_name(200) == "signal 200"


def test_job_transitions_are_enforced() -> None:
    check_job_transition(RunState.RUNNING, RunState.RECOVERING)
    with pytest.raises(InvalidTransitionError, match="job cannot go from finished to running"):
        check_job_transition(RunState.FINISHED, RunState.RUNNING)


def test_launch_validates_before_starting_anything(fab: LocalFabric) -> None:
    with pytest.raises(UnknownNameError, match="valid: debug, medium, small, tiny"):
        fab.launch(WorkerGroupSpec("job-x", (0,), "gpt-huge", 2))
    with pytest.raises(UnknownNameError, match="unknown job option 'sede'"):
        fab.launch(WorkerGroupSpec("job-x", (0,), "debug", 2, options={"sede": 1}))
    with pytest.raises(InvalidInputError, match=r"global_batch \(5\) is not divisible by world_size \(2\)"):
        fab.launch(WorkerGroupSpec("job-x", (0, 1), "debug", 2, options={"global_batch": 5}))
    with pytest.raises(NotFoundError, match="9"):
        fab.launch(WorkerGroupSpec("job-x", (9,), "debug", 2))
    with pytest.raises(InvalidInputError, match="repeat"):
        fab.launch(WorkerGroupSpec("job-x", (1, 1), "debug", 2))
    fab.set_chip_state(2, ChipState.ISOLATED, "test")
    with pytest.raises(ConflictError, match="chip 2 is isolated"):
        fab.launch(WorkerGroupSpec("job-x", (2,), "debug", 2))
    with pytest.raises(InvalidTransitionError):
        fab.set_chip_state(2, ChipState.FAILED, "test")
    with pytest.raises(NotFoundError):
        fab.job_status("job-none")
    with pytest.raises(NotFoundError):
        fab.kill_worker("job-none", 0)


def test_worker_config_round_trips_and_validates() -> None:
    cfg = WorkerConfig(job_id="job-1", rank=1, world_size=2, entrypoint_args=("a", "b"))
    assert WorkerConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(InvalidInputError, match="rank 2 not in"):
        WorkerConfig(job_id="j", rank=2, world_size=2)
    with pytest.raises(InvalidInputError, match="unknown WorkerConfig fields"):
        WorkerConfig.from_json('{"job_id": "j", "rank": 0, "world_size": 1, "bogus": 1}')
    with pytest.raises(InvalidInputError, match="checkpoint_interval needs a checkpoint_dir"):
        WorkerConfig(job_id="j", rank=0, world_size=1, checkpoint_interval=5)


def test_declares_exactly_its_capabilities(fab: LocalFabric) -> None:
    from podfleet.fabric.base import (
        Closeable,
        FaultInjection,
        FirmwareUpdate,
        HardwareErrors,
        Introspection,
        Rebalanceable,
        ResumableRuns,
        TelemetrySource,
        WorkerKill,
        WorkerSlowdown,
    )

    for cap in (Fabric, Introspection, WorkerKill, Closeable, TelemetrySource, HardwareErrors, Rebalanceable,
                WorkerSlowdown):
        assert isinstance(fab, cap), cap.__name__
    for cap in (ResumableRuns, FaultInjection, FirmwareUpdate):
        assert not isinstance(fab, cap), cap.__name__
    # It declares what it measures, and NaN (not measured) stands for the rest of the scan's names.
    measured = fab.telemetry_metrics()
    assert {"cpu_percent", "mem_bytes", "step_time_s", "samples_per_s", "heartbeat_age_s"} <= measured
    assert "temperature_c" not in measured or fab.n_gpus
    m = fab.chip_metrics()
    assert all(k in m for k in measured)
    assert np.isnan(m["mem_ecc_uncorrected"]).all() and np.isnan(m["clock_mhz"]).all()


def test_unknown_job_has_no_run_status_and_no_logs(fab: LocalFabric) -> None:
    assert fab.run_status("job-none") is None
    assert fab.run_logs("job-none") == []


def test_the_final_event_waits_for_every_handled_exit(fab: LocalFabric) -> None:
    """Both ranks have exited (their reader threads set ``exit_code``) but only rank 0's
    exit has been handled: the job may not finish yet, or ``job-finished`` would overtake
    rank 1's ``worker-exited`` (a flaky CI failure before the fix)."""
    from types import SimpleNamespace

    from podfleet.fabric.local.jobs import LocalJob
    from podfleet.fabric.local.recovery import handle_exit

    cfg = WorkerConfig(job_id="job-order", rank=0, world_size=2, steps=1)
    spec = WorkerGroupSpec("job-order", (0, 1), "debug", 1)

    def worker(rank: int) -> SimpleNamespace:
        return SimpleNamespace(cfg=cfg, rank=rank, chip=rank, attempt=0, exit_code=0, alive=False,
                               exit_handled=False, killed_by=None, kill_mono=None, error=None,
                               log_tail=lambda n=3: [])

    job = LocalJob(spec=spec, chips=[0, 1], base_cfg=cfg, max_retries=0, recover=True)
    job.workers = {0: worker(0), 1: worker(1)}
    fab.state.jobs["job-order"] = job
    kinds: list[str] = []
    fab.subscribe(lambda ev: kinds.append(ev.kind))
    with fab.state.lock:
        handle_exit(fab, job.workers[0], 0, 0.0)  # type: ignore[arg-type]
        assert kinds == ["worker-exited"] and job.state is RunState.RUNNING
        handle_exit(fab, job.workers[1], 0, 0.0)  # type: ignore[arg-type]
    assert kinds == ["worker-exited", "worker-exited", "job-finished"]
    assert job.state is RunState.FINISHED
