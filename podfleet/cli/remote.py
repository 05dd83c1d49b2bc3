"""Shared by the commands that talk to a server: ``--url`` / ``--token`` (or
``PODFLEET_URL`` / ``PODFLEET_TOKEN``), named profiles, and the SDK client built from them.

Where the URL and token come from, first match wins: the flag, the environment
variable, the profile (``podfleet --profile NAME``, ``PODFLEET_PROFILE``, else the
profile named ``default`` when there is one) in ``~/.podfleet/config.toml``
(``PODFLEET_CONFIG`` moves it), then ``http://127.0.0.1:8470``::

    [profiles.default]
    url = "http://127.0.0.1:8470"
    token_file = "~/.podfleet/admin.token"

    [profiles.prod]
    url = "https://podfleet.example.com:8470"
    token_file = "~/.podfleet/prod.token"

A profile names a file holding the token, never the token itself: the config can be
shared and the token file kept 0600.
"""

from __future__ import annotations

import functools
import inspect
import os
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import typer

from podfleet.cli.output import errors
from podfleet.errors import AuthError, InvalidInputError, NotFoundError
from podfleet.sdk import PodfleetClient

DEFAULT_URL = "http://127.0.0.1:8470"
CONFIG_ENV = "PODFLEET_CONFIG"

UrlOpt = typer.Option(None, "--url", envvar="PODFLEET_URL", show_default=False,
                      help=f"server URL (PODFLEET_URL; else the profile's; else {DEFAULT_URL})")
TokenOpt = typer.Option(None, "--token", envvar="PODFLEET_TOKEN", show_default=False,
                        help="bearer token (PODFLEET_TOKEN; else the profile's token_file)")

# Set by the root ``--profile`` option (cli.main) before any command runs.
selected_profile: str | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    url: str | None = None
    token_file: str | None = None

    def token(self) -> str | None:
        if not self.token_file:
            return None
        path = Path(self.token_file).expanduser()
        try:
            return path.read_text().strip() or None
        except OSError as exc:
            raise AuthError(f"profile {self.name}: cannot read token_file {path}: {exc.strerror}") from None


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or "~/.podfleet/config.toml").expanduser()


def load_profile(name: str | None = None) -> Profile | None:
    """The profile ``name`` (or PODFLEET_PROFILE, or ``default``); None when none is set up."""
    path = config_path()
    wanted = name or os.environ.get("PODFLEET_PROFILE")
    if not path.is_file():
        if wanted:
            raise NotFoundError(f"profile {wanted!r}: no config file at {path}", field="profile")
        return None
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInputError(f"{path}: {exc}", field="profile") from None
    profiles = data.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise InvalidInputError(f"{path}: [profiles] must be a table of profiles", field="profile")
    key = wanted or "default"
    entry = profiles.get(key)
    if entry is None:
        if wanted:
            raise NotFoundError(f"profile {wanted!r} is not in {path}; profiles: {', '.join(sorted(profiles)) or 'none'}",
                                field="profile", allowed=sorted(profiles))
        return None
    if not isinstance(entry, dict) or set(entry) - {"url", "token_file"}:
        raise InvalidInputError(f"{path}: profile {key!r} takes url and token_file", field="profile")
    return Profile(key, entry.get("url"), entry.get("token_file"))


def client(url: str | None, token: str | None, *, timeout_s: float = 30.0, mfa: str | None = None) -> PodfleetClient:
    """``timeout_s``: per request; long-running calls (verify, advise) pass more. ``mfa``:
    a TOTP or recovery code sent with the calls that follow (``PodfleetClient.use_mfa``)."""
    if not url or not token:
        prof = load_profile(selected_profile)
        if prof is not None:
            url = url or prof.url
            token = token or prof.token()
    if not token:
        raise AuthError("no token: set PODFLEET_TOKEN, pass --token, or name a token_file in a profile of "
                        f"{config_path()} (podfleet up prints the admin token)")
    c = PodfleetClient(url or DEFAULT_URL, token, timeout_s=timeout_s)
    c.use_mfa(mfa)
    return c


@contextmanager
def remote(url: str | None, token: str | None, *, timeout_s: float = 30.0,
           mfa: str | None = None) -> Iterator[PodfleetClient]:
    """What a command that talks to a server opens first: the ``errors()`` guard (one line
    and the error's exit code, never a traceback) with the client built inside it, so a
    missing token or a bad profile is reported like any other error."""
    with errors():
        yield client(url, token, timeout_s=timeout_s, mfa=mfa)


def remote_command(fn: Callable[..., None]) -> Callable[..., None]:
    """A command whose whole body talks to one server: ``fn`` takes the client first
    (``c: PodfleetClient``) and declares its own options; the command gets ``--url`` and
    ``--token`` (before ``--output`` when it has one, else last, as written by hand) and
    runs ``fn`` inside ``remote(url, token)``.

        @app.command("recoveries")
        @remote_command
        def recoveries(c: PodfleetClient, cluster: str = ..., output: OutputFormat = OutputOpt) -> None:
    """
    sig = inspect.signature(fn)
    own = list(sig.parameters.values())[1:]  # the client is ours to pass
    at = next((i for i, p in enumerate(own) if p.name == "output"), len(own))
    kw = inspect.Parameter.KEYWORD_ONLY if any(p.kind is p.KEYWORD_ONLY for p in own) else \
        inspect.Parameter.POSITIONAL_OR_KEYWORD
    added = [inspect.Parameter("url", kw, default=UrlOpt, annotation="str"),
             inspect.Parameter("token", kw, default=TokenOpt, annotation="str")]

    @functools.wraps(fn)
    def command(url: str | None, token: str | None, **options: object) -> None:
        with remote(url, token) as c:
            fn(c, **options)

    first = next(iter(sig.parameters))
    command.__signature__ = sig.replace(parameters=[*own[:at], *added, *own[at:]])  # type: ignore[attr-defined]
    command.__annotations__ = {**{k: v for k, v in fn.__annotations__.items() if k != first},
                               "url": "str", "token": "str"}
    return command
