"""``podfleet user create|list|describe|attach|put-policy|detach|enable-mfa|unlock`` (admin)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, Record, emit, errors, stderr
from podfleet.cli.remote import TokenOpt, UrlOpt, client, remote, remote_command
from podfleet.errors import InvalidInputError
from podfleet.sdk import PodfleetClient

UserArg = typer.Argument(..., help="the user's name")
PolicyArg = typer.Argument(..., help="a policy name (podfleet policy list)")
app = typer.Typer(help="Users, their policies and MFA (admin).", no_args_is_help=True)
MfaOpt = typer.Option(None, "--mfa", help="a fresh TOTP or recovery code, for calls that need one")


@app.command("create")
def create(name: str = UserArg, policy: list[str] = typer.Option([], "--policy", help="built-in policy to attach"),
           mfa: str | None = MfaOpt, url: str = UrlOpt, token: str = TokenOpt,
           output: OutputFormat = OutputOpt) -> None:
    """Create a user; tokens named NAME then act with its policies."""
    with remote(url, token, mfa=mfa) as c:
        emit(c.create_user(name, policies=policy), output, title="user")


@app.command("list")
@remote_command
def list_(c: PodfleetClient, output: OutputFormat = OutputOpt) -> None:
    emit(c.list_users()["users"], output, columns=["name", "policies", "mfa", "mfa_locked", "created_at"])


@app.command("describe")
@remote_command
def describe(c: PodfleetClient, name: str = UserArg, output: OutputFormat = OutputOpt) -> None:
    emit(c.describe_user(name), output, title="user")


def _user_policy_command(call: Callable[[PodfleetClient, str, str], Record]) -> Callable[..., None]:
    """``attach`` and ``detach``: one command over the user and a policy name, answered by
    ``call`` (the SDK's put or delete of the user's policy)."""
    def command(name: str = UserArg, policy: str = PolicyArg, mfa: str | None = MfaOpt, url: str = UrlOpt,
                token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
        with remote(url, token, mfa=mfa) as c:
            emit(call(c, name, policy), output, title="user")
    return command


app.command("attach", help="Attach a built-in policy (ClusterAdmin, Scheduler, StorageAccess, ReadOnly, Auditor).")(
    _user_policy_command(lambda c, name, policy: c.put_user_policy(name, policy)))


@app.command("put-policy")
def put_policy(name: str = UserArg, policy: str = PolicyArg, file: Path = typer.Argument(..., help="the policy document (JSON)"),
               mfa: str | None = MfaOpt, url: str = UrlOpt, token: str = TokenOpt,
               output: OutputFormat = OutputOpt) -> None:
    """Set an inline policy from a JSON file of Statements."""
    with errors():
        try:
            doc = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"cannot read policy {file}: {exc}", field="file") from None
        c = client(url, token, mfa=mfa)
        emit(c.put_user_policy(name, policy, doc), output, title="user")


app.command("detach")(_user_policy_command(PodfleetClient.delete_user_policy))


@app.command("enable-mfa")
@remote_command
def enable_mfa(c: PodfleetClient, name: str = UserArg, output: OutputFormat = OutputOpt) -> None:
    """Enrol TOTP: add the otpauth URI to an authenticator app; keep the recovery codes."""
    out = c.enable_mfa(name)
    if output == OutputFormat.json:
        emit(out, output)
    else:
        stderr.print("shown once: add the URI to an authenticator app, keep the recovery codes offline")
        print(out["otpauth_uri"])
        print("\n".join(out["recovery_codes"]))


@app.command("unlock")
def unlock(name: str = UserArg, mfa: str | None = MfaOpt, url: str = UrlOpt, token: str = TokenOpt,
           output: OutputFormat = OutputOpt) -> None:
    """Clear NAME's wrong-MFA-code count and the lock ten of them set (audited)."""
    with remote(url, token, mfa=mfa) as c:
        emit(c.unlock_user(name), output, title="user")
