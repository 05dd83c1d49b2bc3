"""Entry point: builds the Typer app from one module per command group."""

from __future__ import annotations

import sys

import typer

from podfleet.cli import advise as advise_cli
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
from podfleet.cli import sim as sim_cli
from podfleet.cli import usage as usage_cli
from podfleet.cli import user as user_cli
from podfleet.cli import verify as verify_cli
from podfleet.errors import PodfleetError

app = typer.Typer(
    name="podfleet",
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
app.add_typer(code_cli.app, name="code")
app.add_typer(policy_cli.app, name="policy")
app.add_typer(keys_cli.app, name="keys")
app.add_typer(user_cli.app, name="user")
app.add_typer(chip.app, name="chip")
app.add_typer(queue_cli.app, name="queue")  # sharing between teams (a help panel is set at merge)
app.add_typer(priority_cli.app, name="priority-class")
app.command("usage")(usage_cli.usage)
app.command("verify")(verify_cli.verify)
app.command("diagnose")(diagnose_cli.diagnose)
app.command("advise")(advise_cli.advise)
app.command("docs")(docs_cli.docs)
app.command("report")(report_cli.report)


def main() -> None:
    try:
        app()
    except PodfleetError as exc:  # last resort: a command that forgot its guard
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
