"""Entry point: builds the Typer app from one module per command group."""

from __future__ import annotations

import sys

import typer

from podfleet.cli import bench, topology
from podfleet.errors import PodfleetError

app = typer.Typer(
    name="podfleet",
    help="Control plane for AI-training pods, with a built-in digital twin.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# One line per command group; each module owns its Typer app or commands.
app.add_typer(topology.app, name="topology")
app.add_typer(bench.app, name="bench")


def main() -> None:
    try:
        app()
    except PodfleetError as exc:  # last resort: a command that forgot its guard
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
