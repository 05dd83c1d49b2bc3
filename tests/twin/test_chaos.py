"""Chaos on the rehearsal path: the real control plane on a SQLite file, killed and
restarted mid-run; and the counting catches broken recovery and lost writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from podfleet.control.jobs import JobManager
from podfleet.recovery.service import RecoveryService
from podfleet.store.db import Store
from podfleet.store.records import JobRecord
from podfleet.twin.chaos import ChaosRun


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
