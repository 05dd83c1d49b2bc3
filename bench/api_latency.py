"""API latency under an open-loop load against a real ``podfleet up`` (subprocess,
SQLite, one 64-chip twin pod): 200 requests/s for 30 s over 50 connections, 80%
DescribeClusterHardware (64 chips with metrics + 192 links), 20% SubmitTrainingJob /
DescribeTrainingJob. Open loop: request i is sent at t0 + i/rate whatever happened to
earlier ones, and its latency counts from that scheduled time, so a slow server shows
up as latency instead of silently lowering the offered load."""

from __future__ import annotations

import asyncio
import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

NAME = "api-latency"
DESCRIPTION = ("open-loop 200 req/s x 30 s over 50 connections against podfleet up (SQLite, "
               "64-chip twin): p50/p99 latency, errors, throughput")
TOKEN = "pf_bench-api-latency-token-0123456789"
RATE_RPS = 200.0
CONNECTIONS = 50


def _free_port() -> int:
    from podfleet.api.testing import free_port

    return free_port()


def _start_server(db: Path, port: int) -> subprocess.Popen[bytes]:
    from podfleet.api.testing import spawn_server

    return spawn_server(db, port, TOKEN, "--speed", "1")


async def _load(url: str, duration_s: float) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    rng = random.Random(7)
    lat: dict[str, list[float]] = {"hardware": [], "submit": [], "describe": []}
    errors: dict[str, int] = {}
    jobs: list[str] = []
    # 50 connections = 50 workers, each with a one-connection httpx client. (One client
    # with a 50-connection pool spends more CPU scanning its pool than the server spends
    # answering: httpcore checks every idle connection on each assignment.) Requests are
    # queued at their scheduled times whatever the workers are doing (open loop); time
    # spent in the queue counts as latency.
    queue: asyncio.Queue[tuple[str, float] | None] = asyncio.Queue()

    async def worker() -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=10) as c:
            await c.get("/v1/clusters/pod/hardware")  # warm the connection (not measured)
            while (item := await queue.get()) is not None:
                await _send(c, *item)

    async def _send(c: httpx.AsyncClient, kind: str, scheduled: float) -> None:
        try:
            if kind == "hardware":
                r = await c.get("/v1/clusters/pod/hardware")
                ok = r.status_code == 200 and len(r.content) > 10_000  # decoded size
            elif kind == "submit":
                # "tiny": its twin step time (~3 ms on one chip) matches the model this load
                # used before the preset registry was unified; "debug" is now so small that
                # its jobs end within milliseconds of their submit, a different load.
                r = await c.post("/v1/clusters/pod/jobs", json={
                    "model": "tiny", "chips": 1, "steps": 200, "checkpoint_interval": 100})
                ok = r.status_code == 201
                if ok:
                    jobs.append(r.json()["id"])
            else:
                r = await c.get(f"/v1/jobs/{rng.choice(jobs)}")
                ok = r.status_code == 200
            if not ok:
                errors[f"{kind}:{r.status_code}"] = errors.get(f"{kind}:{r.status_code}", 0) + 1
        except httpx.HTTPError as exc:
            errors[f"{kind}:{type(exc).__name__}"] = errors.get(f"{kind}:{type(exc).__name__}", 0) + 1
            return
        lat[kind].append(time.perf_counter() - scheduled)

    workers = [asyncio.create_task(worker()) for _ in range(CONNECTIONS)]
    await asyncio.sleep(1.0)  # connections open and warm
    n = int(RATE_RPS * duration_s)
    t0 = time.perf_counter() + 0.1
    for i in range(n):
        u = rng.random()
        kind = "hardware" if u < 0.8 else ("submit" if u < 0.9 or not jobs else "describe")
        at = t0 + i / RATE_RPS
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((kind, at))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    wall = time.perf_counter() - t0
    all_ms = np.array([x for v in lat.values() for x in v]) * 1000
    out: dict[str, Any] = {
        "p50_ms": round(float(np.percentile(all_ms, 50)), 2),
        "p99_ms": round(float(np.percentile(all_ms, 99)), 2),
        "max_ms": round(float(all_ms.max()), 2),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "throughput_rps": round(len(all_ms) / wall, 1),
        "offered_rps": RATE_RPS,
        "requests": n,
        "duration_s": duration_s,
        "connections": CONNECTIONS,
    }
    for kind, v in lat.items():
        if v:
            out[f"{kind}_p99_ms"] = round(float(np.percentile(np.array(v) * 1000, 99)), 2)
    return out


def _run_loop(coro: Any) -> Any:
    try:
        import uvloop  # the load generator shares the machine: keep its own cost low
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def run(quick: bool = False) -> dict[str, Any]:
    from podfleet.api.testing import stop_server

    duration_s = 5.0 if quick else 30.0
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        proc = _start_server(Path(tmp) / "pf.db", port)
        url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
                r = c.post("/v1/clusters", json={"name": "pod", "type": "trn2-ultraserver", "spares": 2})
                r.raise_for_status()
                deadline = time.monotonic() + 60
                while c.get("/v1/clusters/pod").json()["state"] == "deploying":
                    if time.monotonic() > deadline:
                        raise RuntimeError("the twin pod did not deploy within 60 s")
                    time.sleep(0.1)
                hw_bytes = len(c.get("/v1/clusters/pod/hardware").content)
            figures = _run_loop(_load(url, duration_s))
            figures["hardware_response_bytes"] = hw_bytes
            figures["server"] = "podfleet up, uvicorn, SQLite store, speed 1, telemetry tick 1 s"
            return figures
        finally:
            stop_server(proc, 10)
