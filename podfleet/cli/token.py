"""``podfleet token create NAME --role ROLE`` / ``token list`` / ``token revoke ID`` (admin)."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, stderr
from podfleet.cli.remote import TokenOpt, UrlOpt, remote, remote_command
from podfleet.errors import InvalidInputError
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Access tokens: issue, list, revoke (admin).", no_args_is_help=True)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="who or what the token is for"),
    role: str = typer.Option(..., "--role", help="admin, operator or viewer"),
    mfa: str | None = typer.Option(None, "--mfa", help="a fresh TOTP or recovery code (user tokens need one)"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Issue a token; it is printed once and stored only as a hash."""
    with remote(url, token, mfa=mfa) as c:
        out = c.create_access_token(name, role)
        if output == OutputFormat.json:
            emit(out, output)
        else:
            stderr.print(f"token {out['id']} ({out['role']}) for {out['name']}: shown once, keep it safe")
            print(out["token"])


@app.command("list")
@remote_command
def list_(c: PodfleetClient, output: OutputFormat = OutputOpt) -> None:
    """Tokens with their role and whether they are revoked (never the secret)."""
    emit(c.list_access_tokens()["tokens"], output,
         columns=["id", "name", "role", "revoked", "created_at"])


@app.command("revoke")
@remote_command
def revoke(c: PodfleetClient, token_id: str = typer.Argument(..., help="the token's id (tok-..., from token list)"), output: OutputFormat = OutputOpt) -> None:
    """Revoke a token; this server refuses it from the next request on."""
    emit(c.revoke_access_token(token_id), output, title="token")


@app.command("reset-admin")
def reset_admin(
    db: str | None = typer.Option(None, "--db", help="the server's store URL (default $PODFLEET_DB or "
                                  "~/.podfleet/podfleet.db)"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Issue a new admin token straight into the store and revoke the old one (needs access
    to the store's files, not a token; audited). Best with the server stopped."""
    import getpass
    import sys
    import time

    from podfleet.cli.up import store_errors
    from podfleet.control.tokens import reset_admin as reset
    from podfleet.store import open_store

    with errors():
        with store_errors(db):
            store = open_store(db)
        try:
            if not yes:
                if not sys.stdin.isatty():
                    raise InvalidInputError(f"resetting the admin token of {store.url} revokes the current one; "
                                            "pass --yes to confirm (no terminal to ask on)", field="yes")
                if not typer.confirm(f"revoke the admin token of {store.url} and issue a new one?", err=True):
                    raise typer.Exit(1)
            token, view = reset(store, time.time(), actor=f"local:{getpass.getuser()} (token reset-admin)")
        finally:
            store.close()
        if output == OutputFormat.json:
            emit({**view, "token": token}, output)
        else:
            stderr.print(f"new admin token {view['id']} (shown once; export it as PODFLEET_TOKEN):")
            print(token)
