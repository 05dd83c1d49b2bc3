"""kill -9 of a real ``podfleet up`` while a local job trains: the restarted server
re-attaches to the gang the host's agent kept running (real server, agent and workers).

The workers' pids are unchanged after the restart, the job never goes back to a
checkpoint (no worker restores, its step only grows), and its loss history has no gap.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podfleet.sdk import PodfleetClient

pytestmark = pytest.mark.realproc
TOKEN = "pf-test-restart-reattach-admin-token-0123456789"


def _until(cond: Callable[[], Any], what: str, timeout_s: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            out = cond()
            if out:
                return out
        except Exception as exc:  # the server is still starting
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s:g} s (last error: {last})")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Callable[[], subprocess.Popen[bytes]], PodfleetClient, dict[str, str]]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PODFLEET_WORKDIR": str(tmp_path / "work"), "PODFLEET_KEY_DIR": str(tmp_path / "keys"),
           "PODFLEET_ADMIN_TOKEN": TOKEN}
    c = PodfleetClient(f"http://127.0.0.1:{port}", TOKEN)
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        with open(tmp_path / "server.log", "ab") as logf:
            p = subprocess.Popen([sys.executable, "-m", "podfleet", "up", "--agent", "--fabric", "local", "--port", str(port),
                                  "--db", str(tmp_path / "pf.db")], stdout=logf, stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        _until(c.healthz, "the server answering /healthz")
        return p

    yield start, c, env
    for p in procs:
        if p.poll() is None:
            p.terminate()
            p.wait(30)
    subprocess.run([sys.executable, "-m", "podfleet", "agent", "stop"], env=env, capture_output=True, timeout=60,
                   check=False)


def _pids(c: PodfleetClient, cluster: str) -> dict[int, int]:
    return {int(ch["worker"]["rank"]): int(ch["worker"]["pid"])
            for ch in c.describe_cluster_hardware(cluster)["chips"] if ch.get("worker")}


def _step(c: PodfleetClient, job_id: str) -> int:
    return int(c.describe_training_job(job_id)["progress"]["step"])


def _log(c: PodfleetClient, job_id: str) -> list[str]:
    out, since = [], 0
    while True:
        page = c.get_job_logs(job_id, since=since)
        out += [str(ln["message"]) for ln in page["lines"]]
        if not page["lines"]:
            return out
        since = int(page["next"])


def test_kill_9_of_the_server_leaves_the_job_training(server: Any) -> None:
    start, c, _env = server
    first = start()
    cid = c.create_cluster("loc", fabric="local", chips=2, spares=0)["id"]
    _until(lambda: c.describe_cluster(cid)["state"] == "active", "the local cluster active")
    jid = c.submit_training_job(cid, model="debug", chips=2, steps=100_000, checkpoint_interval=20,
                                options={"step_delay_s": 0.05})["id"]
    _until(lambda: _step(c, jid) >= 5, "the job training")
    before, at_kill = _pids(c, cid), _step(c, jid)
    assert len(before) == 2
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    time.sleep(1.0)  # the workers train on with no server: the agent journals their reports
    start()
    _until(lambda: _step(c, jid) > at_kill + 5, "the job stepping on after the restart")
    job = c.describe_training_job(jid)
    # Trained on, not resumed: RUNNING, or CHECKPOINTING at one of its 20-step checkpoints.
    assert job["state"] in ("RUNNING", "CHECKPOINTING"), job
    # The same processes: nothing restarted (the hardware view refreshes on the telemetry tick).
    _until(lambda: _pids(c, cid) == before, f"pids {before} after the restart (now {_pids(c, cid)})", 30)
    log = _log(c, jid)
    assert any("re-attached after a control-plane restart" in ln for ln in log), log[-20:]
    assert not any("restored step" in ln for ln in log), "a worker restored from a checkpoint: steps were redone"
    now = _step(c, jid)
    seen: set[int] = set()
    for p in c.get_job_metrics(jid, resolution=10)["points"]:
        seen.update(range(int(p["step_first"]), int(p["step_last"]) + 1))
    assert [s for s in range(1, now + 1) if s not in seen] == []  # the loss history has no gap
    c.stop_training_job(jid)
    _until(lambda: c.describe_training_job(jid)["state"] == "STOPPED", "the job stopped")
    _until(lambda: not _pids(c, cid), "its workers gone", 60)
