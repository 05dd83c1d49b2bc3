"""``podfleet sim SCENARIO.yaml``: rehearse a scenario with the whole control plane in
virtual time and print its report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, fail, stderr
from podfleet.errors import error_class


def sim(
    scenario: Path = typer.Argument(..., help="scenario YAML (see examples/ and docs/twin.md)"),
    events: Path | None = typer.Option(None, "--events", help="write the event log here as JSONL"),
    db: Path | None = typer.Option(None, "--db", help="keep the control plane's store in this SQLite file "
                                   "(default: in memory)"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Rehearse a scenario: the whole control plane (scheduler, balancer, health, recovery)
    on the digital twin in virtual time. Reports faults, recoveries, alerts, predictions,
    per-job ETTR and chip-hours lost by cause."""
    with errors():
        from podfleet.rehearsal.rehearsal import rehearse
        from podfleet.rehearsal.scenario import load_scenario

        sc = load_scenario(scenario)
        store = None
        if db is not None:
            from podfleet.store.db import Store

            store = Store(f"sqlite:///{db}")
        with Progress(TextColumn("rehearsing {task.description}", markup=False), BarColumn(), TimeElapsedColumn(),
                      console=stderr, transient=True) as bar:
            task = bar.add_task(f"{sc.name} ({sc.duration:g} s)", total=1.0)
            report = rehearse(sc, store=store, events_path=events, progress=lambda f: bar.update(task, completed=f))
        if output == OutputFormat.json:
            emit(report, output)
            _exit_if_refused(report["commands"])
            return
        jobs = report.pop("jobs")
        faults = report.pop("faults_by_kind")
        lost = report.pop("chip_hours_lost_by_cause")
        rec = report.pop("recoveries")
        alerts = report.pop("alerts")
        pred = report.pop("predictions")
        drains = report.pop("drains")
        commands = report.pop("commands")
        emit(report, output, title=f"scenario {sc.name}")
        emit([{"fault": k, "count": v} for k, v in faults.items()], output, title="faults_by_kind")
        emit([{"cause": k, "chip_hours": v} for k, v in lost.items()], output, title="chip_hours_lost_by_cause")
        emit({**rec.pop("by_path"), "count": rec["count"], "link_reroutes": rec["link_reroutes"],
              "p50_s": rec["p50_s"], "p99_s": rec["p99_s"]}, output, title="recoveries")
        if rec["sequence"]:
            emit([{**s, "job": s["job"] or "-", "steps": " > ".join(s["steps"])} for s in rec["sequence"]], output,
                 columns=["t", "kind", "target", "job", "path", "state", "duration_s", "steps"],
                 title="recovery sequence")
        emit({"total": alerts["total"], **{f"rule {k}": v for k, v in alerts["by_rule"].items()},
              **{f"severity {k}": v for k, v in alerts["by_severity"].items()}}, output, title="alerts")
        emit(pred, output, title="predictions (strict)")
        if drains:
            emit(drains, output, columns=["t", "chip", "probability", "drained", "drained_t", "job", "rank_to_chip",
                                          "drain_s", "failed_after", "averted"], title="predicted failures (drains)")
        if refused := _refused(commands):
            emit(refused, output, columns=["t", "command", "target", "result"], title="refused commands")
        if jobs:
            emit(jobs, output, columns=["job_id", "state", "step", "steps", "ettr", "balance_degree", "recoveries",
                                        "tokens_per_s"], title="jobs")
        _exit_if_refused(commands)


def _refused(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in commands if c["result"] != "ok"]


def _exit_if_refused(commands: list[dict[str, Any]]) -> None:
    """A scenario whose commands the control plane refused did not rehearse what it says:
    the report stands (stdout), and the exit code is the first refusal's, as the API's
    answer to that command would have given the CLI."""
    refused = _refused(commands)
    if not refused:
        return
    first = refused[0]
    cls = error_class(str(first.get("code", "")))
    fail(f"{len(refused)} of {len(commands)} scenario command(s) refused; first at t={first['t']:g} s: "
         f"{first['command']} {first['target']}: {first['result'].removeprefix('error: ')}", cls.exit_code)
