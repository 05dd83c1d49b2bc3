"""``podfleet maintenance run CLUSTER --command CMD [--unit chip|host] [--chip N ...]
[--max-failures N] [--timeout-s S] [--mfa CODE] [--wait]``, ``maintenance status CLUSTER
[ROLLOUT]`` and ``maintenance resume CLUSTER ROLLOUT``. Admin only (audited); user tokens
under an MFARequired policy give a fresh code with ``--mfa``."""

from __future__ import annotations

import typer

from podfleet.cli.follow import RolloutCommands
from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client, remote
from podfleet.errors import InvalidInputError
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Rolling maintenance commands on real hosts.", no_args_is_help=True)
UNITS = ("chip", "host")
ROLLOUTS = RolloutCommands("maintenance", "mt-", PodfleetClient.describe_maintenance, PodfleetClient.list_maintenance,
                           ["id", "unit", "state", "progress", "chips", "reason"])
MfaOpt = typer.Option(None, "--mfa", help="a fresh TOTP or recovery code (user tokens under MFARequired)")


@app.command("run")
def run(
    cluster: str = ClusterArg,
    command: str = typer.Option(..., "--command", help="command line run on each host (no shell: wrap in sh -c)"),
    unit: str = typer.Option("chip", "--unit", help="chip or host at a time"),
    chip: list[int] = typer.Option(None, "--chip", help="only these chips (repeat); default: all"),
    max_failures: int = typer.Option(1, "--max-failures", help="pause after this many failed chips or hosts"),
    timeout_s: float = typer.Option(600.0, "--timeout-s", help="kill one host's command after this many seconds"),
    mfa: str | None = MfaOpt,
    wait: bool = typer.Option(False, "--wait", help="follow the rollout until it ends or pauses"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Run CMD on each host, one chip (or host) at a time: its ranks move away first, the
    exit code and output are kept, the chips are health-checked and return; a failing
    chip stays cordoned with the reason and the rollout pauses after --max-failures."""
    with errors():
        if unit not in UNITS:
            raise InvalidInputError(f"--unit must be chip or host, got {unit!r}", field="unit", allowed=list(UNITS))
        c = client(url, token, mfa=mfa)
        r = c.start_maintenance(cluster, command, unit=unit, chips=chip or None, max_failures=max_failures,
                                timeout_s=timeout_s)
        ROLLOUTS.started(c, cluster, r, wait=wait, output=output)


ROLLOUTS.add_status_command(app, "Maintenance rollouts: state, progress, failed chips, each host's exit code and output.")


@app.command("resume")
def resume(
    cluster: str = ClusterArg,
    rollout: str = typer.Argument(..., help="mt-..."),
    mfa: str | None = MfaOpt,
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Go on with a rollout paused after its failures (the failed chips stay cordoned)."""
    with remote(url, token, mfa=mfa) as c:
        emit(c.resume_maintenance(cluster, rollout), output, title="maintenance rollout")
