"""Bad input and user entrypoints on real processes: the job fails with its cause, the fabric lives on."""

from __future__ import annotations

import secrets
import textwrap
import time
from pathlib import Path

import pytest

from podfleet.checkpoint import manifest, shard
from podfleet.fabric.base import ChipState, RunState, WorkerGroupSpec
from podfleet.fabric.local import LocalFabric

pytestmark = pytest.mark.realproc


@pytest.fixture(scope="module")
def fab(tmp_path_factory: pytest.TempPathFactory):
    f = LocalFabric(2, workdir=tmp_path_factory.mktemp("jobs"), hang_timeout_s=10)
    yield f
    f.close()


def _healthy(fab: LocalFabric) -> None:
    assert fab.chip_states() == [ChipState.HEALTHY] * 2
    assert fab.chip_metrics()["busy"].shape == (2,)


def test_missing_entrypoint_fails_the_job_with_the_cause(fab: LocalFabric) -> None:
    fab.launch(WorkerGroupSpec("job-noent", (0,), "custom", 3, entrypoint="/nonexistent/train.py"))
    st = fab.wait("job-noent", 60)
    assert st.state is RunState.FAILED
    assert "bad input" in st.reason and "/nonexistent/train.py does not exist" in st.reason
    assert any("missing-entrypoint" in line for line in st.log_tail)
    _healthy(fab)


def test_unwritable_checkpoint_dir_fails_the_job(fab: LocalFabric, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    fab.launch(WorkerGroupSpec("job-ckdir", (1,), "debug", 3, checkpoint_interval=1,
                               options={"checkpoint_dir": str(blocker / "ckpt")}))
    st = fab.wait("job-ckdir", 60)
    assert st.state is RunState.FAILED and "is not writable" in st.reason
    _healthy(fab)


def test_script_that_crashes_at_import_fails_after_its_retry_budget(fab: LocalFabric, tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("import podfleet\nraise RuntimeError('boom at import')\n")
    fab.launch(WorkerGroupSpec("job-crash", (0,), "custom", 3, entrypoint=str(script)))
    st = fab.wait("job-crash", 60)
    assert st.state is RunState.FAILED
    assert st.user_failures == 1 and st.infra_failures == 0
    assert "user code failed" in st.reason and "RuntimeError: boom at import" in st.reason
    assert any("Traceback" in line for line in st.log_tail)
    _healthy(fab)


def test_wrong_key_refuses_to_resume(fab: LocalFabric, tmp_path: Path) -> None:
    other_key = secrets.token_bytes(32)
    root = tmp_path / "ckpt"
    blob = shard.encode(b"not for you", job_id="job-key", step=4, rank=0, kek=other_key)
    shard.atomic_write(manifest.step_dir(root, 4) / manifest.shard_name(0), blob)
    manifest.commit(root, "job-key", 4, 1)
    fab.launch(WorkerGroupSpec("job-key", (1,), "debug", 6, options={"checkpoint_dir": str(root), "resume": True}))
    st = fab.wait("job-key", 60)
    assert st.state is RunState.FAILED and "wrong key" in st.reason and "shard-00000.pfck" in st.reason
    _healthy(fab)


ENTRYPOINT = """
    import sys
    import torch
    from podfleet.training import helpers as pf

    got = pf.load_state()
    start, w = (got[0], got[1]["w"]) if got else (0, torch.zeros(3))
    pf.log(f"rank {pf.rank()} of {pf.world_size()} starts after step {start}; args {sys.argv[1:]}")
    for step in range(start + 1, pf.config().steps + 1):
        w = w + 1.0
        pf.report(step=step, loss=float(w.sum()))
        if step % 2 == 0:
            pf.save_state({"w": w}, step=step)
        if step == 5 and got is None:
            raise ValueError("flaky user code")
"""


def test_user_entrypoint_with_helpers_is_retried_and_resumes_from_its_state(fab: LocalFabric, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(ENTRYPOINT))
    fab.launch(WorkerGroupSpec("job-user", (0,), "custom", 8, entrypoint=str(script),
                               options={"max_retries": 1, "entrypoint_args": ["--lr", "1"]}))
    st = fab.wait("job-user", 90)
    assert st.state is RunState.FINISHED, st.reason
    assert (st.user_failures, st.attempt) == (1, 2)
    assert st.losses[8] == 24.0  # w = 8 after 8 steps: the retry resumed from step 4's state
    assert st.checkpoint_step == 8
    logs = fab.job_logs("job-user")
    assert any("starts after step 4; args ['--lr', '1']" in line for line in logs)
    assert any("ValueError: flaky user code" in line for line in logs)
    rs = fab.run_status("job-user")  # the capability's view of the same record
    assert rs is not None and rs.state is RunState.FINISHED and not rs.live
    assert (rs.attempt, rs.user_failures, rs.infra_failures, rs.max_retries) == (2, 1, 0, 1)
    assert rs.step == 8 and rs.loss == 24.0 and rs.checkpoint_step == 8 and rs.chips == (0,)
    assert fab.run_logs("job-user") == logs and rs.log_tail
    d = manifest.latest(st_dir := fab.workdir / "jobs" / "job-user" / "checkpoints")
    assert d is not None and manifest.read(d).step == 8, st_dir


def test_a_hung_worker_is_detected_killed_and_resumed_from_the_checkpoint(tmp_path: Path) -> None:
    import os
    import signal

    fab = LocalFabric(2, spares=(1,), workdir=tmp_path, hang_timeout_s=1.0)
    try:
        fab.launch(WorkerGroupSpec("job-hang", (0,), "debug", 12, checkpoint_interval=2,
                                   options={"step_delay_s": 0.1}))
        fab.wait("job-hang", 60, until=lambda s: (s.checkpoint_step or 0) >= 4)
        os.kill(fab.pids("job-hang")[0], signal.SIGSTOP)  # alive but silent: a hang
        st = fab.wait("job-hang", 90)
        assert st.state is RunState.FINISHED, st.reason
        hangs = [e for e in fab.events if e.kind == "hang"]
        assert hangs and hangs[0].chip == 0 and hangs[0].detail["heartbeat_age_s"] > 1.0
        rec = st.recoveries[0]
        assert rec["cause"] == "infra" and rec["source"] == "checkpoint" and rec["restored_step"] >= 4
        assert rec["steps_lost"] <= 2  # at most one checkpoint interval
        assert st.chips == (1,) and st.user_failures == 0
        assert fab.chip_states()[0] is ChipState.HEALTHY  # a hung worker, not a slot fault
        assert sorted(st.losses) == list(range(1, 13))
        rs = fab.run_status("job-hang")
        assert rs is not None and rs.state is RunState.FINISHED and rs.infra_failures == 1 and rs.attempt == 2
    finally:
        fab.close()


def test_stop_ends_a_running_job_and_frees_its_chips(fab: LocalFabric) -> None:
    fab.launch(WorkerGroupSpec("job-stop", (0, 1), "debug", 10_000, options={"global_batch": 4}))
    fab.wait("job-stop", 60, until=lambda s: s.step >= 2)
    fab.stop("job-stop")
    st = fab.wait("job-stop", 30)
    assert st.state is RunState.STOPPED
    assert {e.detail["cause"] for e in fab.events if e.kind == "worker-exited" and e.job_id == "job-stop"} == {"stopped"}
    fab.launch(WorkerGroupSpec("job-after-stop", (0,), "custom", 1, entrypoint="/nonexistent.py"))
    assert fab.wait("job-after-stop", 30).state is RunState.FAILED  # the chips were free again


GIL_HOLDER = """
import ctypes

# A C call made through PyDLL keeps the GIL for its whole length (ctypes.CDLL would
# release it): the worker's heartbeat thread cannot run, exactly like a C extension
# that never releases the GIL. The process stays alive and silent.
ctypes.PyDLL(None).sleep(600)
"""


def test_a_job_whose_code_holds_the_gil_fails_after_the_hang_restarts(tmp_path: Path) -> None:
    script = tmp_path / "gil.py"
    script.write_text(GIL_HOLDER)
    fab = LocalFabric(3, spares=(2,), workdir=tmp_path / "work", hang_timeout_s=1.0, max_hang_restarts=1)
    try:
        fab.launch(WorkerGroupSpec("job-gil", (0,), "custom", 5, entrypoint=str(script)))
        st = fab.wait("job-gil", 120)
        assert st.state is RunState.FAILED, st.reason
        assert st.reason is not None and st.reason.startswith("the job's code stopped responding: rank 0"), st.reason
        assert "in 2 attempts" in st.reason and "hang restarts allowed: 1" in st.reason
        assert "user-code failure" in st.reason
        assert st.attempt == 2  # restarted once, then failed: not restarted forever
        assert st.infra_failures == 1 and st.user_failures == 1
        assert [e.detail["rank"] for e in fab.events if e.kind == "hang" and e.job_id == "job-gil"] == [0, 0]
        assert [e.kind for e in fab.events if e.job_id == "job-gil"][-1] == "job-failed"
    finally:
        fab.close()


def test_an_array_member_sees_its_index(fab: LocalFabric, tmp_path: Path) -> None:
    out = tmp_path / "index.txt"
    script = tmp_path / "sweep.py"
    script.write_text(f"import os\nopen({str(out)!r}, 'w').write(os.environ['PODFLEET_ARRAY_INDEX'])\n")
    fab.launch(WorkerGroupSpec("job-arr-3", (0,), "custom", 1, entrypoint=str(script), options={"array_index": 3}))
    st = fab.wait("job-arr-3", 60)
    assert st.state is RunState.FINISHED, st.reason
    assert out.read_text() == "3"


def test_a_rank_that_aborts_shows_its_last_words_in_the_reason(fab: LocalFabric, tmp_path: Path) -> None:
    # What a C++ std::terminate leaves (an uncaught gloo exception in a comm thread), then SIGABRT.
    script = tmp_path / "abort.py"
    script.write_text(textwrap.dedent("""\
        import os, sys
        print("step 1 done", file=sys.stderr)
        print("terminate called after throwing an instance of 'gloo::EnforceNotMet'", file=sys.stderr)
        print("  what():  [enforce fail at pair.cc:446] op.preamble.length <= op.nbytes. 8 vs 4", file=sys.stderr)
        sys.stderr.flush()
        os.abort()
        """))
    fab.launch(WorkerGroupSpec("job-abort", (0,), "custom", 1, entrypoint=str(script)))
    st = fab.wait("job-abort", 60)
    assert st.state is RunState.FAILED and st.reason is not None
    assert "killed by signal 6 (SIGABRT); its last output: terminate called after throwing an instance of " \
           "'gloo::EnforceNotMet' | what():  [enforce fail at pair.cc:446]" in st.reason
    assert "step 1 done" not in st.reason
    _healthy(fab)


def test_a_relaunch_that_races_close_starts_no_worker(tmp_path: Path) -> None:
    """``close`` kills the gang, and the kill's exits look like a lost gang to the recovery
    thread: a relaunch that gets the lock after ``close`` must start nothing, or its
    workers train on with no fabric to stop them (a CI run found two such workers alive
    twelve minutes after their test had ended)."""
    fab = LocalFabric(2, workdir=tmp_path, hang_timeout_s=10)
    fab.launch(WorkerGroupSpec("job-race", (0, 1), "debug", 100_000))
    job = fab.state.jobs["job-race"]
    fab.close()
    attempt = job.attempt
    fab.start_attempt(job)  # what the recovery thread does once it holds the lock
    assert job.attempt == attempt
    deadline = time.monotonic() + 30  # close's kill is reaped by the pool's threads
    while any(wp.alive for wp in job.workers.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [wp.pid for wp in job.workers.values() if wp.alive]
