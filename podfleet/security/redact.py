"""Secrets taken out of a job's output before anyone reads it: the second line of defence.

Workers never receive the server's secrets (``workerenv``, ``sandbox``), but should a
job find one anyway, it must not be able to publish it through its log or failure tail,
which operators and viewers read. ``Redactor`` replaces, in every line a fabric passes
up from a worker:

* any podfleet bearer token (``pf_`` + 43 URL-safe characters: the admin's and every
  user's, whatever their source);
* the values of the server's secret-looking settings (``PODFLEET_*`` whose name holds
  TOKEN, KEY, SECRET or PASSWORD) and the password of any URL among them;
* the keys the fabric hands out (the checkpoint KEK, as stored: hex, base64 or raw).

What it cannot know (a secret in a form it never saw) it cannot hide; this is not the
isolation, only a net under it.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

MASK = "[redacted]"
_TOKEN = re.compile(r"pf_[A-Za-z0-9_-]{32,}")  # generate_token: pf_ + 43
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD")
_HEXKEY = re.compile(r"\b[0-9a-fA-F]{64}\b")
_MIN_LEN = 8  # shorter values would blank ordinary words


def _forms(value: bytes) -> set[str]:
    out: set[str] = set()
    text = value.decode(errors="ignore").strip()
    if text:
        out.add(text)
        out.update(line.strip() for line in text.splitlines())
    if value:
        out.add(value.hex())
        out.add(base64.b64encode(value).decode())
    return {s for s in out if len(s) >= _MIN_LEN}


def env_secrets(env: Mapping[str, str]) -> set[str]:
    """The secret values among the server's ``PODFLEET_*`` settings."""
    out: set[str] = set()
    for k, v in env.items():
        if not k.startswith("PODFLEET_") or not v:
            continue
        if _SECRET_NAME.search(k):
            out |= _forms(v.encode())
        if "://" in v:
            try:
                pw = urlsplit(v).password
            except ValueError:
                pw = None
            if pw:
                out.add(pw)
    return {s for s in out if len(s) >= _MIN_LEN}


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = {s for s in secrets if len(s) >= _MIN_LEN}
        self._pattern: re.Pattern[str] | None = None

    @classmethod
    def for_server(cls, env: Mapping[str, str] | None = None, key_files: Iterable[str | None] = ()) -> Redactor:
        r = cls(env_secrets(os.environ if env is None else env))
        for f in key_files:
            if f:
                r.add_file(f)
        return r

    def add(self, value: str | bytes) -> None:
        data = value.encode() if isinstance(value, str) else value
        self._secrets |= _forms(data)
        self._pattern = None

    def add_file(self, path: str | Path) -> None:
        try:
            data = Path(path).read_bytes()
        except OSError:
            return
        if not data.lstrip().startswith(b"{"):
            self.add(data)  # one key: raw, hex or base64
        # A key ring (JSON) holds its versions in hex: each, and its bytes in other forms.
        for hexkey in _HEXKEY.findall(data.decode(errors="ignore")):
            self.add(hexkey)
            self.add(bytes.fromhex(hexkey))

    def redact(self, text: str) -> str:
        if not text:
            return text
        text = _TOKEN.sub(MASK, text)
        if not self._secrets:
            return text
        if self._pattern is None:
            self._pattern = re.compile("|".join(re.escape(s) for s in sorted(self._secrets, key=len, reverse=True)))
        return self._pattern.sub(MASK, text)

    def lines(self, lines: Iterable[str]) -> list[str]:
        return [self.redact(ln) for ln in lines]
