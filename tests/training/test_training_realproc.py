"""Real training on real worker processes: DP equivalence and kill -9 recovery (realproc)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import ChipState, RunState, WorkerGroupSpec
from podfleet.fabric.local import LocalFabric
from podfleet.training.config import NullReporter, WorkerConfig
from podfleet.training.worker import run_worker

pytestmark = pytest.mark.realproc
STEPS, BATCH = 20, 8


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 2-worker job on a fabric driven by a paced timeline; events are checked for thread."""
    tl = Timeline(seed=0, speed=1.0)
    engine = threading.Thread(target=tl.serve_forever, daemon=True)
    engine.start()
    fab = LocalFabric(2, tl, workdir=tmp_path_factory.mktemp("dp"), hang_timeout_s=10)
    threads: set[int] = set()
    kinds: list[str] = []
    fab.subscribe(lambda ev: (threads.add(threading.get_ident()), kinds.append(ev.kind)))
    # The control plane calls the fabric on the engine thread; so does this test.
    tl.submit(fab.launch, WorkerGroupSpec("job-dp", (0, 1), "debug", STEPS, options={"global_batch": BATCH})).result(5)
    st = fab.wait("job-dp", 120)
    # The run's state is final before its last events reach the engine thread (they are
    # delivered there, in order): let them arrive before the timeline stops.
    deadline = time.monotonic() + 30
    while "job-finished" not in kinds and time.monotonic() < deadline:
        time.sleep(0.05)
    tl.stop()
    engine.join(5)
    fab.close()
    return {"status": st, "threads": threads, "engine": tl.engine_thread, "kinds": kinds}


def test_two_worker_dp_equals_single_process(uninterrupted: dict) -> None:
    st = uninterrupted["status"]
    assert st.state is RunState.FINISHED, st.reason
    rep = NullReporter()
    res = run_worker(WorkerConfig(job_id="job-single", rank=0, world_size=1, steps=STEPS, global_batch=BATCH), rep)
    assert res.exit_code == 0, res.error
    single = dict(rep.progress_log)
    assert sorted(st.losses) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert abs(st.losses[step] - single[step]) < 1e-5, (step, st.losses[step], single[step])
    assert single[STEPS] < single[1] - 1.0  # it actually learns


def test_events_arrive_on_the_engine_thread(uninterrupted: dict) -> None:
    assert uninterrupted["threads"] == {uninterrupted["engine"]}
    kinds = uninterrupted["kinds"]
    assert kinds[0] == "job-started" and "progress" in kinds and kinds[-1] == "job-finished"
    assert kinds.count("worker-exited") == 2


def test_kill_9_from_outside_moves_the_rank_while_the_other_rank_keeps_running(uninterrupted: dict,
                                                                             tmp_path: Path) -> None:
    """A rank move (fabric/local/rankmove.py): the killed rank starts on the spare, rank 0's
    process never stops (same pid), the gang re-forms without a relaunch (attempt 1) and the
    loss curve is the uninterrupted run's: no step redone, none skipped, none reset."""
    fab = LocalFabric(3, spares=(2,), workdir=tmp_path, hang_timeout_s=10)
    try:
        fab.launch(WorkerGroupSpec("job-k", (0, 1), "debug", STEPS, checkpoint_interval=5,
                                   options={"global_batch": BATCH, "step_delay_s": 0.1, "max_retries": 0}))
        fab.wait("job-k", 120, until=lambda s: s.step >= 8)
        before = fab.pids("job-k")
        os.kill(before[1], signal.SIGKILL)  # a real kill -9, not through the fabric
        moved = fab.wait("job-k", 120, until=lambda s: bool(s.recoveries))
        after = fab.pids("job-k")
        assert moved.state is RunState.RUNNING, moved.reason
        assert after[0] == before[0] and after[1] != before[1]  # rank 0 is the same process
        st = fab.wait("job-k", 120)
        assert st.state is RunState.FINISHED, st.reason
        # Infrastructure failures do not use the retry budget (max_retries=0 here).
        assert (st.infra_failures, st.user_failures, st.attempt) == (1, 0, 1)
        (rec,) = st.recoveries
        assert rec["mechanism"] == "rank-move" and rec["path"] == "spare"
        assert rec["source"] == "replica" and rec["steps_lost"] == 0 and rec["source_rank"] == 0
        assert rec["moves"] == {"1": [1, 2]} and st.chips == (0, 2)
        assert fab.chip_states()[1] is ChipState.HEALTHY  # a killed worker is not a chip fault
        exited = [e for e in fab.events if e.kind == "worker-exited"]
        assert (exited[0].detail["rank"], exited[0].detail["exit_code"]) == (1, -signal.SIGKILL)
        assert sum(1 for e in exited if e.detail["rank"] == 0) == 1  # rank 0 exited once: at the end
        resumed = [e for e in fab.events if e.kind == "job-resumed"]
        assert [e.detail["mechanism"] for e in resumed] == ["rank-move"] and resumed[0].detail["chips"] == [0, 2]
        # Bitwise: the state broadcast from rank 0 is its exact fp32 state, data is a pure
        # function of (seed, step), and a 2-way all-reduce (a + b) does not depend on order.
        assert st.losses == uninterrupted["status"].losses
    finally:
        fab.close()


def test_with_rank_moves_off_the_gang_relaunches_with_the_same_loss_curve(uninterrupted: dict,
                                                                          tmp_path: Path) -> None:
    fab = LocalFabric(3, spares=(2,), workdir=tmp_path, hang_timeout_s=10)
    try:
        fab.launch(WorkerGroupSpec("job-r", (0, 1), "debug", STEPS, checkpoint_interval=5,
                                   options={"global_batch": BATCH, "step_delay_s": 0.1, "max_retries": 0,
                                            "rank_moves": False}))
        fab.wait("job-r", 120, until=lambda s: s.step >= 8)
        os.kill(fab.pids("job-r")[1], signal.SIGKILL)
        st = fab.wait("job-r", 120)
        assert st.state is RunState.FINISHED, st.reason
        assert (st.infra_failures, st.user_failures, st.attempt) == (1, 0, 2)
        (rec,) = st.recoveries
        assert rec["mechanism"] == "relaunch" and rec["source"] == "replica" and rec["steps_lost"] == 0
        assert rec["moves"] == {"1": [1, 2]} and st.chips == (0, 2)
        assert st.losses == uninterrupted["status"].losses
    finally:
        fab.close()
