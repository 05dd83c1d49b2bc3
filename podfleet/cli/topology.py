"""``podfleet topology show TYPE``."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.hardware.catalog import get_topology

app = typer.Typer(help="Topologies: shape and figures.", no_args_is_help=True)


@app.command("show")
def show(
    name: str = typer.Argument(..., help="e.g. trn2-ultraserver, trn2-node, dgx-a100, or NAME:COUNT for a fleet"),
    output: OutputFormat = OutputOpt,
) -> None:
    """A topology's chips, dims, links, diameter, average hops and bisection bandwidth."""
    with errors():
        emit(get_topology(name).summary(), output, title=name)
