"""Where podfleet's own secrets come from: the ``KeyProvider`` interface and its sources.

A provider hands out named 32-byte keys. Four sources:

- ``FileKeyProvider``: one 0600 file per key in a 0700 directory kept *outside* the data
  directory (``PODFLEET_KEY_DIR``, default ``~/.podfleet/keys``); the only one that mints
  keys itself.
- ``EnvKeyProvider``: ``PODFLEET_KEY_<NAME>`` variables (hex or base64), for keys an
  orchestrator injects.
- ``CommandKeyProvider``: an external program (a KMS client) run as ``CMD NAME``, printing
  the key.
- ``HttpKeyProvider``: ``GET URL/NAME`` on a KMS that answers with the key.

Keys are versioned by name (``audit-mac-v1``, ``audit-mac-v2``...): the newest version
MACs new records; every version still verifies old ones.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from podfleet.checkpoint.keys import KEY_BYTES, KEY_DIR_ENV, parse_key
from podfleet.errors import InvalidInputError
from podfleet.security.files import private_dir, write_private

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
MAX_VERSIONS = 1000


@runtime_checkable
class KeyProvider(Protocol):
    def get(self, name: str) -> bytes | None:
        """The key called ``name``, or None when this source does not hold it."""
        ...


@runtime_checkable
class MintingKeyProvider(KeyProvider, Protocol):
    def create(self, name: str) -> bytes:
        """Generate and keep a new random key called ``name``."""
        ...


def check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise InvalidInputError(f"key name {name!r} must be 1-63 chars of a-z, 0-9 and '-'", field="key")
    return name


def default_key_dir() -> Path:
    return Path(os.environ.get(KEY_DIR_ENV) or Path.home() / ".podfleet" / "keys")


class FileKeyProvider:
    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory else default_key_dir()

    def path(self, name: str) -> Path:
        return self.directory / f"{check_name(name)}.key"

    def get(self, name: str) -> bytes | None:
        p = self.path(name)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InvalidInputError(f"cannot read key file {p}: {exc.strerror}", field="key") from None
        return parse_key(data, source=f"key file {p}")

    def create(self, name: str) -> bytes:
        private_dir(self.directory)
        key = secrets.token_bytes(KEY_BYTES)
        p = self.path(name)
        if p.exists():
            raise InvalidInputError(f"key {name} already exists in {self.directory}", field="key")
        write_private(p, key.hex().encode())
        return key


class EnvKeyProvider:
    def __init__(self, prefix: str = "PODFLEET_KEY_", env: dict[str, str] | None = None) -> None:
        self.prefix, self.env = prefix, env

    def get(self, name: str) -> bytes | None:
        var = self.prefix + check_name(name).upper().replace("-", "_")
        value = (self.env if self.env is not None else os.environ).get(var)
        return parse_key(value.encode(), source=f"${var}") if value else None


class CommandKeyProvider:
    """``command NAME`` prints the key (hex or base64); exit 3 means "no such key"."""

    def __init__(self, command: str | Sequence[str], timeout_s: float = 10.0) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise InvalidInputError("key command is empty", field="key_command")
        self.timeout_s = timeout_s

    def get(self, name: str) -> bytes | None:
        try:
            out = subprocess.run([*self.argv, check_name(name)], capture_output=True, timeout=self.timeout_s,
                                 check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InvalidInputError(f"key command {self.argv[0]} failed: {exc}", field="key_command") from None
        if out.returncode == 3:
            return None
        if out.returncode != 0:
            # stderr is the KMS client's, not a secret; its first line says why.
            why = out.stderr.decode(errors="replace").strip().splitlines()[:1]
            raise InvalidInputError(f"key command {self.argv[0]} exited {out.returncode}: {' '.join(why)}",
                                    field="key_command")
        return parse_key(out.stdout, source=f"key command {self.argv[0]}")


class HttpKeyProvider:
    """``GET {url}/{name}`` answers 200 with the key (hex or base64) or 404."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 10.0) -> None:
        self.url, self.token, self.timeout_s = url.rstrip("/"), token, timeout_s

    def get(self, name: str) -> bytes | None:
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            r = httpx.get(f"{self.url}/{check_name(name)}", headers=headers, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise InvalidInputError(f"key service {self.url} unreachable: {exc}", field="key_url") from None
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise InvalidInputError(f"key service {self.url} answered {r.status_code} for {name}", field="key_url")
        return parse_key(r.content, source=f"key service {self.url}")


def versions(provider: KeyProvider, base: str) -> dict[str, bytes]:
    """Every version of ``base`` the provider holds: ``{base-v1: key, base-v2: key, ...}``."""
    out: dict[str, bytes] = {}
    for v in range(1, MAX_VERSIONS):
        key = provider.get(f"{base}-v{v}")
        if key is None:
            break
        out[f"{base}-v{v}"] = key
    return out


def current_key(provider: KeyProvider, base: str, *, create: bool) -> tuple[str, bytes, dict[str, bytes]]:
    """(newest id, its key, all versions); mints v1 when none exists and ``create``."""
    found = versions(provider, base)
    if not found:
        if not (create and isinstance(provider, MintingKeyProvider)):
            raise InvalidInputError(f"no {base} key: none in the key provider, and it cannot create one",
                                    field="key")
        found = {f"{base}-v1": provider.create(f"{base}-v1")}
    newest = list(found)[-1]
    return newest, found[newest], found


def rotate(provider: KeyProvider, base: str) -> str:
    """Add the next version of ``base`` (file provider); older versions keep verifying."""
    if not isinstance(provider, MintingKeyProvider):
        raise InvalidInputError("this key provider cannot create keys; rotate in the KMS", field="key")
    name = f"{base}-v{len(versions(provider, base)) + 1}"
    provider.create(name)
    return name


class LayeredKeyProvider:
    """The first source that holds a key answers (an injected variable overrides a file);
    new keys are minted by the first source that can."""

    def __init__(self, *providers: KeyProvider) -> None:
        self.providers = providers

    def get(self, name: str) -> bytes | None:
        for p in self.providers:
            key = p.get(name)
            if key is not None:
                return key
        return None

    def create(self, name: str) -> bytes:
        for p in self.providers:
            if isinstance(p, MintingKeyProvider):
                return p.create(name)
        raise InvalidInputError("no key provider here can create keys; create them in the KMS", field="key")


def provider_for(*, key_dir: str | None = None, key_command: str | None = None,
                 key_url: str | None = None) -> LayeredKeyProvider:
    """Environment variables first, then the external KMS (command or HTTP) if one is
    configured, else the key directory."""
    external: KeyProvider
    if key_command:
        external = CommandKeyProvider(key_command)
    elif key_url:
        external = HttpKeyProvider(key_url)
    else:
        external = FileKeyProvider(key_dir)
    return LayeredKeyProvider(EnvKeyProvider(), external)
