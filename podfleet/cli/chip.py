"""``podfleet chip cordon|drain|uncordon|repair CLUSTER CHIP``: the operator's chip lifecycle."""

from __future__ import annotations

from collections.abc import Callable

import typer

from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, Record, emit
from podfleet.cli.remote import TokenOpt, UrlOpt, remote
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Chip lifecycle: cordon, drain, uncordon, repair.", no_args_is_help=True)
COLUMNS = ["cluster", "chip", "state", "mode", "spare", "job"]


def _run(action: Callable[[PodfleetClient], Record], url: str, token: str | None,
         output: OutputFormat, title: str) -> None:
    with remote(url, token) as c:
        emit(action(c), output, columns=COLUMNS, title=title)


ReasonOpt = typer.Option(None, "--reason", help="why, in a few words (kept in the audit trail and the "
                         "cluster's events)")


@app.command("cordon")
def cordon(cluster: str = ClusterArg, chip: int = typer.Argument(..., help="chip index"),
           reason: str | None = ReasonOpt,
           url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Keep new placements and rank moves off the chip (work on it keeps running)."""
    _run(lambda c: c.cordon_chip(cluster, chip, reason=reason), url, token, output, f"chip {chip} cordoned")


@app.command("drain")
def drain(cluster: str = ClusterArg, chip: int = typer.Argument(..., help="chip index"),
          reason: str | None = ReasonOpt,
          url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Cordon, and move the chip's rank to a spare or free chip (mode draining, then cordoned)."""
    _run(lambda c: c.drain_chip(cluster, chip, reason=reason), url, token, output, f"chip {chip} drain")


@app.command("uncordon")
def uncordon(cluster: str = ClusterArg, chip: int = typer.Argument(..., help="chip index"),
             url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Return the chip to placement."""
    _run(lambda c: c.uncordon_chip(cluster, chip), url, token, output, f"chip {chip} uncordoned")


@app.command("repair")
def repair(cluster: str = ClusterArg, chip: int = typer.Argument(..., help="chip index"),
           url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Return a failed or isolated chip no job holds to service (local/ray: its worker slot)."""
    _run(lambda c: c.repair_chip(cluster, chip), url, token, output, f"chip {chip} repaired")
