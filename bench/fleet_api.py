"""The API at fleet size, against a real ``podfleet up`` (subprocess, SQLite, speed 1):
one fleet twin cluster of ``pods`` pods (1,024 = 65,536 chips) and ``small`` one-pod
clusters on the same server, then an open loop of 50 requests/s (request i is sent at
t0 + i/rate whatever happened to earlier ones; its latency counts from then) spread
evenly over DescribeCluster (the fleet), ListClusters (one page of 100),
DescribeClusterHardware (a page of 256 chips, and the per-pod summary) and
SubmitTrainingJob (32-chip jobs on the fleet; a pod keeps one spare). Figures: p50/p99 per operation, errors,
the server's resident memory (RSS, from /proc via psutil), the set-up time (first
create to every cluster active), and the server's CPU seconds per wall second idle and
under the load (with the machine's load average: on a shared machine a server that
needs more than it is given queues every request). Quick mode: 4 pods, 2 one-pod
clusters, 2 s of load."""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

NAME = "fleet-api"
DESCRIPTION = ("a 1,024-pod twin cluster and 100 one-pod clusters on one server: p50/p99 of DescribeCluster, "
               "ListClusters, DescribeClusterHardware (page of 256, pod summary), SubmitTrainingJob at 50 req/s; "
               "RSS; set-up time")
TOKEN = "pf_bench-fleet-api-token-0123456789ab"
RATE_RPS = 50.0
CONNECTIONS = 10
KINDS = ("describe", "list", "hardware_page", "pod_summary", "submit")


async def _load(url: str, duration_s: float, chips: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    rng = random.Random(11)
    lat: dict[str, list[float]] = {k: [] for k in KINDS}
    errors: dict[str, int] = {}
    queue: asyncio.Queue[tuple[str, float] | None] = asyncio.Queue()
    pages = max(1, chips // 256)

    async def send(c: httpx.AsyncClient, kind: str, scheduled: float) -> None:
        try:
            if kind == "describe":
                r = await c.get("/v1/clusters/fleet")
            elif kind == "list":
                r = await c.get("/v1/clusters", params={"max_results": 100})
            elif kind == "hardware_page":
                start = 256 * rng.randrange(pages)
                r = await c.get("/v1/clusters/fleet/hardware",
                                params={"limit": 256, **({"next_token": str(start)} if start else {})})
            elif kind == "pod_summary":
                r = await c.get("/v1/clusters/fleet/hardware", params={"summary": "true"})
            else:
                r = await c.post("/v1/clusters/fleet/jobs", json={"model": "tiny", "chips": 32, "steps": 100,
                                                                  "checkpoint_interval": 50})
            ok = r.status_code in (200, 201)
            if not ok:
                errors[f"{kind}:{r.status_code}"] = errors.get(f"{kind}:{r.status_code}", 0) + 1
        except httpx.HTTPError as exc:
            errors[f"{kind}:{type(exc).__name__}"] = errors.get(f"{kind}:{type(exc).__name__}", 0) + 1
            return
        lat[kind].append(time.perf_counter() - scheduled)

    async def worker() -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as c:
            await c.get("/healthz")
            while (item := await queue.get()) is not None:
                await send(c, *item)

    workers = [asyncio.create_task(worker()) for _ in range(CONNECTIONS)]
    await asyncio.sleep(0.5)
    n = int(RATE_RPS * duration_s)
    t0 = time.perf_counter() + 0.1
    for i in range(n):
        at = t0 + i / RATE_RPS
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((KINDS[i % len(KINDS)], at))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    out: dict[str, Any] = {"errors": sum(errors.values()), "error_kinds": errors, "requests": n,
                           "offered_rps": RATE_RPS, "duration_s": duration_s}
    for kind, v in lat.items():
        if v:
            ms = np.array(v) * 1000
            out[f"{kind}_p50_ms"] = round(float(np.percentile(ms, 50)), 2)
            out[f"{kind}_p99_ms"] = round(float(np.percentile(ms, 99)), 2)
    return out


def _cpu_s(server: psutil.Process) -> float:
    t = server.cpu_times()
    return float(t.user + t.system)


def _sequential(url: str, chips: int, server: psutil.Process, idle_cpu: float, n: int = 10) -> dict[str, float]:
    """Service time: ``n`` requests of each kind one after another (closed loop, nothing
    queued), the median per kind. Beside the open loop's figures it says whether the
    latency there is the work of a request or the wait behind others. ``*_cpu_ms``: the
    server's CPU per request of the kind, less what it spends idle (``idle_cpu`` per
    wall second: the twin ticking) over the same time; on a shared machine the latency
    includes waiting for a core, the CPU does not (50 requests/s fit in a core while
    the five kinds' ``cpu_ms`` sum to under 100)."""
    out: dict[str, float] = {}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
        calls = {
            "describe": lambda: c.get("/v1/clusters/fleet"),
            "list": lambda: c.get("/v1/clusters", params={"max_results": 100}),
            "hardware_page": lambda: c.get("/v1/clusters/fleet/hardware",
                                           params={"limit": 256, "next_token": str(256 * (chips // 512))}),
            "pod_summary": lambda: c.get("/v1/clusters/fleet/hardware", params={"summary": "true"}),
            "submit": lambda: c.post("/v1/clusters/fleet/jobs", json={"model": "tiny", "chips": 32, "steps": 100,
                                                                      "checkpoint_interval": 50}),
        }
        for kind, call in calls.items():
            ms = []
            wall0, cpu0 = time.perf_counter(), _cpu_s(server)
            for _ in range(n):
                t = time.perf_counter()
                call().raise_for_status()
                ms.append((time.perf_counter() - t) * 1000)
            cpu = _cpu_s(server) - cpu0 - idle_cpu * (time.perf_counter() - wall0)
            out[f"{kind}_sequential_p50_ms"] = round(float(np.percentile(ms, 50)), 2)
            out[f"{kind}_cpu_ms"] = round(max(0.0, cpu) * 1000 / n, 2)
    return out


def run(quick: bool = False) -> dict[str, Any]:
    from podfleet.api.testing import free_port, spawn_server, stop_server

    pods, small, duration_s = (4, 2, 2.0) if quick else (1024, 100, 30.0)
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = spawn_server(Path(tmp) / "pf.db", port, TOKEN, "--speed", "1", timeout_s=120)
        url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300) as c:
                t0 = time.perf_counter()
                c.post("/v1/clusters", json={"name": "fleet", "type": "trn2-ultraserver", "pods": pods,
                                             "spares": 1}).raise_for_status()
                for k in range(small):
                    c.post("/v1/clusters", json={"name": f"pod-{k}", "type": "trn2-ultraserver"}).raise_for_status()
                names = ["fleet", *(f"pod-{k}" for k in range(small))]
                deadline = time.monotonic() + 1800
                while any(c.get(f"/v1/clusters/{n}").json()["state"] == "deploying" for n in names):
                    if time.monotonic() > deadline:
                        raise RuntimeError("clusters did not deploy within 30 min")
                    time.sleep(0.5)
                setup_s = time.perf_counter() - t0
                chips = int(c.get("/v1/clusters/fleet").json()["chips"])
                scrape_t = time.perf_counter()
                metrics_bytes = len(c.get("/metrics").content)
                scrape_s = time.perf_counter() - scrape_t
            server = psutil.Process(proc.pid)
            idle0 = server.cpu_times()
            time.sleep(5.0)
            idle1 = server.cpu_times()
            idle_cpu = (idle1.user + idle1.system - idle0.user - idle0.system) / 5.0
            sequential = _sequential(url, chips, server, idle_cpu, n=20)
            idle1 = server.cpu_times()  # the load's CPU counts from here
            figures = asyncio.run(_load(url, duration_s, chips))
            load1 = server.cpu_times()
            rss = server.memory_info().rss
            # The server's own CPU per wall second, idle (the twin ticking 65,536 chips at
            # speed 1) and under the load: above what the machine gives it, requests queue.
            figures["server_cpu_idle"] = round(idle_cpu, 3)
            figures["server_cpu_under_load"] = round(
                (load1.user + load1.system - idle1.user - idle1.system) / (duration_s + 0.6), 3)
            figures["load_avg_1m"] = round(os.getloadavg()[0], 2)
            figures.update(sequential)
            figures.update(fleet_pods=pods, fleet_chips=chips, one_pod_clusters=small, setup_s=round(setup_s, 1),
                           server_rss_bytes=int(rss), server_rss_gib=round(rss / 2**30, 3),
                           metrics_bytes=metrics_bytes, metrics_scrape_s=round(scrape_s, 3),
                           goal_p99_ms=50.0, goal_rss_gib=4.0,
                           server="podfleet up, uvicorn, SQLite store, speed 1")
            return figures
        finally:
            stop_server(proc, 10)
