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

Goals (issue 12): first render <= 300 ms, live lag p99 <= 1,000 ms, API p99 with 20
consoles <= 50 ms. Quick mode: 3 loads, 10 s of live samples, 5 consoles, 5 s of load.
"""

from __future__ import annotations

import importlib.util
import subprocess
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
