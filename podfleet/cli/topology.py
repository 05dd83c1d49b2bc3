"""``podfleet topology show TYPE``."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors

app = typer.Typer(help="Topologies: shape and figures.", no_args_is_help=True)


@app.command("show")
def show(
    name: str = typer.Argument(..., help="e.g. trn2-ultraserver, trn2-node, dgx-a100, or NAME:COUNT for a fleet"),
    output: OutputFormat = OutputOpt,
) -> None:
    """A topology's chips, dims, links, diameter, average hops and bisection bandwidth."""
    # numpy and networkx: loaded by this command only, not by every other one's start.
    from podfleet.hardware.catalog import get_topology

    with errors():
        emit(get_topology(name).summary(), output, title=name)
