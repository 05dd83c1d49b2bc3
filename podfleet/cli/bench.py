"""``podfleet bench list`` / ``podfleet bench run NAME [--quick] [--fleet] [--fabric F]``."""

from __future__ import annotations

import typer

from podfleet import benchmarks
from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors

app = typer.Typer(help="Benchmarks in bench/.", no_args_is_help=True)


@app.command("list")
def list_(output: OutputFormat = OutputOpt) -> None:
    """The benchmarks available."""
    rows = [{"name": b.name, "description": b.description} for b in benchmarks.discover().values()]
    emit(rows, output, columns=["name", "description"])


@app.command("run")
def run(
    name: str = typer.Argument(..., help="a benchmark (podfleet bench list)"),
    quick: bool = typer.Option(False, "--quick", help="a shortened run for smoke checks"),
    fleet: bool = typer.Option(False, "--fleet", help="the fleet variant (trace-replay: 64 pods, 1-4,096 chips)"),
    fabric: str | None = typer.Option(None, "--fabric", help="where a real-worker benchmark runs, for those that "
                                      "offer a choice (balance-real: local, the default, or ray)"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Run one benchmark and print its named figures."""
    with errors():
        emit(benchmarks.run(name, quick=quick, fleet=fleet, fabric=fabric), output, title=name)
