"""Following work: ``--watch`` redraws, and waiting for a job with a progress bar and ETA.

Both poll the API's describe/list reads (cheap: views are pre-rendered on the server)
at a steady interval; nothing here talks to the server but through the SDK's public
methods.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, Record, emit, print_table, stdout, table_of
from podfleet.cli.remote import remote_command
from podfleet.sdk import PodfleetClient

ETA_COLUMNS = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
               TextColumn("eta"), TimeRemainingColumn())
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")
# ``job wait``'s exit code by the job's final state (124, as timeout(1), when it gave up).
WAIT_CODES = {"SUCCEEDED": 0, "FAILED": 1, "STOPPED": 7}
POLL_S = 1.0


def watch(rows: Callable[[], list[dict[str, Any]]], output: OutputFormat, *, columns: list[str],
          interval_s: float, rounds: int | None = None) -> None:
    """Redraw ``rows()`` every ``interval_s`` until Ctrl-C (or ``rounds`` redraws). On a
    terminal the table is redrawn in place; piped, a new table (or JSON document) is
    printed only when something changed."""
    last: object = None
    n = 0
    try:
        if output == OutputFormat.table and stdout.is_terminal:
            with Live(table_of(rows(), columns), console=stdout, auto_refresh=False) as live:
                while rounds is None or n < rounds:
                    time.sleep(interval_s)
                    live.update(table_of(rows(), columns), refresh=True)
                    n += 1
            return
        while rounds is None or n < rounds:
            data = rows()
            if data != last:
                if output == OutputFormat.table:
                    print_table(table_of(data, columns))
                else:
                    emit(data, output)
                last = data
            n += 1
            if rounds is None or n < rounds:
                time.sleep(interval_s)
    except KeyboardInterrupt:
        return


def wait_for(c: PodfleetClient, job_id: str, *, timeout_s: float | None, show: bool) -> dict[str, Any]:
    """Poll the job until it ends (or ``timeout_s`` passes); its last view. ``show``: a
    progress bar with ETA on stderr while it runs."""
    from podfleet.cli.output import stderr

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    job = c.describe_training_job(job_id)
    with Progress(*ETA_COLUMNS, console=stderr, disable=not show, transient=True) as bar:
        task = bar.add_task(f"{job['id']} {job['state']}", total=job["progress"].get("steps") or None)
        while job["state"] not in ENDED:
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic())))
            job = c.describe_training_job(job["id"])
            p = job["progress"]
            bar.update(task, completed=p.get("step", 0), total=p.get("steps") or None,
                       description=f"{job['id']} {job['state']}")
    return job.to_dict()


def follow_rollout(label: str, describe: Callable[[], Record], *, show: bool) -> Record:
    """Poll a rollout (firmware or maintenance) with a progress bar until it is no longer
    running; its last description is the answer."""
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  disable=not show, transient=True) as bar:
        task = bar.add_task(label, total=1.0)
        while True:
            r = describe()
            bar.update(task, completed=r["progress"])
            if r["state"] != "running":
                return r
            time.sleep(0.5)


@dataclass(frozen=True)
class RolloutCommands:
    """What ``firmware`` and ``maintenance`` share: start-then-maybe-follow, and status as
    one rollout or the list; they differ in the noun, the client's reads and the columns."""

    noun: str
    prefix: str  # of its rollouts' ids
    describe: Callable[[PodfleetClient, str, str], Record]
    list_all: Callable[[PodfleetClient, str], Record]
    columns: list[str]

    def started(self, c: PodfleetClient, cluster: str, r: Record, *, wait: bool,
                output: OutputFormat) -> None:
        if wait:
            rid = r["id"]
            r = follow_rollout(f"{self.noun} {rid}", lambda: self.describe(c, cluster, rid),
                               show=output == OutputFormat.table)
        emit(r, output, title=f"{self.noun} rollout")

    def add_status_command(self, app: typer.Typer, help_text: str) -> None:
        """``status CLUSTER [ROLLOUT]``: one rollout, or the list of them."""

        @app.command("status", help=help_text)
        @remote_command
        def status(
            c: PodfleetClient,
            cluster: str = ClusterArg,
            rollout: str | None = typer.Argument(None, help=f"{self.prefix}...; default: all rollouts"),
            output: OutputFormat = OutputOpt,
        ) -> None:
            if rollout:
                emit(self.describe(c, cluster, rollout), output, title=f"{self.noun} rollout")
            else:
                emit(self.list_all(c, cluster)["rollouts"], output, title=f"{self.noun} rollouts",
                     columns=self.columns)
