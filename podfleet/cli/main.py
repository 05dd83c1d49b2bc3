"""Entry point: builds the Typer app from one module per command group."""

from __future__ import annotations

import sys
from collections.abc import Callable

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

# Every command group and top-level command by help panel, in the order the help lists
# them; each module owns its Typer app (a group) or its one command (cli.group draws the
# panels, sorted within each).
CLUSTERS, JOBS, CHIPS, HEALTH, SECURITY, TOOLS = PANELS
COMMANDS: dict[str, dict[str, typer.Typer | Callable[..., None]]] = {
    CLUSTERS: {"cluster": cluster.app, "hardware": hardware.app, "firmware": firmware.app,
               "maintenance": maintenance.app, "status": status_cli.status},
    JOBS: {"job": job.app, "code": code_cli.app, "plan": plan_cli.plan, "queue": queue_cli.app,
           "reservation": reservation_cli.app, "priority-class": priority_cli.app, "usage": usage_cli.usage},
    CHIPS: {"chip": chip.app, "fault": fault.app},
    HEALTH: {"alerts": alerts.app, "verify": verify_cli.verify, "diagnose": diagnose_cli.diagnose,
             "advise": advise_cli.advise, "report": report_cli.report},
    SECURITY: {"audit": audit.app, "token": token.app, "user": user_cli.app, "policy": policy_cli.app,
               "keys": keys_cli.app},
    TOOLS: {"up": up.up, "agent": agent_cli.app, "sim": sim_cli.sim, "topology": topology.app, "bench": bench.app,
            "docs": docs_cli.docs},
}
for panel, parts in COMMANDS.items():
    for name, part in parts.items():
        if isinstance(part, typer.Typer):
            app.add_typer(part, name=name, rich_help_panel=panel, cls=PodfleetGroup)
        else:
            app.command(name, rich_help_panel=panel)(part)

def main() -> None:
    try:
        app()
    except PodfleetError as exc:  # last resort: a command that forgot its guard
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
