"""The agent protocol: newline-delimited JSON over a Unix stream socket.

A client's first line is ``hello`` (``version``, ``token``, ``scope``): the agent answers
with its own ``version``. A version other than ``VERSION`` is refused for everything but
``status`` and ``shutdown`` (docs/operations.md, "Agents and upgrades"), so a plane and an
agent of different versions never misread each other's workers. Requests carry an ``id``
and get one answer with that ``id`` (``ok`` or ``error``); the agent also pushes lines
without an ``id`` (``push``: ``msg``, ``exit``, ``beats``).

The socket and the token file are 0600 in a 0700 directory: only the server's user (and
root) reaches the agent, and then only with the token it wrote at start.
"""

from __future__ import annotations

import json
import secrets
import socket
from pathlib import Path
from typing import Any

from podfleet.errors import ConflictError, InvalidInputError
from podfleet.security.files import private_dir, write_private

VERSION = 1
SOCKET = "agent.sock"
TOKEN = "token"
PIDFILE = "agent.pid"
MAX_LINE_BYTES = 16 << 20  # a hello's answer carries journals


def agent_dir(data_dir: str | Path) -> Path:
    """Where the agent of a data directory (``PODFLEET_WORKDIR``) keeps its socket and token."""
    return Path(data_dir) / "agent"


def new_token(where: Path) -> str:
    token = secrets.token_urlsafe(32)
    write_private(where / TOKEN, token.encode())
    return token


def read_token(where: Path) -> str:
    try:
        return (where / TOKEN).read_text().strip()
    except OSError as exc:
        raise InvalidInputError(f"no agent token at {where / TOKEN}: {exc.strerror or exc}", field="agent") from None


def encode(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def connect(where: Path, timeout_s: float = 5.0) -> socket.socket:
    """A connected socket to the agent in ``where``; ConflictError naming the path if none answers."""
    private_dir(where)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(where / SOCKET))
    except OSError as exc:
        sock.close()
        raise ConflictError(f"no agent answers at {where / SOCKET}: {exc.strerror or exc}", field="agent") from None
    sock.settimeout(None)
    return sock


def mismatch(plane: object) -> str:
    """The agent's answer to a plane that speaks protocol ``plane``."""
    return (f"the agent speaks protocol {VERSION}, this podfleet speaks {plane}: let its jobs checkpoint, stop it "
            "(podfleet agent stop; its workers end and resume from their checkpoints), or run the matching podfleet")
