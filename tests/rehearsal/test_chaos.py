"""Chaos on the rehearsal path: the real control plane on a SQLite file, killed and
restarted mid-run; and the counting catches broken recovery and lost writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from podfleet.control.jobs import JobManager
from podfleet.fabric.base import ChipState, FaultInjection, LinkState
from podfleet.hardware.faults import FaultKind
from podfleet.recovery.orchestrator import RecoveryOrchestrator, cause_kind
from podfleet.recovery.service import RecoveryService
from podfleet.rehearsal.chaos import CLUSTER, EXPECTED_FLOW, ChaosRun, Fault
from podfleet.store.db import Store
from podfleet.store.records import JobRecord


def test_chaos_run_recovers_every_interrupting_fault(tmp_path: Path) -> None:
    seed = 11
    r = ChaosRun(seed, faults=16, db_path=str(tmp_path / "c.db"), restarts=2).run()
    assert r["invariant_violations"] == 0, f"seed {seed}: {r['violations']}"
    assert r["interrupting_faults"] > 0
    assert r["recovered"] == r["interrupting_faults"], f"seed {seed}: {r['unrecovered']}"
    assert r["jobs_lost"] == r["double_allocations"] == r["acked_writes_lost"] == 0, r
    assert r["restarts"] == 2 and all(v == 2 for v in r["by_kind"].values())
    assert r["acked_writes"] >= 5


def test_recovery_that_does_nothing_is_counted_as_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def swallow(self: RecoveryService, rt: Any, ev: Any) -> bool:
        return ev.kind == "chip-failed" or ev.kind.startswith("link-")  # "handled", nothing done

    monkeypatch.setattr(RecoveryService, "on_event", swallow)
    r = ChaosRun(3, faults=8, db_path=str(tmp_path / "c.db"), restarts=0).run()
    assert r["jobs_lost"] > 0 and r["recovered"] < r["interrupting_faults"], r
    assert r["invariant_violations"] > 0  # jobs shown RUNNING while the twin has them paused
    assert any("paused" in v for v in r["violations"]), r["violations"]


def test_a_relaunch_that_never_happens_is_counted_as_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(JobManager, "relaunch", lambda self, rt, job: None)
    r = ChaosRun(5, faults=8, db_path=str(tmp_path / "c.db"), restarts=1).run()
    assert r["restarts"] == 1
    assert r["jobs_lost"] >= 3, r["lost"]  # every resident job stays RECOVERING after the restart


class DroppingStore(Store):
    """A store whose commits of stopped jobs silently go nowhere."""

    def save_job(self, rec: JobRecord) -> None:
        if rec.state != "STOPPED":
            super().save_job(rec)


def test_an_acknowledged_write_lost_in_a_restart_is_counted(tmp_path: Path) -> None:
    r = ChaosRun(7, faults=24, db_path=str(tmp_path / "c.db"), restarts=1, open_store=DroppingStore).run()
    assert r["restarts"] == 1
    assert r["acked_writes_lost"] >= 1, r
    assert all("store says" in a for a in r["acked_lost"]), r["acked_lost"]


BURST_LEAD_S = 60.0  # how long after its corrected burst a chip's HBM fails (the test's precursor)


def _bursts_announce_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make each corrected-ECC burst on a job's chip what the drain exists for: the
    chip's HBM fails uncorrectably ``BURST_LEAD_S`` later unless it is out of service by
    then, and the failure predictor alarms at the burst (the alarm is the test's: the
    predictor's own recall is the ``prediction`` benchmark's, and a single burst over the
    field's background does not reach its threshold, so in the benchmark's chaos run no
    burst needs the drain: all are ``no_action_needed``)."""
    original = ChaosRun.inject

    def fail(run: ChaosRun, chip: int) -> None:
        if run.rt.chip_states()[chip] in (ChipState.HEALTHY, ChipState.DEGRADED):
            run.plane.inject_fault(CLUSTER, "hbm-uncorrectable", chip=chip, actor="test")

    def inject(self: ChaosRun, i: int, kind: FaultKind) -> Fault:
        f = original(self, i, kind)
        if kind == FaultKind.HBM_CORRECTED_BURST and f.job is not None:
            chip = int(f.target.split()[1])
            self.parts.recovery.drain_chip(self.rt, chip, "failure predicted (the test's alarm)")
            self.plane.tl.call_at(BURST_LEAD_S, lambda: fail(self, chip))
        return f

    monkeypatch.setattr(ChaosRun, "inject", inject)


@pytest.mark.parametrize("flow", ["chip-failure", "ecc", "thermal", "link", "drain"])
def test_each_disabled_recovery_flow_is_reported_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      flow: str) -> None:
    """With one recovery flow switched off, the faults that need it are not counted
    recovered: chaos reports the loss, whatever the other flows do. The drain: a burst
    that announces a failure, with the predictor's alarm raised but no drain run, is
    lost when the failure lands on the job (the ecc flow that recovers the job then is
    not the flow the burst needed)."""
    if flow == "drain":
        _bursts_announce_failures(monkeypatch)
        monkeypatch.setattr(RecoveryOrchestrator, "drain", lambda self, chip, reason: None)
    elif flow == "link":
        monkeypatch.setattr(RecoveryOrchestrator, "link_fault", lambda self, link, state, reason: None)
    else:
        original = RecoveryOrchestrator.chip_fault

        def chip_fault(self: RecoveryOrchestrator, chip: int, cause: str) -> Any:
            return None if cause_kind(cause) == flow else original(self, chip, cause)

        monkeypatch.setattr(RecoveryOrchestrator, "chip_fault", chip_fault)
    r = ChaosRun(11, faults=8, db_path=str(tmp_path / "c.db"), restarts=0).run()
    needing = {k for k, f in EXPECTED_FLOW.items() if f == flow}
    missed = [u for u in r["unrecovered"] if u.split(" at ")[0] in needing]
    assert missed, r
    assert r["recovered"] < r["interrupting_faults"]


def test_a_burst_drained_before_its_failure_is_recovered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of the drain's case above: with the drain on, the same bursts are
    drained before their chips fail, and none is lost."""
    _bursts_announce_failures(monkeypatch)
    r = ChaosRun(11, faults=8, db_path=str(tmp_path / "c.db"), restarts=0).run()
    bursts = [u for u in r["unrecovered"] if u.startswith(FaultKind.HBM_CORRECTED_BURST.value)]
    assert not bursts, r
    assert r["recovered"] == r["interrupting_faults"], r["unrecovered"]


def test_a_restart_mid_recovery_adopts_the_flow_it_was_cut_off_in(tmp_path: Path) -> None:
    """A firmware fault's chip-failure flow cut at ``detect`` by a restart 5 ms later: the
    new plane adopts the journaled flow (the chip is isolated before the relaunch, the job
    comes back from its checkpoint) instead of relaunching the job onto the faulty chip."""
    run = ChaosRun(0, faults=0, db_path=str(tmp_path / "c.db"), restarts=0)
    run.setup()
    job_id = run.resident[0]
    chip = run.rt.owners.chips_of(job_id)[3]
    t0 = run.plane.tl.now
    run.plane.inject_fault(CLUSTER, "firmware-fault", chip=chip, actor="test")
    run.advance(t0 + 0.005)
    cut = run.plane.table.find(job_id).status.recovery
    assert cut is not None and cut["step"] == "detect" and cut["state"] == "running"
    run.restart()
    assert run.rt.chip_states()[chip] == ChipState.ISOLATED  # before any placement
    run.advance(t0 + 120.0)
    orch = run.parts.recovery.orchestrator(run.rt.id)
    assert orch is not None
    rec = next(r for r in orch.done if r.id == cut["id"])
    names = [s.name for s in rec.steps]
    assert rec.kind == "chip-failure" and rec.state.value == "done" and rec.restored_from == "checkpoint", names
    assert names[:3] == ["detect", "adopted", "isolate"] and names[-1] == "restore"
    job = run.plane.table.find(job_id)
    assert job.state.value == "RUNNING" and chip not in job.chips
    assert job.status.recovery is not None and job.status.recovery["state"] == "done"
    assert run.rt.chip_states()[chip] == ChipState.HEALTHY  # the firmware reset brought it back


def test_a_slowdown_after_a_later_fault_on_the_job_is_the_later_faults(tmp_path: Path) -> None:
    """A fault's slowdown is looked for until the next fault hits the same job: a slower
    report seen after that is the later fault's (judged against its own rate before)."""
    run = ChaosRun(0, faults=0, db_path=str(tmp_path / "c.db"), restarts=0)
    run.setup()
    job_id = run.resident[0]
    run.advance(run.plane.tl.now + 300.0)  # a fresh progress report since the marks below
    n = len(run.plane.table.find(job_id).chips)
    # Rates before far above anything the job reports: any fresh report reads as slower.
    first = Fault(0, "link-flap", 0.0, "link 0-1", 0, job_id, rate_before=1e12, chips_before=n, view_mark=-1)
    later = Fault(1, "chip-failure", 1.0, "chip 0", None, job_id, rate_before=1e12, chips_before=n, view_mark=-1)
    run.log = [first]
    assert run._effect(first, rates=True) == "slowed"
    run.log = [first, later]
    assert run._effect(first, rates=True) is None
    assert run._effect(later, rates=True) == "slowed"


def test_a_link_down_before_a_restart_is_down_after_it_and_its_job_still_degraded(tmp_path: Path) -> None:
    """Restarts keep down links: the restarted plane sets the link down again on its fresh
    twin, and the job, relaunched over the same detour, is still shown degraded with the
    link as its reason (its step time before the fault was kept with the job), until the
    link is repaired."""
    run = ChaosRun(0, faults=0, db_path=str(tmp_path / "c.db"), restarts=0)
    run.setup()
    job_id = run.resident[0]
    link = next(lk for lk in run.rt.topology.links if (lk.src, lk.dst) == (18, 22))
    assert {18, 22} <= set(run.plane.table.find(job_id).chips)  # inside the job's block
    run.plane.inject_fault(CLUSTER, "link-down", link="18-22", actor="test")
    run.advance(run.plane.tl.now + 150.0)
    before = run.plane.table.find(job_id).status
    assert before.reason.startswith("degraded: link 18-22 down"), before.reason
    # Any later save (a checkpoint, a reason) stores the step time over the detour: the
    # restarted plane must not take that for the job's rate before the fault.
    run.plane.table.save(run.plane.table.find(job_id))
    run.restart()
    assert run.rt.fabric.link_states()[link.index] == LinkState.DOWN
    run.advance(run.plane.tl.now + 300.0)
    job = run.plane.table.find(job_id)
    assert job.state.value == "RUNNING" and job.status.progress.step > 0
    assert job.status.reason.startswith("degraded: link 18-22 down"), job.status.reason
    assert job.status.progress.step_time_s > 1.05 * before.link_baselines[str(link.index)][0]
    fab = run.rt.fabric
    assert isinstance(fab, FaultInjection)
    fab.repair_link(link.index, "reseated by the test")
    run.advance(run.plane.tl.now + 300.0)
    job = run.plane.table.find(job_id)
    assert not job.status.reason.startswith("degraded"), job.status.reason
    assert job.status.link_baselines == {} and run.rt.rec.status.links is None
    run.restart()  # repaired before this restart: up after it
    assert run.rt.fabric.link_states()[link.index] == LinkState.UP
