"""Shared by the commands that talk to a server: ``--url`` / ``--token`` (or
``PODFLEET_URL`` / ``PODFLEET_TOKEN``) and the SDK client built from them."""

from __future__ import annotations

import typer

from podfleet.errors import AuthError
from podfleet.sdk import PodfleetClient

DEFAULT_URL = "http://127.0.0.1:8470"

UrlOpt = typer.Option(DEFAULT_URL, "--url", envvar="PODFLEET_URL", help="server URL (PODFLEET_URL)")
TokenOpt = typer.Option(None, "--token", envvar="PODFLEET_TOKEN", show_default=False,
                        help="bearer token (PODFLEET_TOKEN)")


def client(url: str, token: str | None) -> PodfleetClient:
    if not token:
        raise AuthError("no token: set PODFLEET_TOKEN or pass --token (podfleet up prints the admin token)")
    return PodfleetClient(url, token)
