"""The Ray fabric on a local Ray instance (started once for the module: Ray's start-up is
the slow part on 2 cores). Three jobs share it, started together so their torch start-up
overlaps: one trains to completion, one has an actor killed, one has an actor frozen
(SIGSTOP) to look hung; each gang is 2 actors of a third of a CPU, so all fit on 2 CPUs."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from podfleet.errors import (
    ConflictError,
    InfeasibleError,
    InvalidInputError,
    NotFoundError,
    UnknownNameError,
)
from podfleet.fabric.base import Fabric, FabricEvent, WorkerGroupSpec

pytestmark = [pytest.mark.ray, pytest.mark.realproc]

ray = pytest.importorskip("ray")


class Events:
    def __init__(self) -> None:
        self.items: list[FabricEvent] = []
        self.engine_threads: set[int] = set()
        self._cv = threading.Condition()

    def __call__(self, ev: FabricEvent) -> None:
        with self._cv:
            self.items.append(ev)
            self.engine_threads.add(threading.get_ident())
            self._cv.notify_all()

    def of(self, job_id: str, kind: str | None = None) -> list[FabricEvent]:
        return [e for e in self.items if e.job_id == job_id and (kind is None or e.kind == kind)]

    def wait(self, pred: Callable[[], object], timeout_s: float = 50.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out; events: {[(e.job_id, e.kind) for e in self.items]}")
                self._cv.wait(left)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from podfleet.checkpoint import new_key_file
    from podfleet.engine.timeline import Timeline
    from podfleet.fabric.ray import RayFabric

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024,
             log_to_driver=False, configure_logging=False)
    tl = Timeline(seed=0, speed=1.0)  # paced: events are delivered as they happen
    engine = threading.Thread(target=tl.serve_forever, daemon=True)
    engine.start()
    fabric = RayFabric(None, tl, per_chip=1 / 3, workdir=str(tmp_path_factory.mktemp("ray")))
    events = Events()
    fabric.subscribe(events)
    d = tmp_path_factory.mktemp("ckpt")
    key = str(new_key_file(d / "kek"))
    # Both gangs start now so their (slow) torch start-up overlaps.
    fabric.launch(WorkerGroupSpec("job-done", (0, 1), "debug", 4, 2,
                                  options={"checkpoint_dir": str(d / "ck"), "key_file": key}))
    # rank_moves off: a killed rank ends the gang (the relaunch fallback; test_ray_rank_move.py moves it).
    fabric.launch(WorkerGroupSpec("job-kill", (2, 3), "debug", 100_000, 0,
                                  options={"step_delay_s": 0.05, "rank_moves": False}))
    fabric.launch(WorkerGroupSpec("job-hang", (4, 5), "debug", 100_000, 0, options={"step_delay_s": 0.05}))
    yield fabric, events, d
    fabric.close()
    tl.stop()
    engine.join(timeout=5)
    ray.shutdown()


def test_fabric_protocol(setup):
    fabric, _, _ = setup
    assert isinstance(fabric, Fabric)
    assert fabric.n_chips == 6 and fabric.topology.n_chips == 6
    assert fabric.kind == "ray" and len(fabric.chip_states()) == 6
    from podfleet.fabric.base import (
        Closeable,
        FaultInjection,
        FirmwareUpdate,
        HardwareErrors,
        Introspection,
        ResumableRuns,
        TelemetrySource,
        WorkerKill,
    )

    for cap in (Introspection, WorkerKill, Closeable, TelemetrySource, HardwareErrors):
        assert isinstance(fabric, cap), cap.__name__
    for cap in (ResumableRuns, FaultInjection, FirmwareUpdate):
        assert not isinstance(fabric, cap), cap.__name__
    assert {"cpu_percent", "heartbeat_age_s", "samples_per_s"} <= fabric.telemetry_metrics()
    assert "temperature_c" not in fabric.telemetry_metrics()  # no worker slot measures it
    assert fabric.run_status("job-none") is None and fabric.run_logs("job-none") == []


def test_host_command_runs_on_the_chips_ray_node(setup):
    """HostCommands (maintenance rollouts): a task pinned to the chip's node runs the
    command there, with only the environment it was given."""
    from podfleet.fabric.base import HostCommands

    fabric, _, _ = setup
    assert isinstance(fabric, HostCommands)
    res = fabric.host_command(2, ["sh", "-c", "echo chips=$PODFLEET_CHIPS key=${PODFLEET_CHECKPOINT_KEY:-none}"],
                              env={"PODFLEET_CHIPS": "2"}, timeout_s=30)()
    assert res.ok and res.output.strip() == "chips=2 key=none", res
    assert res.host == fabric.chip_hosts()[2]
    bad = fabric.host_command(2, ["sh", "-c", "echo no; exit 4"], env={}, timeout_s=30)()
    assert bad.exit_code == 4 and bad.output.strip() == "no"


def test_launch_validation(setup):
    fabric, _, _ = setup
    with pytest.raises(ConflictError, match="in use by job job-done"):
        fabric.launch(WorkerGroupSpec("job-x", (1,), "debug", 1))
    with pytest.raises(ConflictError, match="already"):
        fabric.launch(WorkerGroupSpec("job-done", (0, 1), "debug", 1))
    with pytest.raises(NotFoundError, match="valid chips are 0-5"):
        fabric.launch(WorkerGroupSpec("job-x", (7,), "debug", 1))
    with pytest.raises(UnknownNameError, match="job option 'bogus'"):
        fabric.launch(WorkerGroupSpec("job-y", (0,), "debug", 1, options={"bogus": 1}))
    with pytest.raises(UnknownNameError, match="placement strategy"):
        fabric.launch(WorkerGroupSpec("job-y", (0,), "debug", 1, options={"placement": "diagonal"}))
    with pytest.raises(NotFoundError):
        fabric.stop("job-none")
    with pytest.raises(NotFoundError):
        fabric.kill_worker("job-none", 0)
    assert "job-x" not in fabric.jobs and "job-y" not in fabric.jobs  # nothing half-registered


def test_unavailable_resource_is_refused(setup):
    from podfleet.fabric.ray import RayFabric

    with pytest.raises(InfeasibleError, match="has 0 neuron_cores"):
        RayFabric(None, None, resource="neuron_cores")
    with pytest.raises(InfeasibleError, match=r"n_chips 9 needs 4\.5 CPU, the Ray cluster has 2"):
        RayFabric(None, None, n_chips=9, per_chip=0.5)
    with pytest.raises(UnknownNameError, match="valid: CPU, GPU, neuron_cores"):
        RayFabric(None, None, resource="TPU")


def test_factory_reads_settings(setup, monkeypatch):
    from podfleet.fabric.ray import make_ray_fabric
    from podfleet.hardware.catalog import custom_grid

    monkeypatch.setenv("PODFLEET_RAY_PER_CHIP", "lots")
    with pytest.raises(InvalidInputError, match="PODFLEET_RAY_PER_CHIP must be a number"):
        make_ray_fabric(custom_grid([2]), None)
    monkeypatch.setenv("PODFLEET_RAY_PER_CHIP", "0.25")
    f = make_ray_fabric(custom_grid([2]), None, spares=(1,))
    try:
        assert f.n_chips == 2 and f.per_chip == 0.25 and f.spares == (1,) and f.topology.name == "custom"
        assert f.topology.chip_type == "cpu"  # CPU units are worker slots, whatever the grid said
    finally:
        f.close()
    assert ray.is_initialized()  # the module's connection is not the factory's to close


def test_factory_keeps_the_clusters_key_in_its_workdir_and_hands_it_to_workers(setup, monkeypatch, tmp_path):
    from podfleet.checkpoint.keys import kek_path_for
    from podfleet.fabric.ray import make_ray_fabric
    from podfleet.fabric.ray.jobs import RankRecord, RayJob
    from podfleet.hardware.catalog import custom_grid

    monkeypatch.delenv("PODFLEET_CHECKPOINT_KEY", raising=False)
    # This process is connected to the module's Ray: the fabric is given its address (with
    # a data directory and no address, the factory would start the private head, which a
    # process connected elsewhere refuses: tests/fabric/ray/test_ray_private.py).
    gcs = ray.get_runtime_context().gcs_address
    f = make_ray_fabric(custom_grid([2]), None, address=gcs, workdir=tmp_path, per_chip=0.25)
    try:
        # The KEK is kept beside the workdir, never inside the checkpoint tree.
        assert f.workdir == str(tmp_path) and f.key_file == str(kek_path_for(tmp_path))
        assert kek_path_for(tmp_path).exists() and tmp_path not in kek_path_for(tmp_path).parents
        job = RayJob(WorkerGroupSpec("job-k", (0,), "debug", 1), "pack", str(tmp_path), None)
        job.ranks = [RankRecord(0, 0)]
        assert f.gang.worker_config(job, 0, "127.0.0.1", 1).key_file == f.key_file
        own = RayJob(WorkerGroupSpec("job-o", (0,), "debug", 1, options={"key_file": "/k"}), "pack", "", None)
        own.ranks = [RankRecord(0, 0)]
        assert f.gang.worker_config(own, 0, "127.0.0.1", 1).key_file == "/k"  # a job's own key wins
    finally:
        f.close()
    again = make_ray_fabric(custom_grid([2]), None, address=gcs, workdir=tmp_path, per_chip=0.25)
    try:
        assert again.key_file == f.key_file  # kept across restarts: old checkpoints stay readable
    finally:
        again.close()


def test_two_worker_job_runs_to_completion(setup):
    from podfleet.checkpoint import latest

    fabric, events, d = setup
    events.wait(lambda: events.of("job-done", "job-finished") or events.of("job-done", "worker-exited"))
    assert not events.of("job-done", "worker-exited"), events.of("job-done", "worker-exited")
    started = events.of("job-done", "job-started")[0]
    assert started.detail["nodes"] and started.detail["placement"] == "pack"
    progress = events.of("job-done", "progress")
    assert [e.detail["step"] for e in progress] == [1, 2, 3, 4]
    losses = [e.detail["loss"] for e in progress]
    assert losses[-1] < losses[0]  # it trains
    assert all(e.detail["tokens_per_s"] > 0 and e.detail["step_time_s"] > 0 for e in progress)
    assert [e.detail["step"] for e in events.of("job-done", "checkpoint")] == [2, 4]
    assert latest(d / "ck") is not None and latest(d / "ck").name.endswith("4")
    status = fabric.job_status("job-done")
    assert status["state"] == "finished" and status["step"] == 4
    assert [r["exit_code"] for r in status["ranks"]] == [0, 0]
    assert len(events.engine_threads) == 1  # every event was delivered on the engine thread
    assert fabric.chip_metrics()["busy"][:2].tolist() == [0.0, 0.0]  # chips released
    rs = fabric.run_status("job-done")
    assert rs is not None and rs.state.value == "finished" and not rs.live
    assert (rs.step, rs.checkpoint_step, rs.attempt, rs.chips) == (4, 4, 1, (0, 1))
    assert rs.infra_failures == rs.user_failures == 0 and rs.loss == losses[-1]
    assert isinstance(fabric.run_logs("job-done"), list)


def test_killed_actor_is_detected(setup):
    import numpy as np

    fabric, events, _ = setup
    # Three steps in: every rank's speed has been measured from two consecutive steps.
    events.wait(lambda: any(e.detail["step"] >= 3 for e in events.of("job-kill", "progress")))
    m = fabric.chip_metrics()
    assert m["busy"][2:4].tolist() == [1.0, 1.0]
    assert (m["mem_bytes"][2:4] > 0).all()
    assert (m["step_time_s"][2:4] > 0).all()
    # TelemetrySource: the running gang's chips answer, in the scan's names too.
    assert (m["samples_per_s"][2:4] > 0).all() and (m["own_step_s"][2:4] > 0).all()
    assert (m["heartbeat_age_s"][2:4] < 5).all() and (m["mem_capacity_bytes"][2:4] > 0).all()
    assert (m["hbm_used_bytes"][2:4] == m["mem_bytes"][2:4]).all() and np.isnan(m["temperature_c"]).all()
    assert m["samples_per_s"][0] == 0.0 or m["busy"][0] == 1.0  # idle chips report nothing
    pid = fabric.kill_worker("job-kill", 1)
    assert pid == fabric.job_status("job-kill")["ranks"][1]["pid"] and pid > 0
    t_kill = time.monotonic()
    events.wait(lambda: events.of("job-kill", "worker-exited"), timeout_s=20)
    detect_s = time.monotonic() - t_kill
    ev = events.of("job-kill", "worker-exited")[0]
    assert ev.chip == 3 and ev.detail["rank"] == 1
    assert ev.detail["cause"] == "infra" and ev.detail["killed_by"] == "fault" and ev.detail["infra"] is True
    assert "rank 1 (chip 3) was killed" in ev.detail["reason"]
    assert fabric.job_status("job-kill")["state"] == "failed"
    rs = fabric.run_status("job-kill")
    assert rs.state.value == "failed" and (rs.infra_failures, rs.user_failures) == (1, 0)
    assert "was killed" in rs.reason
    assert fabric.chip_metrics()["busy"][2:4].tolist() == [0.0, 0.0]
    # HardwareErrors: the killed actor's exit, with its cause, in the fault log.
    faults = [e for e in fabric.hardware_errors() if e.job_id == "job-kill"]
    assert len(faults) == 1, faults
    f = faults[0]
    assert f.kind == "worker-fault" and f.chip == 3
    assert f.detail["observed"] == "signal" and f.detail["cause"] == "infra" and f.detail["rank"] == 1
    assert f.detail["injected_kill"] is True and "died" in f.detail["actor_error"]
    assert f.detail["rss_bytes"] > 0
    print(f"kill detected in {detect_s:.2f} s")
    with pytest.raises(ConflictError, match="not running"):
        fabric.kill_worker("job-kill", 0)


def test_hung_actor_is_detected(setup):
    import os
    import signal

    fabric, events, _ = setup
    events.wait(lambda: events.of("job-hang", "progress"))
    fabric.hang_timeout_s = 1.5
    pid = fabric.job_status("job-hang")["ranks"][0]["pid"]
    os.kill(pid, signal.SIGSTOP)  # frozen: no heartbeats, no answers to polls
    try:
        events.wait(lambda: events.of("job-hang", "worker-exited"), timeout_s=20)
    finally:
        os.kill(pid, signal.SIGCONT)  # let Ray reap it (the fabric has killed it)
    hang = events.of("job-hang", "hang")
    assert [e.chip for e in hang] == [4]
    assert hang[0].detail["heartbeat_age_s"] > 1.5
    ev = events.of("job-hang", "worker-exited")[0]
    assert ev.detail["rank"] == 0 and ev.detail["cause"] == "infra" and ev.detail["killed_by"] == "hang"
    assert "hung" in ev.detail["reason"]
    hung = [e for e in fabric.hardware_errors() if e.job_id == "job-hang"]
    assert [(e.detail["observed"], e.chip, e.detail["rank"]) for e in hung] == [("hang", 4, 0)]
    assert hung[0].detail["heartbeat_age_s"] > 1.5  # the hang, not also the kill that ended it


def test_stop_while_placing(setup):
    fabric, events, _ = setup
    events.wait(lambda: events.of("job-kill", "worker-exited"))  # chips 2, 3 are free again
    fabric.launch(WorkerGroupSpec("job-stop", (2, 3), "debug", 10))
    fabric.stop("job-stop")
    events.wait(lambda: events.of("job-stop", "job-stopped"))
    assert fabric.job_status("job-stop")["state"] == "stopped"
    fabric.stop("job-stop")  # idempotent
    time.sleep(1.0)  # the starter thread must not revive a stopped job
    assert fabric.job_status("job-stop")["state"] == "stopped"
    assert not events.of("job-stop", "job-started")


def test_imports_without_ray():
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import podfleet.fabric.ray as fr\n"
        "from podfleet.errors import InfeasibleError\n"
        "try:\n    fr.RayFabric(None, None)\nexcept InfeasibleError as e:\n    print('ok', e.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ok fabric 'ray' needs the ray package" in out.stdout


def test_bad_global_batch_is_refused(setup):
    fabric, _, _ = setup
    with pytest.raises(InvalidInputError, match="global_batch"):
        fabric.launch(WorkerGroupSpec("job-gb", (0, 1), "debug", 1, options={"global_batch": 7}))
    assert "job-gb" not in fabric.jobs
