"""kill -9 and restart of a real ``podfleet up`` while a local job, then a Ray job, trains
(real processes).

One server (SQLite, local fabric, its workers owned by the host's agent), one 2-rank job
of the ``debug`` preset; then the same on a Ray cluster of this machine (a head started
with ``ray start``, 3 CPUs: the gang's detached actors outlive the server). The server is killed with SIGKILL mid-run, left down for
``DOWN_S``, and started again on the same store and data directory; this repeats
``ROUNDS`` times. Per restart:

* ``reattach_s``: from the new server's process start to the first step beyond the one
  the job had reached at the kill, read through the API (server start-up included).
  ``serving_s`` is the part until ``/healthz`` answers (interpreter, imports, store: the
  server listens before its engine reloads), ``after_serving_s`` the rest (the reload,
  re-attach, replay, the first live step; ``/v1`` answers 503 ``starting`` until the reload
  is done, which the SDK retries).
* ``steps_lost``: steps trained twice: the step at the kill minus the step a worker
  restored from after it (a ``restored step N`` line in the job's log); 0 when no worker
  had to restore, i.e. the gang ran on.
* ``pids_changed``: workers whose pid differs after the restart.
* ``history_gaps``: steps in 1..now missing from the job's loss history (GetJobMetrics).
* ``leaked_actors`` (Ray): podfleet's named actors left on the Ray cluster once the job
  was stopped (goal 0).

The figures are reported for the local job at the top level, for the Ray job under
``ray`` and, under ``ray_private``, for a Ray cluster created without an address (the
server's private head, ``fabric/ray/private.py``), with ``same_head`` (the head that ran
before the restarts still runs), and after the cluster's delete ``head_left`` (processes
of the head still alive, goal 0) and ``head_gone_after_delete_s``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podfleet.sdk import PodfleetClient

NAME = "restart-real"
DESCRIPTION = ("kill -9 and restart of podfleet up with a local job, then a Ray job (addressed, then private Ray), "
               "training: steps_lost and reattach_s")
TOKEN = "pf-bench-restart-real-admin-token-0123456789"
DOWN_S = 2.0
STEP_DELAY_S = 0.05


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
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
    raise TimeoutError(f"{what} not within {timeout_s:g} s" + (f" (last: {last})" if last else ""))


class Server:
    """``podfleet up`` as a subprocess on ``root`` (store, data directory, keys)."""

    def __init__(self, root: Path, fabric: str = "local", ray_address: str | None = None) -> None:
        self.root, self.port, self.fabric = root, _port(), fabric
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "PODFLEET_WORKDIR": str(root / "work"), "PODFLEET_KEY_DIR": str(root / "keys"),
                    "PODFLEET_ADMIN_TOKEN": TOKEN, "PODFLEET_LOCAL_AGENT": "true"}
        # An installed podfleet has its bytecode compiled (pip does it at install); a source
        # checkout run with PYTHONDONTWRITEBYTECODE (this project's sandboxes set it) would
        # compile ~270 modules at every start instead. The server caches its bytecode under
        # the bench's directory: the first start (not measured) compiles, restarts read it.
        if ray_address is not None:
            self.env.update(PODFLEET_RAY_ADDRESS=ray_address, RAY_AUTH_MODE="disabled")
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_mono = 0.0
        self.client = PodfleetClient(self.url, TOKEN)

    def start(self) -> None:
        self.started_mono = time.monotonic()
        with open(self.root / "server.log", "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "podfleet", "up", "--agent", "--fabric", self.fabric, "--port", str(self.port),
                 "--db", str(self.root / "pf.db")], stdout=logf, stderr=subprocess.STDOUT, env=self.env)
        _until(lambda: self.client.healthz(), 120, "the server answering /healthz")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def stop_agent(self) -> None:
        subprocess.run([sys.executable, "-m", "podfleet", "agent", "stop"], env=self.env, capture_output=True,
                       timeout=60, check=False)


def pids(c: PodfleetClient, cluster: str) -> dict[int, int]:
    hw = c.describe_cluster_hardware(cluster)
    return {int(ch["worker"]["rank"]): int(ch["worker"]["pid"]) for ch in hw["chips"] if ch.get("worker")}


def step(c: PodfleetClient, job_id: str) -> int:
    return int(c.describe_training_job(job_id)["progress"]["step"])


def history_gaps(c: PodfleetClient, job_id: str, upto: int) -> int:
    pts = c.get_job_metrics(job_id, resolution=10)["points"]
    seen: set[int] = set()
    for p in pts:
        seen.update(range(int(p["step_first"]), int(p["step_last"]) + 1))
    return sum(1 for s in range(1, upto + 1) if s not in seen)


def restored_steps(c: PodfleetClient, job_id: str) -> list[int]:
    """Every ``restored step N`` a worker logged for the job, oldest first."""
    out, since = [], 0
    while True:
        page = c.get_job_logs(job_id, since=since)
        lines = page.get("lines") or []
        for ln in lines:
            text = str(ln.get("message", ""))
            if "restored step " in text:
                out.append(int(text.split("restored step ", 1)[1].split()[0]))
        if not lines or int(page["next"]) <= since:
            return out
        since = int(page["next"])


def start_job(srv: Server, chips: int = 2) -> tuple[str, str]:
    c = srv.client
    cl = c.create_cluster(srv.fabric, fabric=srv.fabric, chips=chips, spares=0)
    cid = cl["id"]
    _until(lambda: c.describe_cluster(cid)["state"] == "active", 120, f"the {srv.fabric} cluster active")
    job = c.submit_training_job(cid, model="debug", chips=chips, steps=100_000, checkpoint_interval=20,
                                options={"step_delay_s": STEP_DELAY_S})
    jid = job["id"]
    _until(lambda: step(c, jid) >= 10, 180, "the job training")
    return cid, jid


def restart(srv: Server, cid: str, jid: str, *, kill_rank: int | None = None) -> dict[str, Any]:
    """One kill -9 and restart; with ``kill_rank``, that worker is killed while the server is down."""
    c = srv.client
    before = pids(c, cid)
    at_kill = step(c, jid)
    restored_before = len(restored_steps(c, jid))
    srv.kill9()
    time.sleep(DOWN_S / 2)
    if kill_rank is not None:
        os.kill(before[kill_rank], signal.SIGKILL)
    time.sleep(DOWN_S / 2)
    srv.start()
    serving_s = time.monotonic() - srv.started_mono
    _until(lambda: step(c, jid) > at_kill, 180, "the job stepping past its step at the kill")
    reattach_s = time.monotonic() - srv.started_mono
    if kill_rank is not None:
        _until(lambda: c.describe_training_job(jid)["state"] == "RUNNING" and len(pids(c, cid)) == len(before),
               180, "the job recovered")
    # The hardware view (where the pids are read) refreshes on the telemetry tick.
    after = _until(lambda: (lambda p: p if len(p) == len(before) else None)(pids(c, cid)), 60, "the workers' pids")
    now = step(c, jid)
    restored = restored_steps(c, jid)[restored_before:]
    return {"reattach_s": round(reattach_s, 3), "serving_s": round(serving_s, 3),
            "after_serving_s": round(reattach_s - serving_s, 3),
            "steps_lost": max(0, at_kill - min(restored)) if restored else 0,
            "pids_changed": sum(1 for r, p in before.items() if after.get(r) != p), "step_at_kill": at_kill,
            "step_after": now, "history_gaps": history_gaps(c, jid, now), "state": c.describe_training_job(jid)["state"]}


def named_actors(address: str, auth: dict[str, str] | None = None) -> int:
    """podfleet's named actors alive on the Ray cluster, counted by a driver of its own
    (``auth``: the cluster's token authentication; default: none)."""
    code = (f"import json, ray; ray.init(address={address!r}, log_to_driver=False, include_dashboard=False); "
            "print(json.dumps(ray.util.list_named_actors(all_namespaces=True)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, **(auth or {"RAY_AUTH_MODE": "disabled"})})
    return sum(1 for a in json.loads(out.stdout.strip().splitlines()[-1]) if a["namespace"].startswith("podfleet-"))


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    re = [r["reattach_s"] for r in rows]
    return {
        "steps_lost": sum(r["steps_lost"] for r in rows),
        "reattach_s": round(statistics.median(re), 3),
        "reattach_s_max": max(re),
        "serving_s": round(statistics.median(r["serving_s"] for r in rows), 3),
        "after_serving_s": round(statistics.median(r["after_serving_s"] for r in rows), 3),
        "pids_changed": sum(r["pids_changed"] for r in rows),
        "history_gaps": sum(r["history_gaps"] for r in rows),
        "restarts": len(rows),
    }


def run_ray(rounds: int) -> dict[str, Any]:
    """The Ray job's rounds, on a Ray head of this machine started for the benchmark."""
    from podfleet.fabric.ray.local_cluster import LocalRayCluster

    with tempfile.TemporaryDirectory(prefix="bench-restart-ray-") as tmp:
        cluster = LocalRayCluster(head_cpus=3, node_cpus=(), env={"RAY_AUTH_MODE": "disabled"},
                                  log_dir=Path(tmp))
        cluster.start()
        try:
            srv = Server(Path(tmp), fabric="ray", ray_address=cluster.address)
            srv.start()
            try:
                cid, jid = start_job(srv)
                rows = [restart(srv, cid, jid) for _ in range(rounds)]
                srv.client.stop_training_job(jid)
                _until(lambda: srv.client.describe_training_job(jid)["state"] == "STOPPED", 60, "the Ray job stopped")
                leaked = named_actors(cluster.address)
                deadline = time.monotonic() + 30
                while leaked and time.monotonic() < deadline:  # ray.kill is asynchronous
                    time.sleep(1.0)
                    leaked = named_actors(cluster.address)
            finally:
                srv.stop()
        finally:
            cluster.stop()
    return {**summary(rows), "leaked_actors": leaked,
            "job": "debug preset, 2 Ray ranks (detached actors on a 3-CPU head), gloo, checkpoint every 20 steps, "
                   "step_delay_s 0.05"}


def head_processes(rec: dict[str, Any]) -> int:
    """Live processes of a recorded private head: its process group (Ray's GCS, raylet,
    the actors' workers)."""
    n = 0
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                zombie = (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
                n += int(os.getpgid(int(d.name)) == int(rec["pid"]) and not zombie)
    return n


def run_private_ray(rounds: int) -> dict[str, Any]:
    """The Ray job's rounds on a cluster created without an address: the data directory's
    private head (``fabric/ray/private.py``), which the server starts in a session of its
    own; then the cluster is deleted and what is left of the head counted."""
    with tempfile.TemporaryDirectory(prefix="bench-restart-pray-") as tmp:
        srv = Server(Path(tmp), fabric="ray")
        srv.env.pop("PODFLEET_RAY_ADDRESS", None)
        srv.env.pop("RAY_AUTH_MODE", None)  # the head's own token, as an operator runs it
        record = Path(tmp) / "work" / "ray" / "head.json"
        rec: dict[str, Any] = {}
        srv.start()
        try:
            cid, jid = start_job(srv)
            rec = json.loads(record.read_text())
            rows = [restart(srv, cid, jid) for _ in range(rounds)]
            same_head = json.loads(record.read_text())["pid"] == rec["pid"]
            srv.client.stop_training_job(jid)
            _until(lambda: srv.client.describe_training_job(jid)["state"] == "STOPPED", 60, "the Ray job stopped")
            auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(record.parent / "auth_token")}
            leaked = named_actors(rec["address"], auth)
            deadline = time.monotonic() + 30
            while leaked and time.monotonic() < deadline:  # ray.kill is asynchronous
                time.sleep(1.0)
                leaked = named_actors(rec["address"], auth)
            srv.client.delete_cluster(cid)
            deleted = time.monotonic()
            _until(lambda: not head_processes(rec), 60, "the private head gone after the delete")
            gone_s = time.monotonic() - deleted
        finally:
            srv.stop()
            if rec and head_processes(rec):  # a failed round: never leave the head running
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(rec["pid"]), signal.SIGKILL)
    return {**summary(rows), "leaked_actors": leaked, "same_head": same_head, "head_left": head_processes(rec),
            "head_gone_after_delete_s": round(gone_s, 3),
            "job": "debug preset, 2 Ray ranks on the server's private Ray head (ray start, 2 CPUs, token auth), "
                   "gloo, checkpoint every 20 steps, step_delay_s 0.05"}


def run(quick: bool = False) -> dict[str, Any]:
    rounds = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        srv = Server(Path(tmp))
        srv.start()
        try:
            cid, jid = start_job(srv)
            rows = [restart(srv, cid, jid) for _ in range(rounds)]
            srv.client.stop_training_job(jid)
        finally:
            srv.stop()
            srv.stop_agent()
    ray = run_ray(rounds)
    private = run_private_ray(rounds)
    return {
        **summary(rows),
        "bytecode_cached": True,  # as an installed package (see Server)
        "load_1m": round(os.getloadavg()[0], 2),  # the machine's load at the end: start-up is CPU-bound
        "goal_steps_lost": 0,
        "goal_reattach_s": 5.0,
        "job": "debug preset, 2 local ranks, gloo, checkpoint every 20 steps, step_delay_s 0.05",
        "ray": ray,
        "ray_private": private,
    }
