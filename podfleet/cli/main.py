"""Entry point: builds the Typer app from one module per command group."""

from __future__ import annotations

import sys

import typer

from podfleet.cli import advise as advise_cli
from podfleet.cli import agent as agent_cli
from podfleet.cli import (
    alerts,
    audit,
    bench,
    chip,
    cluster,
    fault,
    firmware,
    hardware,
    job,
    maintenance,
    remote,
    token,
    topology,
    up,
)
from podfleet.cli import code as code_cli
from podfleet.cli import diagnose as diagnose_cli
from podfleet.cli import docs as docs_cli
from podfleet.cli import keys as keys_cli
from podfleet.cli import plan as plan_cli
from podfleet.cli import policy as policy_cli
from podfleet.cli import priorities as priority_cli
from podfleet.cli import queues as queue_cli
from podfleet.cli import report as report_cli
from podfleet.cli import reservations as reservation_cli
from podfleet.cli import sim as sim_cli
from podfleet.cli import status as status_cli
from podfleet.cli import usage as usage_cli
from podfleet.cli import user as user_cli
from podfleet.cli import verify as verify_cli
from podfleet.cli.group import PANELS, PodfleetGroup
from podfleet.errors import PodfleetError

app = typer.Typer(
    name="podfleet",
    cls=PodfleetGroup,
    help="Control plane for AI-training pods, with a built-in digital twin.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    # Help text is ours, not data, but plain text keeps patterns such as [a-z] intact.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"podfleet {version('podfleet')}")
        except PackageNotFoundError:  # running from a source tree that was never installed
            print("podfleet (not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="print the version and exit"),
    profile: str | None = typer.Option(None, "--profile", "-p", envvar="PODFLEET_PROFILE",
                                       help="a named profile of ~/.podfleet/config.toml (url, token_file)"),
) -> None:
    """Control plane for AI-training pods, with a built-in digital twin."""
    remote.selected_profile = profile

# One line per command group; each module owns its Typer app or commands. The panel
# groups the top-level help (cli.group draws the panels, sorted within each).
CLUSTERS, JOBS, CHIPS, HEALTH, SECURITY, TOOLS = PANELS
app.add_typer(cluster.app, name="cluster", rich_help_panel=CLUSTERS, cls=PodfleetGroup)
app.add_typer(hardware.app, name="hardware", rich_help_panel=CLUSTERS, cls=PodfleetGroup)
app.add_typer(firmware.app, name="firmware", rich_help_panel=CLUSTERS, cls=PodfleetGroup)
app.add_typer(maintenance.app, name="maintenance", rich_help_panel=CLUSTERS, cls=PodfleetGroup)
app.command("status", rich_help_panel=CLUSTERS)(status_cli.status)
app.add_typer(job.app, name="job", rich_help_panel=JOBS, cls=PodfleetGroup)
app.add_typer(code_cli.app, name="code", rich_help_panel=JOBS, cls=PodfleetGroup)
app.command("plan", rich_help_panel=JOBS)(plan_cli.plan)
app.add_typer(queue_cli.app, name="queue", rich_help_panel=JOBS, cls=PodfleetGroup)
app.add_typer(reservation_cli.app, name="reservation", rich_help_panel=JOBS, cls=PodfleetGroup)
app.add_typer(priority_cli.app, name="priority-class", rich_help_panel=JOBS, cls=PodfleetGroup)
app.command("usage", rich_help_panel=JOBS)(usage_cli.usage)
app.add_typer(chip.app, name="chip", rich_help_panel=CHIPS, cls=PodfleetGroup)
app.add_typer(fault.app, name="fault", rich_help_panel=CHIPS, cls=PodfleetGroup)
app.add_typer(alerts.app, name="alerts", rich_help_panel=HEALTH, cls=PodfleetGroup)
app.command("verify", rich_help_panel=HEALTH)(verify_cli.verify)
app.command("diagnose", rich_help_panel=HEALTH)(diagnose_cli.diagnose)
app.command("advise", rich_help_panel=HEALTH)(advise_cli.advise)
app.command("report", rich_help_panel=HEALTH)(report_cli.report)
app.add_typer(audit.app, name="audit", rich_help_panel=SECURITY, cls=PodfleetGroup)
app.add_typer(token.app, name="token", rich_help_panel=SECURITY, cls=PodfleetGroup)
app.add_typer(user_cli.app, name="user", rich_help_panel=SECURITY, cls=PodfleetGroup)
app.add_typer(policy_cli.app, name="policy", rich_help_panel=SECURITY, cls=PodfleetGroup)
app.add_typer(keys_cli.app, name="keys", rich_help_panel=SECURITY, cls=PodfleetGroup)
app.command("up", rich_help_panel=TOOLS)(up.up)
app.add_typer(agent_cli.app, name="agent", rich_help_panel=TOOLS, cls=PodfleetGroup)
app.command("sim", rich_help_panel=TOOLS)(sim_cli.sim)
app.add_typer(topology.app, name="topology", rich_help_panel=TOOLS, cls=PodfleetGroup)
app.add_typer(bench.app, name="bench", rich_help_panel=TOOLS, cls=PodfleetGroup)
app.command("docs", rich_help_panel=TOOLS)(docs_cli.docs)


def main() -> None:
    try:
        app()
    except PodfleetError as exc:  # last resort: a command that forgot its guard
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
