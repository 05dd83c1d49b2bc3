"""kill -9 of a real ``podfleet up`` while a Ray job trains: the gang's detached actors
run on, and the restarted server re-attaches to them (real server, Ray cluster, actors).

* The ranks' pids are unchanged after the restart, the job never goes back to a
  checkpoint, its step only grows and its loss history has no gap.
* A rank whose actor died while the server was down: the gang is adopted, the death is
  replayed, and the job is recovered from its checkpoint on a new gang.
* No detached actor is left once the job is stopped or its cluster deleted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from podfleet.sdk import PodfleetClient
from tests.cli.test_restart_reattach import _log, _pids, _step, _until
from tests.fabric.ray.served import assert_ran_through, served

pytestmark = [pytest.mark.ray, pytest.mark.realproc]
pytest.importorskip("ray")
TOKEN = "pf-test-ray-reattach-admin-token-0123456789"
JOB_OPTIONS = {"step_delay_s": 0.1, "global_batch": 4, "seq_len": 32}


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head of its own (3 CPUs) that outlives the servers the tests kill."""
    from podfleet.fabric.ray.local_cluster import LocalRayCluster

    cluster = LocalRayCluster(head_cpus=3, node_cpus=(), env={"RAY_AUTH_MODE": "disabled"},
                              log_dir=tmp_path_factory.mktemp("raycluster"))
    try:
        cluster.start()
        yield cluster.address
    finally:
        cluster.stop()


@dataclass
class Served:
    """One server's data directory and port, its Ray cluster record, and the servers the
    tests have started on them (the running one last)."""

    start: Callable[[], subprocess.Popen[bytes]]
    c: PodfleetClient
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    cid: str | None = None

    def running(self) -> subprocess.Popen[bytes]:
        """The server that runs now (started if the last test left none), with a Ray cluster."""
        if not self.procs or self.procs[-1].poll() is not None:
            self.procs.append(self.start())
        if self.cid is None:
            self.cid = self.c.create_cluster("ray", fabric="ray", chips=2, spares=0)["id"]
        cid = self.cid
        _until(lambda: self.c.describe_cluster(cid)["state"] == "active", "the Ray cluster active")
        return self.procs[-1]

    def restart(self) -> None:
        self.procs.append(self.start())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ray_cluster: str) -> Iterator[Served]:
    """One served plane for the module's tests: each kills its server and starts the next on
    the same store and data directory (a test of its own replayed a server start and a
    cluster create); each runs a job of its own."""
    tmp = tmp_path_factory.mktemp("reattach")
    env = {**os.environ, "PODFLEET_WORKDIR": str(tmp / "work"), "PODFLEET_KEY_DIR": str(tmp / "keys"),
           "PODFLEET_ADMIN_TOKEN": TOKEN, "PODFLEET_RAY_ADDRESS": ray_cluster, "RAY_AUTH_MODE": "disabled"}
    with served(tmp, env, TOKEN) as (start, c):
        yield Served(start, c)


def _named_actors(address: str) -> list[dict[str, str]]:
    """Every named actor alive on the Ray cluster, asked by a driver of its own."""
    code = (f"import json, ray; ray.init(address={address!r}, log_to_driver=False, include_dashboard=False); "
            "print(json.dumps(ray.util.list_named_actors(all_namespaces=True)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "RAY_AUTH_MODE": "disabled"}, check=True)
    return [a for a in json.loads(out.stdout.strip().splitlines()[-1]) if a["namespace"].startswith("podfleet-")]


def _job(c: PodfleetClient, job_id: str) -> dict[str, Any]:
    return c.describe_training_job(job_id)


def _job_pids(c: PodfleetClient, cluster: str, job_id: str) -> dict[int, int]:
    """``_pids`` of one job's ranks (a job before it on the cluster may still be shown
    until the telemetry tick)."""
    return {int(ch["worker"]["rank"]): int(ch["worker"]["pid"])
            for ch in c.describe_cluster_hardware(cluster)["chips"]
            if ch.get("worker") and ch["worker"].get("job_id") == job_id}


def _training(server: Served) -> tuple[Any, PodfleetClient, str, str]:
    first = server.running()
    c, cid = server.c, server.cid
    assert cid is not None
    jid = c.submit_training_job(cid, model="debug", chips=2, steps=100_000, checkpoint_interval=10,
                                options=JOB_OPTIONS)["id"]
    return first, c, cid, jid


def test_kill_9_of_the_server_leaves_the_ray_job_training(server: Served, ray_cluster: str) -> None:
    first, c, cid, jid = _training(server)
    _until(lambda: _step(c, jid) >= 5 and len(_pids(c, cid)) == 2, "the job training")
    before, at_kill = _pids(c, cid), _step(c, jid)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(30)
    time.sleep(2.0)  # the ranks train on with no server: their actors journal the reports
    server.restart()
    _until(lambda: _step(c, jid) > at_kill + 5, "the job stepping on after the restart")
    # RUNNING (a periodic checkpoint passes through CHECKPOINTING for as long as its record
    # takes to write, which a reader can catch on a loaded machine).
    _until(lambda: _job(c, jid)["state"] == "RUNNING", "the job RUNNING after the restart")
    assert_ran_through(c, cid, jid, before)
    assert {a["name"].split("/")[0] for a in _named_actors(ray_cluster)} == {jid}
    c.stop_training_job(jid)
    _until(lambda: _job(c, jid)["state"] == "STOPPED", "the job stopped")
    # A stopped job leaves no detached actor behind (its supervisor and ranks are killed).
    _until(lambda: not _named_actors(ray_cluster), "no podfleet actor left on the Ray cluster", 60)


def test_a_rank_that_died_while_the_server_was_down_is_recovered(server: Served, ray_cluster: str) -> None:
    first, c, cid, jid = _training(server)
    _until(lambda: int(_job(c, jid).get("checkpoint_step") or 0) >= 10, "a checkpoint")
    _until(lambda: len(_job_pids(c, cid, jid)) == 2, "both ranks placed")
    before = _job_pids(c, cid, jid)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(30)
    os.kill(before[1], signal.SIGKILL)  # rank 1's actor, while no server watches it
    time.sleep(2.0)
    server.restart()
    _until(lambda: any("actor died while the control plane was down" in ln for ln in _log(c, jid)),
           "the death replayed on the job")
    _until(lambda: _job(c, jid)["state"] == "RUNNING" and len(_job_pids(c, cid, jid)) == 2
           and _job_pids(c, cid, jid)[1] != before[1], "the job recovered on a new gang")
    at = _step(c, jid)
    _until(lambda: _step(c, jid) > at + 3, "the recovered job stepping")
    # Deleting the cluster ends its gangs: nothing of it stays on the Ray cluster.
    c.delete_cluster(cid)
    server.cid = None
    _until(lambda: not _named_actors(ray_cluster), "no podfleet actor left on the Ray cluster", 90.0)
