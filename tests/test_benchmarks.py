"""The benchmark runner: every benchmark the issues name is registered, one runs in
quick mode and prints its figures as JSON, and an unknown name is a one-line error."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from podfleet.cli.main import app

runner = CliRunner()

NAMED_IN_ISSUES = {
    "twin-pod", "twin-fleet", "api-latency", "planner-time", "perf-validation", "placement", "balance",
    "trace-replay", "chaos", "recovery-time", "ettr", "firmware", "health-scan", "prediction",
    "recovery-real", "runtime-overhead", "checkpoint-io", "balance-real", "rehearsal-pod", "rehearsal-fleet",
    "compression", "congestion", "link-failover", "recovery-ray", "tenancy", "fleet-api", "restart-real",
    "ha-failover", "maintenance-real",
}


def test_every_named_benchmark_is_registered() -> None:
    r = runner.invoke(app, ["bench", "list", "--output", "json"])
    assert r.exit_code == 0
    assert {b["name"] for b in json.loads(r.stdout)} >= NAMED_IN_ISSUES


def test_quick_run_prints_figures() -> None:
    r = runner.invoke(app, ["bench", "run", "twin-pod", "--quick", "--output", "json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["benchmark"] == "twin-pod" and out["quick"] is True
    assert out["speedup_x"] > 0 and out["sim_s"] == 7200.0 and "machine" in out and "date" in out


def test_unknown_benchmark_is_one_line() -> None:
    r = runner.invoke(app, ["bench", "run", "nope"])
    assert r.exit_code == 2 and "unknown benchmark" in r.stderr and "twin-pod" in r.stderr


def test_a_fabric_a_benchmark_does_not_offer_is_one_line() -> None:
    r = runner.invoke(app, ["bench", "run", "balance-real", "--fabric", "sim"])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
    assert "runs on local, ray, not --fabric sim" in r.stderr, r.stderr
    r = runner.invoke(app, ["bench", "run", "twin-pod", "--fabric", "ray"])
    assert r.exit_code == 2 and "has no --fabric choice" in r.stderr and "balance-real" in r.stderr, r.stderr


@pytest.mark.realproc
def test_recovery_real_quick_moves_every_killed_rank_through_the_control_plane() -> None:
    """recovery-real --quick: two kill -9 of a real local worker through the control plane;
    each one is a rank move (the other rank's process kept), none a relaunch, no step lost.
    Its times are figures for docs/benchmarks.md, not asserted here."""
    r = runner.invoke(app, ["bench", "run", "recovery-real", "--quick", "--output", "json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kills"] == 2 and out["paths"] == {"rank-move": 2, "relaunch": 0}
    assert out["survivor_pid_kept"] == 2 and out["failed_recoveries"] == 0 and out["steps_lost_max"] == 0
    assert len(out["kill_to_step_s"]) == 2 and all(t > 0 for t in out["kill_to_step_s"])
    assert out["kill_to_step_s_p99"] >= out["kill_to_step_s_p50"] > 0
    ph = out["phases_p50_s"]  # where the seconds went, from the fabric's records
    assert {"detected", "spawned", "moved_joined", "moved_synced", "kept_lost", "kept_synced", "first_step"} <= set(ph)
def test_ha_failover_counts_unavailability_and_double_allocations() -> None:
    """ha-failover's counting, on hand-made samples (the quick run itself needs PostgreSQL
    and three servers: ``podfleet bench run ha-failover --quick``)."""
    from podfleet.benchmarks import discover

    mod = discover()["ha-failover"].module
    _double_allocations, _unavailable = mod._double_allocations, mod._unavailable

    writes = [(1.0, "submit", 201), (2.0, "stop", 503), (2.5, "submit", 0), (4.0, "submit", 201),
              (9.0, "create", 202), (11.0, "submit", 201)]
    # Kill at 1.5: refused from 2.0 until the write acknowledged at 4.0; kill at 10: none refused.
    assert _unavailable(writes, [1.5, 10.0]) == [2.0, 0.0]
    jobs = [{"state": "RUNNING", "cluster_id": "a", "allocation": {"chips": [0, 1]}},
            {"state": "RUNNING", "cluster_id": "a", "allocation": {"chips": [1, 2]}},
            {"state": "STOPPED", "cluster_id": "a", "allocation": {"chips": [2]}},
            {"state": "RUNNING", "cluster_id": "b", "allocation": {"chips": [0]}}]
    assert _double_allocations(jobs) == 1


def test_recovery_time_puts_each_assumption_beside_its_headline_largest_first() -> None:
    """recovery-time's ``{path}_p50_s_sensitivity``: the p50 at half / twice each constant,
    the one that moves it most first (hand-made sensitivity rows; the run itself is long)."""
    from podfleet.benchmarks import discover

    mod = discover()["recovery-time"].module
    sens = {name: {"half": {"replica": 1.0, "checkpoint": 5.0}, "twice": {"replica": 1.0, "checkpoint": 5.0}}
            for name in mod.SENSITIVITY}
    sens["hang_timeout_s"] = {"half": {"replica": 2.0, "checkpoint": 9.0}, "twice": {"replica": 6.5, "checkpoint": 10.0}}
    sens["checkpoint_bw_bytes_per_s"] = {"half": {"replica": 3.7, "checkpoint": 19.0},
                                         "twice": {"replica": 3.7, "checkpoint": 9.0}}
    rep, ck = mod.beside(sens, "replica"), mod.beside(sens, "checkpoint")
    assert next(iter(rep)) == "hang_timeout_s" and rep["hang_timeout_s"] == {"half": 2.0, "twice": 6.5}
    assert next(iter(ck)) == "checkpoint_bw_bytes_per_s" and set(ck) == set(mod.SENSITIVITY)
    assert "fixed_cost_scale" in mod.SENSITIVITY  # the measured costs' one assumption is varied too
