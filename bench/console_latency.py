"""Console latency against a real ``podfleet up`` (subprocess, SQLite, one 64-chip twin
pod, speed 1, telemetry tick 1 s), driven by headless Debian chromium through playwright.

- ``first_render_ms``: the cluster page of 64 chips and 192 links, server and browser
  warm, from navigation start until the torus has been painted (the page's
  ``torus-drawn`` mark, set after the frame that first shows it); median and p95 of
  ``renders`` loads.
- ``live_lag_ms_p99``: telemetry sample time (the snapshot's ``time``, rendered on the
  engine at the tick) to the DOM update that shows it, in the page, over the samples of
  ``watch_s`` seconds on one open cluster page (same machine: one clock).
- ``api_p99_ms_with_consoles``: the ``api-latency`` load (open loop, 200 req/s over 50
  connections, 80% DescribeClusterHardware) while ``consoles`` cluster pages are open and
  streaming, against the same server; ``api_p99_ms_alone`` is the same load without them.

- ``api_p99_ms_with_streams``: the same load while ``consoles`` plain clients (one
  process of its own, httpx) hold the console's hardware stream with a signed-in
  session cookie and read every event: the server's whole share of serving that many
  consoles, without their browsers' rendering on the server's cores.
  ``stream_events_min`` is the fewest events one of them received during the load.

On this 2-core machine the browsers' rendering competes with the server: each of the 20
renderers spends ~10 ms of CPU on every telemetry tick, all within the same ~100 ms, so
``api_p99_ms_with_consoles`` measures the machine as much as the server; operators'
browsers run on their own machines. Both figures are reported.

Goals (issue 12): first render <= 300 ms, live lag p99 <= 1,000 ms, API p99 with 20
consoles <= 50 ms. Quick mode: 3 loads, 10 s of live samples, 5 consoles, 5 s of load.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

NAME = "console-latency"
DESCRIPTION = ("web console in headless chromium against podfleet up (64-chip twin): first render of the "
               "torus, live telemetry lag, API p99 under load with consoles open")
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _api_latency() -> Any:
    path = Path(__file__).with_name("api_latency.py")
    spec = importlib.util.spec_from_file_location("podfleet_bench_api_latency_for_console", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(xs), q)), 1)


def _load(api: Any, url: str, duration_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def go() -> None:  # its own thread and event loop: playwright's sync API holds this one
        out.update(api._run_loop(api._load(url, duration_s)))

    t = threading.Thread(target=go)
    t.start()
    t.join()
    return out


async def _read_streams(url: str, path: str, cookie: str, n: int, seconds: float) -> list[int]:
    """``n`` clients read ``path`` (server-sent events) for ``seconds``; events each got."""
    from podfleet.console.sessions import COOKIE as cookie_name
    counts = [0] * n

    async def one(i: int) -> None:
        async with httpx.AsyncClient(base_url=url, cookies={cookie_name: cookie}, timeout=None) as c, \
                c.stream("GET", path) as r:
            if r.status_code != 200:
                raise RuntimeError(f"stream {path} answered {r.status_code}")
            async for line in r.aiter_lines():
                if line.startswith("event: hardware"):
                    counts[i] += 1

    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    done, _ = await asyncio.wait(tasks, timeout=seconds)
    for t in tasks:
        t.cancel()
    for t in done:
        if t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
    return counts


def _with_streams(api: Any, url: str, token: str, consoles: int, load_s: float) -> dict[str, Any]:
    """The api-latency load while ``consoles`` plain clients, in a process of their own,
    read the console's hardware stream."""
    from podfleet.console.sessions import COOKIE
    with httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/console/session", json={"token": token})
        r.raise_for_status()
        cookie = r.cookies[COOKIE]
        cid = c.get("/v1/clusters/pod", headers={"Authorization": f"Bearer {token}"}).json()["id"]
    readers = subprocess.Popen(
        [sys.executable, __file__, "--streams", url, f"/console/stream/clusters/{cid}/hardware", cookie,
         str(consoles), str(load_s + 6.0)], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(3.0)  # the streams are open and have had a snapshot
        loaded = _load(api, url, load_s)
        out, _ = readers.communicate(timeout=60)
    finally:
        readers.kill()
    if readers.returncode != 0 or not out.strip():
        raise RuntimeError(f"the stream readers failed (exit {readers.returncode})")
    counts = json.loads(out.strip().splitlines()[-1])
    return {"api_p99_ms_with_streams": loaded["p99_ms"], "api_errors_with_streams": loaded["errors"],
            "stream_events_min": min(counts), "streams": len(counts)}


def run(quick: bool = False) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from podfleet.api.testing import free_port, spawn_server, stop_server
    from podfleet.console.routes import DIST

    if not (DIST / "index.html").is_file():
        raise RuntimeError("the console is not built: run `make console`")
    renders, watch_s, consoles, load_s = (3, 10.0, 5, 5.0) if quick else (10, 60.0, 20, 30.0)
    api = _api_latency()
    token = api.TOKEN
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc: subprocess.Popen[bytes] = spawn_server(Path(tmp) / "pf.db", port, token, "--speed", "1")
        url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
                c.post("/v1/clusters", json={"name": "pod", "type": "trn2-ultraserver", "spares": 2}).raise_for_status()
                deadline = time.monotonic() + 60
                while c.get("/v1/clusters/pod").json()["state"] == "deploying":
                    if time.monotonic() > deadline:
                        raise RuntimeError("the twin pod did not deploy within 60 s")
                    time.sleep(0.1)
            figures: dict[str, Any] = {}
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
                ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
                page = ctx.new_page()
                page.goto(f"{url}/login")
                page.fill("input[name=token]", token)
                page.click("form.login button[type=submit]")
                page.wait_for_selector("header.top .me")
                page.goto(f"{url}/clusters/pod")  # warm: server caches, browser code cache
                page.wait_for_selector("[data-chip='63']")
                times = []
                for _ in range(renders):
                    page.goto(f"{url}/clusters/pod")
                    page.wait_for_selector("[data-chip='63']")
                    ms = None
                    for _ in range(100):
                        ms = page.evaluate("performance.getEntriesByName('torus-drawn')[0]?.startTime ?? null")
                        if ms is not None:
                            break
                        page.wait_for_timeout(10)
                    if ms is None:
                        raise RuntimeError("the cluster page never marked torus-drawn")
                    times.append(float(ms))
                figures["first_render_ms"] = _pct(times, 50)
                figures["first_render_ms_p95"] = _pct(times, 95)
                figures["renders"] = renders
                page.evaluate("window.podfleetLags.length = 0")
                page.wait_for_timeout(watch_s * 1000)
                lags = page.evaluate("window.podfleetLags.slice()")
                if not lags:
                    raise RuntimeError("no live samples reached the page")
                figures["live_lag_ms_min"] = _pct(lags, 0)  # p99 - min: the part that varies
                figures["live_lag_ms_p50"] = _pct(lags, 50)
                figures["live_lag_ms_p99"] = _pct(lags, 99)
                figures["live_samples"] = len(lags)
                figures["watch_s"] = watch_s
                alone = _load(api, url, load_s)
                figures.update(_with_streams(api, url, token, consoles, load_s))
                # One browser context per console, as separate people are: Chromium holds at
                # most 6 HTTP/1.1 connections per origin in a context, and each open page
                # keeps one for its stream.
                state = ctx.storage_state()
                pages = [browser.new_context(storage_state=state).new_page() for _ in range(consoles)]
                for pg in pages:
                    pg.goto(f"{url}/clusters/pod")
                    pg.wait_for_selector("[data-testid=live][data-time]")
                loaded = _load(api, url, load_s)
                streaming = sum(1 for pg in pages if pg.evaluate("window.podfleetLags.length") > 0)
                figures["api_p99_ms_alone"] = alone["p99_ms"]
                figures["api_p99_ms_with_consoles"] = loaded["p99_ms"]
                figures["api_p50_ms_with_consoles"] = loaded["p50_ms"]
                figures["api_errors_with_consoles"] = loaded["errors"]
                figures["consoles"] = consoles
                figures["consoles_streaming"] = streaming
                figures["load_s"] = load_s
                browser.close()
            figures["server"] = "podfleet up, uvicorn, SQLite store, speed 1, telemetry tick 1 s"
            figures["browser"] = "Debian chromium, headless, one browser; each console its own context"
            return figures
        finally:
            stop_server(proc, 10)


if __name__ == "__main__":  # the stream readers' process (see _with_streams)
    if len(sys.argv) == 7 and sys.argv[1] == "--streams":
        _url, _path, _cookie, _n, _secs = sys.argv[2:]
        print(json.dumps(asyncio.run(_read_streams(_url, _path, _cookie, int(_n), float(_secs)))))
