"""Rank moves on a 3-rank gang (fabric/local/rankmove.py, training/regroup.py): the killed
middle rank moves to the spare while ranks 0 and 2 keep their processes, the gang trains on
from the step it held (no relaunch, no step missing), and the regroup logs say where the
state came from. Three ranks, because a survivor must learn of the loss from its peer's
group being destroyed, not only from the dead rank's closed socket."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from podfleet.fabric.base import ChipState, RunState, WorkerGroupSpec
from podfleet.fabric.local import LocalFabric

pytestmark = pytest.mark.realproc
STEPS = 24


def test_a_killed_rank_of_three_moves_while_the_others_keep_their_processes(tmp_path: Path) -> None:
    fab = LocalFabric(4, spares=(3,), workdir=tmp_path, hang_timeout_s=20, warm_workers=1, refill_delay_s=1.0)
    try:
        fab.launch(WorkerGroupSpec("job-3", (0, 1, 2), "debug", STEPS,
                                   options={"global_batch": 6, "seq_len": 32, "step_delay_s": 0.05}))
        fab.wait("job-3", 180, until=lambda s: s.step >= 5)
        deadline = time.monotonic() + 120
        while fab.warm_ready() < 1:
            assert time.monotonic() < deadline, "no warm standby"
            time.sleep(0.1)
        before = fab.pids("job-3")
        os.kill(before[1], signal.SIGKILL)
        moved = fab.wait("job-3", 120, until=lambda s: bool(s.recoveries))
        after = fab.pids("job-3")
        assert (after[0], after[2]) == (before[0], before[2]) and after[1] != before[1]
        [rec] = moved.recoveries
        assert rec["mechanism"] == "rank-move" and rec["path"] == "spare" and rec["moves"] == {"1": [1, 3]}
        assert rec["steps_lost"] == 0 and rec["source"] == "replica"
        # Where the seconds went: the fabric's times and each rank's, in order.
        ph = rec["phases_s"]
        assert 0 <= ph["detected"] <= ph["spawned"] <= ph["first_step"]
        new = ph["rank1"]
        skew = 0.01  # the ranks' times are wall clocks, the fabric's monotonic ones
        assert ph["spawn_started"] - skew <= new["started"] <= new["joined"] <= new["synced"] <= ph["first_step"] + skew
        for rank in ("rank0", "rank2"):
            kept = ph[rank]
            assert kept["lost"] <= kept["released"] <= kept["rendezvous"] <= kept["joined"] <= kept["synced"]
        st = fab.wait("job-3", 180)
        assert st.state is RunState.FINISHED, st.reason
        assert st.attempt == 1 and st.chips == (0, 3, 2)
        assert sorted(st.losses) == list(range(1, STEPS + 1))  # not reset, none skipped
        assert fab.chip_states()[1] is ChipState.HEALTHY  # a killed worker is not a chip fault
        logs = fab.run_logs("job-3")
        for rank in (0, 2):
            assert any(f"rank {rank}] regroup generation 1: state of step" in ln for ln in logs), rank
        assert not any("[attempt 2]" in ln for ln in logs)
    finally:
        fab.close()


def test_a_killed_rank_of_three_moves_without_a_warm_standby(tmp_path: Path) -> None:
    """No standby and no spare: the replacement is a cold process on the rank's own slot,
    so the surviving rank that only waits on a live peer (rank 2 when rank 1 dies) must
    learn of the loss from that peer cutting its connections, not from the 60 s gloo
    timeout, or the 30 s regroup wait runs out and the gang relaunches."""
    fab = LocalFabric(3, workdir=tmp_path, hang_timeout_s=20)
    try:
        fab.launch(WorkerGroupSpec("job-c", (0, 1, 2), "debug", 400,
                                   options={"global_batch": 6, "seq_len": 32, "step_delay_s": 0.05,
                                            "regroup_timeout_s": 20}))
        fab.wait("job-c", 120, until=lambda s: s.step >= 1)
        before = fab.pids("job-c")
        os.kill(before[1], signal.SIGKILL)
        st = fab.wait("job-c", 60, until=lambda s: bool(s.recoveries))
        after = fab.pids("job-c")
        assert [r["mechanism"] for r in st.recoveries] == ["rank-move"], fab.run_logs("job-c")[-20:]
        assert st.attempt == 1 and (after[0], after[2]) == (before[0], before[2])
    finally:
        fab.close()
