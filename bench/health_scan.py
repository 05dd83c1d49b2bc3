"""Cost of one health scan (every rule, vectorized) for a 64-chip pod and a 65,536-chip
fleet (1,024 pods): the scan alone, on telemetry the twin produced, in steady state
(after the start-up settle period and a full baseline window). The figures are the
mean over many scans, so the scans that refresh a rolling median (each metric every
5th scan, staggered) are paid for; p50 and p99 are reported beside them."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from podfleet.engine.timeline import Timeline
from podfleet.fabric.sim import SimFabric
from podfleet.health.alerts import AlertBook
from podfleet.health.scan import HealthConfig, HealthScanner
from podfleet.health.telemetry import TelemetryHistory, chip_sample, link_sample

NAME = "health-scan"
DESCRIPTION = "health scan cost: pod_scan_ms (64 chips), fleet_scan_ms (65,536 chips)"


def _scan_ms(topology: str, scans: int, history: bool = True) -> dict[str, float]:
    tl = Timeline(3)
    fab = SimFabric(topology, tl)
    t = fab.telemetry
    t.load[:] = 0.7
    t.dirty = True
    n, nl = fab.n_chips, fab.links.n
    sc = HealthScanner("cl-bench", n, nl, AlertBook())
    # Telemetry history is kept per cluster (a pod); the fleet figure is the scan alone.
    hist = TelemetryHistory("cl-bench", n, nl, 2.0) if history else None
    scan_ms, hist_ms = [], []
    # Steady state: past the start-up settle period (180 s) and a full baseline window.
    warm = int(HealthConfig().settle_s / 2.0) + 60
    for _ in range(warm):
        tl.run(until=tl.now + 2.0)
        sc.scan(tl.now, fab.chip_metrics(), fab.chip_state_codes(), fab.link_metrics(), fab.link_metrics()["state"])
    for _ in range(scans):
        tl.run(until=tl.now + 2.0)
        m, lm = fab.chip_metrics(), fab.link_metrics()
        states, lstates = fab.chip_state_codes(), lm["state"]
        t0 = time.perf_counter()
        sc.scan(tl.now, m, states, lm, lstates)
        t1 = time.perf_counter()
        if hist is not None:
            hist.add(tl.now, chip_sample(m), link_sample(lm))
        t2 = time.perf_counter()
        scan_ms.append((t1 - t0) * 1000)
        hist_ms.append((t2 - t1) * 1000)
    return {"scan_ms": round(float(np.mean(scan_ms)), 3), "scan_p50_ms": round(float(np.median(scan_ms)), 3),
            "scan_p99_ms": round(float(np.percentile(scan_ms, 99)), 3),
            "history_ms": round(float(np.median(hist_ms)), 3) if hist is not None else None}


def run(quick: bool = False) -> dict[str, Any]:
    pod = _scan_ms("trn2-ultraserver", 100 if quick else 600)
    fleet = _scan_ms("trn2-ultraserver:1024", 10 if quick else 40, history=False)
    return {"pod_scan_ms": pod["scan_ms"], "fleet_scan_ms": fleet["scan_ms"], "pod": pod, "fleet": fleet,
            "interval_ms": 2000.0}
