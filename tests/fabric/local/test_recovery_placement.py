"""The local fabric without a spare slot: a killed rank goes back onto its own slot once
that slot passes a check, the recovery says so, and each rank's host and pid are known
(job log at every start, ``chip_workers`` for hardware describe)."""

from __future__ import annotations

import time

import pytest

from podfleet.fabric.base import ChipCheck, ChipState, RunState, WorkerGroupSpec, WorkerPlacement
from podfleet.fabric.local import LocalFabric

pytestmark = pytest.mark.realproc


def test_no_spare_slot_the_rank_returns_to_its_own_slot(tmp_path) -> None:
    fab = LocalFabric(2, workdir=tmp_path / "w", hang_timeout_s=20)
    try:
        assert isinstance(fab, ChipCheck) and isinstance(fab, WorkerPlacement)
        fab.launch(WorkerGroupSpec("job-own", (0, 1), "debug", 16, checkpoint_interval=4,
                                   options={"step_delay_s": 0.1, "global_batch": 4, "seq_len": 32}))
        deadline = time.monotonic() + 120
        while fab.job_status("job-own").step < 5:
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.1)
        workers = fab.chip_workers()
        assert sorted(workers) == [0, 1] and workers[1]["rank"] == 1 and workers[1]["job_id"] == "job-own"
        assert fab.check_chip_health(1) == f"slot 1 still runs pid {workers[1]['pid']}"
        pid = fab.kill_worker("job-own", 1)
        assert pid == workers[1]["pid"]
        st = fab.wait("job-own", 180)
        assert st.state is RunState.FINISHED, st.reason
        [rec] = st.recoveries
        assert rec["path"] == "own-chip" and rec["moves"] == {} and rec["steps_lost"] >= 0
        assert rec["mechanism"] == "rank-move"  # rank 0 kept running; rank 1 restarted on its slot
        assert rec["resume_s"] > 0 and rec["source"] in ("replica", "checkpoint")
        assert st.chips == (0, 1) and fab.chip_states() == [ChipState.HEALTHY] * 2
        logs = fab.run_logs("job-own")
        assert any(ln.startswith("[attempt 1] rank 1 on chip 1: node ") for ln in logs)
        assert any(ln.startswith("[attempt 1] rank 1 on chip 1: node ") and "(rank move, generation 1)" in ln
                   for ln in logs)
        assert fab.chip_hosts() == [fab.chip_hosts()[0]] * 2 and fab.chip_hosts()[0]
        assert fab.check_chip_health(1) is None  # the gang is gone: the slot is free and healthy
        assert fab.chip_metrics()["mem_capacity_bytes"][0] > 0
    finally:
        fab.close()


def test_a_killed_worker_moves_to_the_spare_and_its_healthy_slot_stays_in_service(tmp_path) -> None:
    # A worker killed (not its slot) is no chip fault: the rank takes the spare and the
    # slot it left is neither failed nor isolated, free for the next job or as a spare.
    fab = LocalFabric(2, spares=(1,), workdir=tmp_path / "w", hang_timeout_s=20)
    try:
        fab.launch(WorkerGroupSpec("job-kill", (0,), "debug", 12, checkpoint_interval=2,
                                   options={"step_delay_s": 0.1, "global_batch": 4, "seq_len": 32}))
        fab.wait("job-kill", 120, until=lambda s: (s.checkpoint_step or 0) >= 2)
        fab.kill_worker("job-kill", 0)
        st = fab.wait("job-kill", 180)
        assert st.state is RunState.FINISHED, st.reason
        [rec] = st.recoveries
        assert rec["path"] == "spare" and rec["moves"] == {"0": [0, 1]} and rec["chip"] == 0
        assert st.chips == (1,)
        assert fab.chip_states() == [ChipState.HEALTHY] * 2 and fab.check_chip_health(0) is None
        assert not [e for e in fab.events if e.kind == "chip-failed"]
        [recovered] = [e for e in fab.events if e.kind == "recovered"]
        assert recovered.chip == 0  # the event names the chip the rank was lost on
    finally:
        fab.close()


def test_placement_is_refused_on_a_fabric_that_does_not_place_gangs(tmp_path) -> None:
    from podfleet.control import ControlPlane
    from podfleet.engine.timeline import Timeline
    from podfleet.errors import InvalidInputError
    from podfleet.fabric.factory import make_fabric
    from podfleet.store.memory import MemoryStore

    plane = ControlPlane(MemoryStore(), Timeline(seed=1), fabric_factory=make_fabric, workdir=str(tmp_path))
    plane.create_cluster({"name": "loc", "fabric": "local", "chips": 2}, actor="t")
    plane.tl.run(plane.tl.now + 30)
    try:
        with pytest.raises(InvalidInputError, match="placement applies to fabrics that place a gang"):
            plane.jobs.submit("loc", {"model": "debug", "chips": 2, "steps": 4, "options": {"placement": "spread"}},
                              actor="t")
    finally:
        plane.delete_cluster("loc", actor="t")


def test_a_local_jobs_recovery_is_recorded_and_listed_like_the_twins(tmp_path) -> None:
    """Through the control plane as served: kill-worker on a 2-slot cluster without a spare;
    the job finishes, its recovery (path, resume time, steps lost) is in ``runtime`` and in
    ``recoveries`` (``podfleet alerts recoveries``)."""
    from podfleet import compose
    from podfleet.engine.timeline import Timeline
    from podfleet.store.memory import MemoryStore

    parts = compose.build(MemoryStore(), Timeline(seed=1, speed=1.0), workdir=str(tmp_path))
    plane = parts.plane
    plane.start()
    try:
        plane.call_sync(plane.create_cluster, {"name": "loc", "fabric": "local", "chips": 2}, actor="t")
        job = plane.call_sync(plane.jobs.submit, "loc", {
            "model": "debug", "chips": 2, "steps": 16, "checkpoint_interval": 4,
            "options": {"step_delay_s": 0.1, "global_batch": 4, "seq_len": 32}}, actor="t")
        jid = job["id"]
        deadline = time.monotonic() + 120
        while plane.jobs.describe(jid)["progress"]["step"] < 5:
            assert time.monotonic() < deadline, plane.jobs.describe(jid)["reason"]
            time.sleep(0.1)
        out = plane.call_sync(plane.inject_fault, "loc", "kill-worker", rank=1, actor="t")
        assert isinstance(out["pid"], int)
        while plane.jobs.describe(jid)["state"] not in ("SUCCEEDED", "FAILED"):
            assert time.monotonic() < deadline + 120, plane.jobs.describe(jid)["reason"]
            time.sleep(0.2)
        done = plane.jobs.describe(jid)
        assert done["state"] == "SUCCEEDED", done["reason"]
        [rec] = done["runtime"]["recoveries"]
        assert rec["path"] == "own-chip" and rec["state"] == "done" and rec["kind"] == "worker-lost"
        assert rec["mechanism"] == "rank-move"
        assert rec["resume_s"] > 0 and rec["steps_lost"] >= 0 and rec["restored_from"] in ("replica", "checkpoint")
        listed = plane.call_sync(parts.recovery.recoveries, "loc")
        assert [(r["id"], r["path"], r["job_id"]) for r in listed] == [(rec["id"], "own-chip", jid)]
        assert done["allocation"]["chips"] == [0, 1]
    finally:
        plane.stop()
