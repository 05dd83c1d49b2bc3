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
    "compression", "congestion", "link-failover", "recovery-ray", "tenancy", "fleet-api",
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
