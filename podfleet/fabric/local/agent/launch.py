"""Finding the agent of a data directory, or starting one in its own session.

A control plane that builds a local fabric and finds no agent answering in
``<data dir>/agent`` starts one (``python -m podfleet.fabric.local.agent``) with
``setsid``: it is not in the server's process group, so a kill of the server (or its
terminal's SIGINT / SIGHUP) leaves it, and its workers, running. One started this way
ends itself once it holds no workers and no plane for ``IDLE_EXIT_S``; one run by
systemd (``podfleet agent``) does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from podfleet.errors import ConflictError
from podfleet.fabric.local.agent import protocol
from podfleet.security.files import open_private_append, private_dir
from podfleet.security.workerenv import SERVER_SECRETS

IDLE_EXIT_S = 300.0
START_TIMEOUT_S = 30.0


def answers(where: Path) -> bool:
    try:
        sock = protocol.connect(where, timeout_s=2.0)
    except ConflictError:
        return False
    sock.close()
    return True


def ensure_agent(where: Path, *, timeout_s: float = START_TIMEOUT_S) -> Path:
    """``where`` once an agent answers there, starting one if none does."""
    private_dir(where)
    if answers(where):
        return where
    env = {k: v for k, v in os.environ.items() if k not in SERVER_SECRETS}
    with os.fdopen(open_private_append(where / "agent.log"), "ab") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "podfleet.fabric.local.agent", "--dir", str(where), "--idle-exit-s",
             str(IDLE_EXIT_S)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            close_fds=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answers(where):
            return where
        if proc.poll() is not None and not answers(where):
            raise ConflictError(f"the agent for {where} exited with {proc.returncode} at start; see "
                                f"{where / 'agent.log'}", field="agent")
        time.sleep(0.05)
    raise ConflictError(f"the agent for {where} did not answer within {timeout_s:g} s; see {where / 'agent.log'}",
                        field="agent")
