"""Entry point: builds the Typer app from one module per command group."""

from __future__ import annotations

import sys

import typer

from podfleet.cli import (
    alerts,
    audit,
    bench,
    cluster,
    fault,
    firmware,
    hardware,
    job,
    token,
    topology,
    up,
)
from podfleet.cli import plan as plan_cli
from podfleet.cli import sim as sim_cli
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
app.command("sim")(sim_cli.sim)
app.command("plan")(plan_cli.plan)
app.command("up")(up.up)
app.add_typer(cluster.app, name="cluster")
app.add_typer(hardware.app, name="hardware")
app.add_typer(job.app, name="job")
app.add_typer(fault.app, name="fault")
app.add_typer(audit.app, name="audit")
app.add_typer(alerts.app, name="alerts")
app.add_typer(firmware.app, name="firmware")
app.add_typer(token.app, name="token")


def main() -> None:
    try:
        app()
    except PodfleetError as exc:  # last resort: a command that forgot its guard
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
