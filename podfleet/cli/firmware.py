"""``podfleet firmware update CLUSTER --version V [--unit chip|node] [--chip N ...] [--wait]``
and ``podfleet firmware status CLUSTER [ROLLOUT]``."""

from __future__ import annotations

import typer

from podfleet.cli.follow import follow_rollout
from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError
from podfleet.recovery.firmware import KNOWN_VERSIONS

app = typer.Typer(help="Rolling firmware updates.", no_args_is_help=True)
UNITS = ("chip", "node")


@app.command("update")
def update(
    cluster: str = typer.Argument(..., help="id or name"),
    version: str = typer.Option(..., "--version", help=f"firmware version to roll out: {', '.join(KNOWN_VERSIONS)}"),
    unit: str = typer.Option("chip", "--unit", help="chip or node (16 chips) at a time"),
    chip: list[int] = typer.Option(None, "--chip", help="only these chips (repeat); default: all"),
    wait: bool = typer.Option(False, "--wait", help="follow the rollout to its end"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Start a rolling update: one chip (or node) at a time, work moved to a spare first,
    a health check after each, automatic rollback on failure."""
    with errors():
        if unit not in UNITS:
            raise InvalidInputError(f"--unit must be chip or node, got {unit!r}", field="unit", allowed=list(UNITS))
        c = client(url, token)
        r = c.start_firmware(cluster, version, unit=unit, chips=chip or None)
        if wait:
            rid = r["id"]
            r = follow_rollout(f"firmware {rid}", lambda: c.describe_firmware(cluster, rid),
                               show=output == OutputFormat.table)
        emit(r, output, title="firmware rollout")


@app.command("status")
def status(
    cluster: str = typer.Argument(..., help="id or name"),
    rollout: str | None = typer.Argument(None, help="fw-...; default: all rollouts"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Progress of firmware rollouts."""
    with errors():
        c = client(url, token)
        if rollout:
            emit(c.describe_firmware(cluster, rollout), output, title="firmware rollout")
        else:
            emit(c.list_firmware(cluster)["rollouts"], output,
                 title="firmware rollouts", columns=["id", "version", "unit", "state", "progress", "chips", "reason"])
