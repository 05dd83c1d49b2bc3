"""Leader failover: 3 ``podfleet up`` on one PostgreSQL store under an open-loop mixed load.

The servers share a schema of their own and one key directory; clients send each request
to a server picked at random (a follower forwards it to the leader). The leader is killed
in turn with ``kill -9`` and with SIGSTOP (then SIGCONT once a follower took over: the old
leader must find its term fenced and exit); a server that went down is started again, as
systemd's ``Restart=always`` would, before the next kill.

Load (open loop: requests are sent on schedule, whether or not earlier ones answered):
submits of twin jobs with idempotency keys, stops of acknowledged jobs, cluster creates
(capped: every cluster is a simulated 64-chip pod the leader keeps in memory), and reads.
``RATE_PER_S`` is the issue's 200/s (``PODFLEET_BENCH_HA_RATE`` sets another), sent from one
asyncio loop over 64 kept-alive connections; the rate offered is an assumption of the load,
what came back is a result: ``answered_per_s`` (requests answered with any HTTP status, per
second of load), ``acked_per_s`` (2xx), ``overload`` (due while 64 were awaiting an answer:
not sent) and ``requests_unanswered`` (sent, no answer: a server killed or restarting).

Figures (counted from what happened):
* ``acked_writes_lost``: writes answered 2xx whose effect is missing at the end (a job or
  cluster that does not exist, a stopped job running again). Goal 0.
* ``double_allocations``: chips owned by two running jobs of one cluster, in any of the
  samples taken after each takeover and at the end. Goal 0.
* ``takeover_s`` p50/p99: from the kill to a follower saying ``leader`` on ``/healthz``
  (polled every 0.1 s). Goal p99 <= 5 s; the lease is ``PODFLEET_LEASE_TTL_S`` (4 s), so a
  kill -9 costs at least the rest of the lease: that part is the setting, not a result.
* ``unavailable_s`` p99 (writes): per kill, from the first write refused or failed after it
  to the next write acknowledged.
* ``takeover_lease_s`` p50/p99: ``takeover_s`` less the new leader's reload, i.e. the rest
  of the lease, the follower's detection and its thread start (what a shorter lease cuts).
* ``reload_s`` p50/p99: each new leader's reload of the store (its log line), and
  ``takeover_specs_warm`` / ``takeover_specs_parsed``: the job specs those reloads took
  from the follower's warm-up (``control.warm``) or had to parse.
* ``jobs_interrupted``: jobs running before a kill (and not stopped by the load) that were
  not running 10 s after the takeover; ``steps_redone``: steps they went back (twin jobs
  resume from their last checkpoint on the new leader).
* One real local job (2 ranks of the ``debug`` preset, workers owned by the host's
  ``podfleet agent``, which the three servers share through one data directory) trains
  throughout: ``local_job_interrupted`` counts the takeovers after which it was not
  RUNNING on the same worker processes, stepping past its step at the kill;
  ``local_job_restores``: times a worker of it restored from a checkpoint (0: the new
  leaders re-attached to the running gang, no step redone).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from podfleet.api.testing import free_port, role_of, spawn_url_server
from podfleet.sdk import PodfleetClient

NAME = "ha-failover"
DESCRIPTION = ("3 servers on PostgreSQL, mixed open-loop load, the leader killed (kill -9 / SIGSTOP) in turn: "
               "acked_writes_lost, double_allocations, takeover_s, unavailable_s, jobs_interrupted")
PG_URL = os.environ.get("PODFLEET_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
TOKEN = "bench-ha-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# The open-loop rate (PODFLEET_BENCH_HA_RATE overrides it); what the servers answered
# is reported beside it (``answered_per_s``): on a shared 2-core machine that is less.
RATE_PER_S = float(os.environ.get("PODFLEET_BENCH_HA_RATE", "200"))
CONNECTIONS = 64  # the load generator's kept-alive connections (all servers together)
# Requests awaiting an answer, one per connection: one due beyond this is counted as overload
# (not sent). More in flight than connections only queue in the client's pool, past their
# timeout once the servers fall behind, and no request is answered any sooner.
MAX_IN_FLIGHT = CONNECTIONS
MIX = (("read", 0.5), ("submit", 0.3), ("stop", 0.17), ("create", 0.03))
MAX_CLUSTERS = 3  # cluster creates beyond this are sent as reads (memory of the twin)
SETTLE_S = 10.0  # after a takeover: time for jobs to be placed again before sampling
SERVERS = 3
LOCAL_STEP_DELAY_S = 0.05  # the local job's workers sleep this per step (a light load on 2 cores)


@dataclass
class Load:
    """Every request sent and what came back (appended by the load threads)."""

    results: list[tuple[float, str, int]] = field(default_factory=list)  # (mono time, kind, status)
    acked_jobs: dict[str, str] = field(default_factory=dict)  # client_token -> job id
    acked_stops: set[str] = field(default_factory=set)
    acked_clusters: dict[str, str] = field(default_factory=dict)  # name -> id
    lock: threading.Lock = field(default_factory=threading.Lock)


class Fleet:
    def __init__(self, url: str, workdir: Path, ttl_s: float) -> None:
        self.url, self.workdir = url, workdir
        self.env = {"PODFLEET_KEY_DIR": str(workdir / "keys"), "PODFLEET_AUDIT_DIGESTS_DIR": str(workdir / "dig"),
                    "PODFLEET_WORKDIR": str(workdir / "work"), "PODFLEET_LEASE_TTL_S": str(ttl_s)}
        self.ports = [free_port() for _ in range(SERVERS)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * SERVERS
        self.down: set[int] = set()  # killed or frozen, until started again

    def start(self, i: int, *args: str) -> None:
        self.procs[i] = spawn_url_server(self.url, self.ports[i], TOKEN, *args, env=self.env,
                                         log=self.workdir / f"server-{i}.log", timeout_s=180)
        self.down.discard(i)

    def leader(self) -> int | None:
        for i, port in enumerate(self.ports):
            if self.procs[i] is not None and role_of(port) == "leader":
                return i
        return None

    def stop_all(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()


def _pick(rng: random.Random) -> str:
    x, acc = rng.random(), 0.0
    for kind, share in MIX:
        acc += share
        if x < acc:
            return kind
    return "read"


async def _send(client: httpx.AsyncClient, fleet: Fleet, load: Load, kind: str, rng: random.Random) -> None:
    # As behind a load balancer that health-checks: only servers that are up get requests
    # (taken out at the kill, back once started; an optimistic balancer, said so in the docs).
    up = [p for i, p in enumerate(fleet.ports) if fleet.procs[i] is not None and i not in fleet.down]
    base = f"http://127.0.0.1:{rng.choice(up or fleet.ports)}"
    with load.lock:
        jobs = list(load.acked_jobs.values())
        n_clusters = len(load.acked_clusters)
    if kind == "stop" and not jobs:
        kind = "submit"
    if kind == "create" and n_clusters >= MAX_CLUSTERS:
        kind = "read"
    status = 0
    try:
        if kind == "read":
            status = (await client.get(f"{base}/v1/jobs", params={"max_results": 50}, headers=AUTH)).status_code
        elif kind == "submit":
            token = uuid.uuid4().hex
            r = await client.post(f"{base}/v1/clusters/pod-0/jobs", headers=AUTH, json={
                "name": f"j-{token[:8]}", "model": "debug", "chips": 4, "steps": 10_000_000, "client_token": token})
            status = r.status_code
            if status in (200, 201):
                with load.lock:
                    load.acked_jobs[token] = r.json()["id"]
        elif kind == "stop":
            job = rng.choice(jobs)
            r = await client.post(f"{base}/v1/jobs/{job}/stop", headers=AUTH)
            status = r.status_code
            if status == 200:
                with load.lock:
                    load.acked_stops.add(job)
        else:
            name = f"c-{uuid.uuid4().hex[:8]}"
            r = await client.post(f"{base}/v1/clusters", headers=AUTH, json={
                "name": name, "type": "trn2-ultraserver", "spares": 2, "client_token": name})
            status = r.status_code
            if status in (200, 201, 202):
                with load.lock:
                    load.acked_clusters[name] = r.json()["id"]
    except httpx.HTTPError:
        status = 0  # no answer: the server picked is the one just killed, or is restarting
    with load.lock:
        load.results.append((time.monotonic(), kind, status))


def _drive(fleet: Fleet, load: Load, rate: float, stop: threading.Event, seed: int) -> None:
    """The load generator's thread: its own event loop (``_drive_async``)."""
    asyncio.run(_drive_async(fleet, load, rate, stop, seed))


async def _drive_async(fleet: Fleet, load: Load, rate: float, stop: threading.Event, seed: int) -> None:
    """Open loop: request k goes out at start + k/rate, whatever earlier ones did, as a task
    on one event loop over a pool of ``CONNECTIONS`` kept-alive connections. At most
    ``MAX_IN_FLIGHT`` wait for an answer; one due beyond that is counted as ``overload``
    (not sent), so the schedule never slows down to what the servers carry."""
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    tasks: set[asyncio.Task[None]] = set()
    async with httpx.AsyncClient(timeout=20, limits=limits) as client:
        start, k = time.monotonic(), 0
        while not stop.is_set():
            delay = start + k / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(min(delay, 0.05))
                continue
            k += 1
            if len(tasks) >= MAX_IN_FLIGHT:
                with load.lock:
                    load.results.append((time.monotonic(), "overload", 0))
                continue
            task = asyncio.create_task(_send(client, fleet, load, _pick(rng), random.Random(rng.random())))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=30)


def _jobs(port: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    nxt: str | None = None
    while True:
        params: dict[str, Any] = {"max_results": 1000, **({"next_token": nxt} if nxt else {})}
        r = httpx.get(f"http://127.0.0.1:{port}/v1/jobs", params=params, headers=AUTH, timeout=30)
        r.raise_for_status()
        body = r.json()
        out += body["jobs"]
        nxt = body.get("next_token")
        if not nxt:
            return out


def _double_allocations(jobs: list[dict[str, Any]]) -> int:
    owned: dict[tuple[str, int], int] = {}
    for j in jobs:
        if j["state"] == "RUNNING":
            for chip in (j.get("allocation") or {}).get("chips") or []:
                owned[(j["cluster_id"], int(chip))] = owned.get((j["cluster_id"], int(chip)), 0) + 1
    return sum(n - 1 for n in owned.values() if n > 1)


def _local_job(c: PodfleetClient) -> tuple[str, str]:
    """A local cluster and a 2-rank job training on it (its workers owned by the agent)."""
    cid = str(c.create_cluster("loc", fabric="local", chips=2, spares=0, client_token="loc")["id"])
    _until(lambda: c.describe_cluster(cid)["state"] == "active", 180, "the local cluster active")
    jid = str(c.submit_training_job(cid, model="debug", chips=2, steps=10_000_000, checkpoint_interval=20,
                                    options={"step_delay_s": LOCAL_STEP_DELAY_S}, client_token="loc-job")["id"])
    _until(lambda: _local_state(c, cid, jid)[1] >= 5, 240, "the local job training")
    return cid, jid


def _local_state(c: PodfleetClient, cid: str, jid: str) -> tuple[str, int, dict[int, int], int]:
    """(state, step, rank -> pid, restores so far) of the local job."""
    job = c.describe_training_job(jid)
    hw = c.describe_cluster_hardware(cid)
    pids = {int(ch["worker"]["rank"]): int(ch["worker"]["pid"]) for ch in hw["chips"] if ch.get("worker")}
    restores, since = 0, 0
    while True:
        page = c.get_job_logs(jid, since=since)
        lines = page.get("lines") or []
        restores += sum(1 for ln in lines if "restored step " in str(ln.get("message", "")))
        if not lines or int(page["next"]) <= since:
            break
        since = int(page["next"])
    return str(job["state"]), int(job["progress"]["step"]), pids, restores


def _stepped_past(c: PodfleetClient, cid: str, jid: str, step: int) -> tuple[str, int, dict[int, int], int] | None:
    st = _local_state(c, cid, jid)
    return st if st[1] > step else None


def _until(cond: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            out = cond()
            if out:
                return out
        except httpx.HTTPError:
            pass  # between leaders
        time.sleep(0.5)
    raise RuntimeError(f"{what}: not within {timeout_s:g} s")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, round(q * (len(s) - 1)))], 3)


def _last_reload(log: Path) -> float:
    """The newest reload time a server's log names (-1 when none yet)."""
    found = re.findall(r"store reloaded in ([0-9.]+) s", log.read_text()) if log.exists() else []
    return float(found[-1]) if found else -1.0


def _unavailable(results: list[tuple[float, str, int]], kills: list[float]) -> list[float]:
    spans = []
    writes = sorted((t, s) for t, kind, s in results if kind in ("submit", "stop", "create"))
    for i, t0 in enumerate(kills):
        t_end = kills[i + 1] if i + 1 < len(kills) else float("inf")
        first_bad = next((t for t, s in writes if t0 <= t < t_end and not 200 <= s < 300), None)
        if first_bad is None:
            spans.append(0.0)
            continue
        ok = next((t for t, s in writes if first_bad < t < t_end and 200 <= s < 300), None)
        spans.append((ok if ok is not None else t_end) - first_bad)
    return spans


def run(quick: bool = False) -> dict[str, Any]:
    # PODFLEET_BENCH_HA_KILLS: fewer kills on a machine where each takeover is slow.
    kills = 2 if quick else int(os.environ.get("PODFLEET_BENCH_HA_KILLS", "20"))
    rate = RATE_PER_S / 2 if quick else RATE_PER_S
    ttl_s = 4.0
    schema = "pf_bench_ha_" + uuid.uuid4().hex[:10]
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False)
    workdir = Path(tempfile.mkdtemp(prefix="bench-ha-"))
    fleet = Fleet(url, workdir, ttl_s)
    load, stop = Load(), threading.Event()
    takeovers: list[float] = []
    kill_times: list[float] = []
    stale_exits, double, interrupted, redone, samples = 0, 0, 0, 0, 0
    drive_s = 0.0
    reload_by_kill: list[float] = []
    reloads: list[float] = []
    specs_warm, specs_parsed = 0, 0
    local_interrupted, local_restores = 0, 0
    local_outcomes: list[str] = []
    try:
        fleet.start(0, "--default-cluster", "pod-0")
        for i in range(1, SERVERS):
            fleet.start(i)
        sdk = PodfleetClient(f"http://127.0.0.1:{fleet.ports[0]}", TOKEN)
        local_cid, local_jid = _local_job(sdk)
        driver = threading.Thread(target=_drive, args=(fleet, load, rate, stop, 7), daemon=True)
        drive_t0 = time.monotonic()
        driver.start()
        time.sleep(10 if quick else 20)
        for k in range(kills):
            lead = fleet.leader()
            if lead is None:
                raise RuntimeError("no leader before a kill")
            before = {j["id"]: j for j in _jobs(fleet.ports[lead]) if j["state"] == "RUNNING"}
            lead_sdk = PodfleetClient(f"http://127.0.0.1:{fleet.ports[lead]}", TOKEN)
            _, local_step, local_pids, _ = _local_state(lead_sdk, local_cid, local_jid)
            proc = fleet.procs[lead]
            assert proc is not None
            how = signal.SIGKILL if k % 2 == 0 else signal.SIGSTOP
            t0 = time.monotonic()
            fleet.down.add(lead)
            proc.send_signal(how)
            kill_times.append(t0)
            new = None
            while time.monotonic() - t0 < 120:
                new = next((i for i, p in enumerate(fleet.ports) if i != lead and role_of(p) == "leader"), None)
                if new is not None:
                    break
                time.sleep(0.1)
            if new is None:
                raise RuntimeError(f"no takeover within 120 s after kill {k}")
            takeovers.append(time.monotonic() - t0)
            reload_by_kill.append(_last_reload(workdir / f"server-{new}.log"))
            if how == signal.SIGSTOP:
                proc.send_signal(signal.SIGCONT)
                try:
                    stale_exits += int(proc.wait(timeout=60) == 75)
                except subprocess.TimeoutExpired:
                    proc.kill()
            else:
                proc.wait(timeout=30)
            fleet.procs[lead] = None
            time.sleep(SETTLE_S)
            # Under a heavy machine load the new leader may itself have lost its lease since
            # (a renewal starved of CPU past the lease): sample whoever leads now.
            now_leads = fleet.leader()
            while now_leads is None and time.monotonic() - t0 < 240:
                time.sleep(0.5)
                now_leads = fleet.leader()
            if now_leads is None:
                raise RuntimeError(f"no leader after the settle of kill {k}")
            new = now_leads
            after = {j["id"]: j for j in _jobs(fleet.ports[new])}
            samples += 1
            double += _double_allocations(list(after.values()))
            with load.lock:
                stopped = set(load.acked_stops)
            for jid, j in before.items():
                if jid in stopped:
                    continue
                a = after.get(jid)
                if a is None or a["state"] != "RUNNING":
                    interrupted += 1
                else:
                    redone += max(0, int(j["progress"]["step"]) - int(a["progress"]["step"]))
            new_sdk = PodfleetClient(f"http://127.0.0.1:{fleet.ports[new]}", TOKEN)
            try:
                state, _, pids_now, restores = _until(
                    functools.partial(_stepped_past, new_sdk, local_cid, local_jid, local_step), 60,
                    "the local job stepping past its step at the kill")
                local_restores = restores
                # The hardware view names the workers on its next telemetry tick after a reload.
                deadline = time.monotonic() + 30
                while pids_now != local_pids and time.monotonic() < deadline:
                    time.sleep(0.5)
                    state, _, pids_now, restores = _local_state(new_sdk, local_cid, local_jid)
                local_restores = restores
                ok = state == "RUNNING" and pids_now == local_pids
                local_interrupted += int(not ok)
                local_outcomes.append("ran on" if ok else f"{state}, pids {local_pids} -> {pids_now}")
            except RuntimeError as exc:
                local_interrupted += 1
                job = new_sdk.describe_training_job(local_jid)
                local_outcomes.append(f"{exc}: {job['state']} at step {job['progress']['step']} ({job['reason']})")
            fleet.start(lead)  # back as a follower
        stop.set()
        driver.join(timeout=60)
        drive_s = time.monotonic() - drive_t0
        lead = fleet.leader()
        if lead is None:
            raise RuntimeError("no leader at the end")
        final = {j["id"]: j for j in _jobs(fleet.ports[lead])}
        samples += 1
        double += _double_allocations(list(final.values()))
        lost = sum(1 for jid in load.acked_jobs.values() if jid not in final)
        lost += sum(1 for jid in load.acked_stops
                    if jid in final and final[jid]["state"] in ("RUNNING", "PENDING", "PLACING"))
        names = {c["name"] for c in httpx.get(f"http://127.0.0.1:{fleet.ports[lead]}/v1/clusters", headers=AUTH,
                                               params={"max_results": 1000}, timeout=30).json()["clusters"]}
        lost += sum(1 for n in load.acked_clusters if n not in names)
        PodfleetClient(f"http://127.0.0.1:{fleet.ports[lead]}", TOKEN).stop_training_job(local_jid)
    finally:
        stop.set()
        fleet.stop_all()
        # The agent the servers shared (and any worker it still holds) goes with the bench.
        subprocess.run([sys.executable, "-m", "podfleet", "agent", "stop"], env={**os.environ, **fleet.env},
                       capture_output=True, timeout=60, check=False)
        # How long each new leader took to reload the store (its log line): the part of a
        # takeover that is not the lease running out.
        for log in workdir.glob("server-*.log"):
            text_ = log.read_text()
            reloads += [float(m) for m in re.findall(r"store reloaded in ([0-9.]+) s", text_)]
            # A takeover's reload takes the job specs its follower parsed ahead (control.warm).
            for warm_n, parsed_n in re.findall(r"\((\d+) job specs warm, (\d+) parsed\)", text_):
                specs_warm += int(warm_n)
                specs_parsed += int(parsed_n)
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()
        shutil.rmtree(workdir, ignore_errors=True)
    unavailable = _unavailable(load.results, kill_times)
    lease_parts = [t - r for t, r in zip(takeovers, reload_by_kill, strict=True) if r >= 0]
    answered = [r for r in load.results if r[2] != 0]
    writes = [r for r in load.results if r[1] in ("submit", "stop", "create")]
    return {
        "acked_writes_lost": lost,
        "double_allocations": double,
        "takeover_s_p50": _pct(takeovers, 0.5),
        "takeover_s_p99": _pct(takeovers, 0.99),
        "unavailable_s_p99": _pct(unavailable, 0.99),
        "unavailable_s_p50": _pct(unavailable, 0.5),
        "takeover_lease_s_p50": _pct(lease_parts, 0.5),
        "takeover_lease_s_p99": _pct(lease_parts, 0.99),
        "reload_s_p50": _pct(reloads, 0.5),
        "reload_s_p99": _pct(reloads, 0.99),
        "takeover_specs_warm": specs_warm,
        "takeover_specs_parsed": specs_parsed,
        "jobs_interrupted": interrupted,
        "local_job_interrupted": local_interrupted,
        "local_job_restores": local_restores,
        "local_job_outcomes": local_outcomes,  # per takeover, in kill order
        "steps_redone": redone,
        "stale_leader_exits": stale_exits,
        "kills": kills,
        "kills_sigstop": kills // 2,
        "requests": len(load.results),
        "writes": len(writes),
        "writes_acked": sum(1 for r in writes if 200 <= r[2] < 300),
        "writes_refused_503": sum(1 for r in writes if r[2] == 503),
        "requests_unanswered": sum(1 for r in load.results if r[2] == 0 and r[1] != "overload"),
        "acked_jobs": len(load.acked_jobs),
        "acked_stops": len(load.acked_stops),
        "acked_clusters": len(load.acked_clusters),
        "allocation_samples": samples,
        "rate_per_s": rate,  # offered (open loop): an assumption of the load
        "answered_per_s": round(len(answered) / drive_s, 1) if drive_s else None,
        "acked_per_s": round(sum(1 for r in answered if 200 <= r[2] < 300) / drive_s, 1) if drive_s else None,
        "overload": sum(1 for r in load.results if r[1] == "overload"),
        "load_1m": round(os.getloadavg()[0], 2),  # the machine's load at the end (shared)
        "lease_ttl_s": ttl_s,
        "goal_takeover_s_p99": 5.0,
        "goal_rate_per_s": 200.0,
        "median_takeover_note": "a kill -9 waits out the rest of the lease (PODFLEET_LEASE_TTL_S): an assumption",
        "mean_takeover_s": round(statistics.fmean(takeovers), 3) if takeovers else None,
        "takeovers_s": [round(t, 3) for t in takeovers],  # in kill order: kill -9, SIGSTOP, ...
    }
