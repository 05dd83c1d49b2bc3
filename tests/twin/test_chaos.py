"""A chaos run: every fault kind, invariants after every event, one restart mid-recovery."""

from __future__ import annotations

from podfleet.twin.chaos import ChaosRun


def test_chaos_run_keeps_every_invariant(tmp_path) -> None:
    seed = 11
    r = ChaosRun(seed, faults=24, db_url=f"sqlite:///{tmp_path / 'c.db'}").run()
    assert r["invariant_violations"] == 0, f"seed {seed}: {r['first_violation']}"
    assert r["recovered"] == r["faults"] == 24, f"seed {seed}"
    assert r["jobs_lost"] == r["double_allocations"] == r["acked_writes_lost"] == 0
    assert r["restarts"] == 1 and all(v == 3 for v in r["by_kind"].values())
