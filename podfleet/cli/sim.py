"""``podfleet sim SCENARIO.yaml``: run a twin scenario in virtual time and print its report."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, stderr


def sim(
    scenario: Path = typer.Argument(..., help="scenario YAML (see examples/ and docs/twin.md)"),
    events: Path | None = typer.Option(None, "--events", help="write the event log here as JSONL"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Run a scenario on the digital twin; report faults by kind, chip-hours lost, speed."""
    with errors():
        from podfleet.twin.scenario import load_scenario, run_scenario

        sc = load_scenario(scenario)
        with Progress(TextColumn("simulating {task.description}"), BarColumn(), TimeElapsedColumn(),
                      console=stderr, transient=True) as bar:
            task = bar.add_task(f"{sc.name} ({sc.duration:g} s)", total=1.0)
            report = run_scenario(sc, events_path=events, progress=lambda f: bar.update(task, completed=f))
        if output == OutputFormat.json:
            emit(report, output)
            return
        jobs = report.pop("jobs")
        faults = report.pop("faults_by_kind")
        emit(report, output, title=f"scenario {sc.name}")
        emit([{"fault": k, "count": v} for k, v in faults.items()], output, title="faults_by_kind")
        if jobs:
            emit(jobs, output, columns=["job_id", "state", "step", "steps", "loss", "tokens_per_s"], title="jobs")
