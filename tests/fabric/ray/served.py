"""A real ``podfleet up --fabric ray`` that tests kill and start again on one store and
data directory (test_ray_reattach.py, test_ray_private.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from podfleet.sdk import PodfleetClient
from tests.cli.test_restart_reattach import _log, _pids, _step, _until


@contextmanager
def served(tmp_path: Path, env: Mapping[str, str],
           token: str) -> Iterator[tuple[Callable[[], subprocess.Popen[bytes]], PodfleetClient]]:
    """``start()`` runs a server (in a session of its own) and waits for ``/healthz``;
    every server still running is terminated on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = PodfleetClient(f"http://127.0.0.1:{port}", token)
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        with open(tmp_path / "server.log", "ab") as logf:
            p = subprocess.Popen([sys.executable, "-m", "podfleet", "up", "--fabric", "ray", "--port", str(port),
                                  "--db", str(tmp_path / "pf.db")], stdout=logf, stderr=subprocess.STDOUT,
                                 env=dict(env), start_new_session=True)
        procs.append(p)
        _until(c.healthz, "the server answering /healthz")
        return p

    try:
        yield start, c
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(60)


def assert_ran_through(c: PodfleetClient, cid: str, jid: str, before: dict[int, int]) -> None:
    """The restarted server took the gang back as it ran: the same pids, no resume from a
    checkpoint, no gap in the loss history."""
    # The same processes: nothing restarted (the hardware view refreshes on the telemetry tick).
    _until(lambda: _pids(c, cid) == before, f"pids {before} after the restart (now {_pids(c, cid)})", 60)
    log = _log(c, jid)
    assert any("re-attached after a control-plane restart" in ln for ln in log), log[-20:]
    assert not any("restored step" in ln or "resuming from checkpoint" in ln for ln in log), log[-20:]
    now = _step(c, jid)
    seen: set[int] = set()
    for p in c.get_job_metrics(jid, resolution=10)["points"]:
        seen.update(range(int(p["step_first"]), int(p["step_last"]) + 1))
    assert [s for s in range(1, now + 1) if s not in seen] == []  # the loss history has no gap
