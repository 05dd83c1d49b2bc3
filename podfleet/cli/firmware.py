"""``podfleet firmware update CLUSTER --version V [--unit chip|node] [--chip N ...] [--wait]``
and ``podfleet firmware status CLUSTER [ROLLOUT]``."""

from __future__ import annotations

import typer

from podfleet.cli.follow import RolloutCommands
from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError
from podfleet.hardware.specs import FIRMWARE_VERSIONS as KNOWN_VERSIONS
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Rolling firmware updates.", no_args_is_help=True)
UNITS = ("chip", "node")
ROLLOUTS = RolloutCommands("firmware", "fw-", PodfleetClient.describe_firmware, PodfleetClient.list_firmware,
                           ["id", "version", "unit", "state", "progress", "chips", "reason"])


@app.command("update")
def update(
    cluster: str = ClusterArg,
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
        ROLLOUTS.started(c, cluster, c.start_firmware(cluster, version, unit=unit, chips=chip or None),
                         wait=wait, output=output)


ROLLOUTS.add_status_command(app, "Progress of firmware rollouts.")
