"""A Ray cluster created without an address runs on the data directory's private Ray head
(``fabric/ray/private.py``), a ``ray start --head`` in a session of its own, so its gangs
outlive a kill -9 of ``podfleet up`` as on an addressed cluster (real server, Ray, actors).

* The head is recorded in ``<data dir>/ray/head.json`` (0600) and outlives the server;
  after the restart the ranks' pids are unchanged, the job never goes back to a
  checkpoint and its loss history has no gap. Deleting the cluster stops the head: no
  process of it (GCS, raylet, the ranks' actors) is left, and the record is gone.
* A head that died while the server was down is replaced at the restart, and the job
  resumes from its checkpoint with the reason on the job.
* A head that dies while the server serves is started again on the same port, and the
  job, RECOVERING meanwhile, resumes from its checkpoint.

The three are one job's life on one server's data directory, in one test: each replayed
the same server start, head start and job start (about 20 s on CI's two cores) as a test
of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podfleet.sdk import PodfleetClient
from tests.cli.test_restart_reattach import _log, _pids, _step, _until
from tests.fabric.ray.served import assert_ran_through, served

pytestmark = [pytest.mark.ray, pytest.mark.realproc]
pytest.importorskip("ray")
TOKEN = "pf-test-ray-private-admin-token-0123456789"
JOB_OPTIONS = {"step_delay_s": 0.1, "global_batch": 4, "seq_len": 32}

Server = tuple[Callable[[], subprocess.Popen[bytes]], PodfleetClient, Path]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is dead
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _head_processes(rec: dict[str, Any]) -> list[int]:
    """Every process of the recorded head: its process group, and whatever names its
    temp directory (Ray's GCS, raylet and helpers do)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        with contextlib.suppress(OSError):
            ours = os.getpgid(pid) == int(rec["pid"]) or str(rec["temp_dir"]).encode() in (d / "cmdline").read_bytes()
            if ours and _alive(pid):
                out.append(pid)
    return out


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    work = tmp_path / "work"
    env = {**os.environ, "PODFLEET_WORKDIR": str(work), "PODFLEET_KEY_DIR": str(tmp_path / "keys"),
           "PODFLEET_ADMIN_TOKEN": TOKEN}
    env.pop("PODFLEET_RAY_ADDRESS", None)
    env.pop("RAY_AUTH_MODE", None)  # as an operator runs it: the head gets a token of its own
    record = work / "ray" / "head.json"
    try:
        with served(tmp_path, env, TOKEN) as (start, c):
            yield start, c, record
    finally:
        # Whatever head a failed test left (the record names the last one started).
        with contextlib.suppress(FileNotFoundError, ValueError):
            left = json.loads(record.read_text())
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(left["pid"]), signal.SIGKILL)
            shutil.rmtree(str(left["temp_dir"]), ignore_errors=True)


def _training(start: Callable[[], subprocess.Popen[bytes]], c: PodfleetClient) -> tuple[Any, str, str]:
    first = start()
    cid = c.create_cluster("ray", fabric="ray", chips=2, spares=0)["id"]
    _until(lambda: c.describe_cluster(cid)["state"] == "active", "the private-Ray cluster active")
    jid = c.submit_training_job(cid, model="debug", chips=2, steps=100_000, checkpoint_interval=10,
                                options=JOB_OPTIONS)["id"]
    return first, cid, jid


def _kill9(p: subprocess.Popen[bytes]) -> None:
    os.killpg(p.pid, signal.SIGKILL)  # the server's whole process group: the head is not in it
    p.wait(30)


def _restored(c: PodfleetClient, jid: str) -> int:
    """How many lines of the job's log say a rank was restored from a checkpoint."""
    return sum("restored step" in ln for ln in _log(c, jid))


def test_the_private_head_outlives_a_kill_9_is_replaced_or_restarted_and_goes_with_its_cluster(
        server: Server) -> None:
    """One job's life on one data directory, through the three things that happen to a
    private head (each replayed the same server start, head start and job start when they
    were tests of their own): a kill -9 of the server, the head dying while the server is
    down, the head dying while the server serves; then the cluster's deletion."""
    start, c, record = server
    # 1. The head outlives a kill -9 of the server; the restarted server finds it by its record.
    first, cid, jid = _training(start, c)
    _until(lambda: _step(c, jid) >= 5 and len(_pids(c, cid)) == 2, "the job training")
    rec = json.loads(record.read_text())
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE((record.parent / "auth_token").stat().st_mode) == 0o600  # Ray's token auth is on
    assert rec["address"] == f"127.0.0.1:{rec['port']}" and _alive(int(rec["pid"]))
    assert os.getsid(int(rec["pid"])) != os.getsid(first.pid)  # a session of its own
    before, at_kill = _pids(c, cid), _step(c, jid)
    _kill9(first)
    time.sleep(2.0)  # the ranks train on with no server: their actors journal the reports
    assert _alive(int(rec["pid"])) and all(_alive(p) for p in before.values())
    second = start()
    # RUNNING (a periodic checkpoint's CHECKPOINTING can be caught on a loaded machine).
    _until(lambda: _step(c, jid) > at_kill + 5 and c.describe_training_job(jid)["state"] == "RUNNING",
           "the job stepping on, RUNNING, after the restart")
    assert_ran_through(c, cid, jid, before)
    assert json.loads(record.read_text())["pid"] == rec["pid"]  # the same head, found by its record
    ray_procs = _head_processes(rec)
    assert int(rec["pid"]) in ray_procs and len(ray_procs) >= 3, ray_procs  # ray start, GCS, raylet, ...

    # 2. A head that died while the server was down is replaced at the restart, and the job
    # resumes from its checkpoint with the reason on the job.
    _until(lambda: int(c.describe_training_job(jid).get("checkpoint_step") or 0) >= 10, "a checkpoint")
    _kill9(second)
    os.killpg(int(rec["pid"]), signal.SIGKILL)  # the head too, while no server watches it
    _until(lambda: not _head_processes(rec) and not any(_alive(p) for p in before.values()),
           "the old head gone, its ranks with it", 30)
    start()
    # The reloaded job reads RUNNING at its old step until the cluster has connected: wait
    # for the reason, then for the gang restored from the checkpoint.
    _until(lambda: any("private Ray head" in ln and "had died while the server was down" in ln
                       for ln in _log(c, jid)), "the reason on the job")
    _until(lambda: c.describe_training_job(jid)["state"] == "RUNNING" and _restored(c, jid) > 0,
           "the job resumed on the new head")
    replaced = json.loads(record.read_text())
    assert replaced["pid"] != rec["pid"] and _alive(int(replaced["pid"]))
    assert not Path(rec["temp_dir"]).exists()  # the dead head's directory went with it

    # 3. A head that dies while the server serves is started again on the same port: the
    # cluster degrades (the server serves on), the job waits RECOVERING and recovers.
    resumed_at = int(c.describe_training_job(jid).get("checkpoint_step") or 0)
    _until(lambda: int(c.describe_training_job(jid).get("checkpoint_step") or 0) > resumed_at,
           "a checkpoint on the new head")
    restores = _restored(c, jid)
    os.killpg(int(replaced["pid"]), signal.SIGKILL)  # the head crashes under the running job
    _until(lambda: c.describe_training_job(jid)["state"] == "RECOVERING", "the job RECOVERING", 60)
    assert c.healthz()
    _until(lambda: c.describe_training_job(jid)["state"] == "RUNNING" and _restored(c, jid) > restores,
           "the job resumed on the restarted head", 240)
    new = json.loads(record.read_text())
    assert new["pid"] != replaced["pid"] and new["port"] == replaced["port"] and _alive(int(new["pid"]))

    # Deleting the cluster stops its head with its process group: nothing of Ray is left.
    ranks, new_procs = _pids(c, cid), _head_processes(new)
    assert int(new["pid"]) in new_procs and len(new_procs) >= 3, new_procs
    c.delete_cluster(cid)
    _until(lambda: not record.exists(), "the head's record removed", 60)
    _until(lambda: not _head_processes(new) and not _head_processes(replaced)
           and not any(_alive(p) for p in [*new_procs, *ranks.values()]),
           f"no Ray process left (still {_head_processes(new)})", 60)
    assert not Path(new["temp_dir"]).exists()
