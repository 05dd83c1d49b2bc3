"""``podfleet token create NAME --role ROLE`` / ``token list`` / ``token revoke ID`` (admin)."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, stderr
from podfleet.cli.remote import TokenOpt, UrlOpt, client

app = typer.Typer(help="Access tokens: issue, list, revoke (admin).", no_args_is_help=True)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="who or what the token is for"),
    role: str = typer.Option(..., "--role", help="admin, operator or viewer"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Issue a token; it is printed once and stored only as a hash."""
    with errors():
        out = client(url, token).create_access_token(name, role)
        if output == OutputFormat.json:
            emit(out, output)
        else:
            stderr.print(f"token {out['id']} ({out['role']}) for {out['name']}: shown once, keep it safe")
            print(out["token"])


@app.command("list")
def list_(url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Tokens with their role and whether they are revoked (never the secret)."""
    with errors():
        emit(client(url, token).list_access_tokens()["tokens"], output,
             columns=["id", "name", "role", "revoked", "created_at"])


@app.command("revoke")
def revoke(token_id: str, url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Revoke a token; this server refuses it from the next request on."""
    with errors():
        emit(client(url, token).revoke_access_token(token_id), output, title="token")
