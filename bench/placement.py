"""Placement latency on one 64-chip pod and throughput on a 1,024-pod fleet with churn.

Pod: a trn2-ultraserver (4x4x4) with 4 spares; jobs of 1-64 chips (sizes drawn from a
fixed mix, seeded) arrive one at a time; when one does not fit, a random running job
finishes first. The latency of each ``schedule()`` call that places a job (all plugins:
filters, topology/fragmentation/thermal scores, reserve, permit, bind) is recorded.

Fleet: "trn2-ultraserver:1024" (65,536 chips) filled to about 85%, then churn: each
round one random job finishes, one arrives and is scheduled. Throughput = placements /
wall time of the churn phase (finish + submit + schedule all counted).

Each figure is given twice: wall clock (``pod_p99_ms``, ``fleet_placements_per_s``) and
CPU time of this process (``*_cpu_*``), with the 1-minute load average, because on a
shared machine wall-clock latency measures the other tenants as much as this code.
"""

from __future__ import annotations

import itertools
import os
import time

import numpy as np

from podfleet.fabric.base import ChipState
from podfleet.hardware.catalog import get_topology
from podfleet.scheduler import DecisionKind, JobRequest, Scheduler

NAME = "placement"
DESCRIPTION = "scheduler latency p50/p99 on one 64-chip pod; placements/s on a 1,024-pod fleet with churn"

SIZES = np.array([1, 2, 4, 8, 8, 16, 16, 32, 4, 2, 12, 24, 48, 64])
TP = {1: 1, 2: 2, 4: 4, 8: 4, 12: 4, 16: 4, 24: 8, 32: 8, 48: 8, 64: 8}


def _job(i: int, rng: np.random.Generator, max_size: int) -> JobRequest:
    n = int(rng.choice(SIZES[max_size >= SIZES]))
    return JobRequest(f"job-{i}", n, tp=TP[n], team=f"t{i % 4}")  # one priority: no preemption here


def pod_latency(placements: int, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    sched = Scheduler(get_topology("trn2-ultraserver"), spares=4)
    running: list[str] = []
    lat_ms: list[float] = []
    cpu_ms: list[float] = []
    i = 0
    while len(lat_ms) < placements:
        job = _job(i, rng, 60)
        i += 1
        sched.submit(job)
        while True:
            c0, t0 = time.process_time(), time.perf_counter()
            ds = sched.schedule()
            dt = (time.perf_counter() - t0) * 1e3
            dc = (time.process_time() - c0) * 1e3
            if any(d.kind is DecisionKind.BIND for d in ds):
                lat_ms.append(dt)
                cpu_ms.append(dc)
                running.append(job.job_id)
                break
            if not running:
                raise RuntimeError(f"{job.job_id} does not fit an empty pod: {sched.reason(job.job_id)}")
            sched.finish(running.pop(int(rng.integers(len(running)))))
    a, c = np.array(lat_ms), np.array(cpu_ms)
    return {"pod_p50_ms": round(float(np.percentile(a, 50)), 4), "pod_p99_ms": round(float(np.percentile(a, 99)), 4),
            "pod_p50_cpu_ms": round(float(np.percentile(c, 50)), 4),
            "pod_p99_cpu_ms": round(float(np.percentile(c, 99)), 4), "pod_placements": len(a)}


def fleet_throughput(rounds: int, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    topo = get_topology("trn2-ultraserver:1024")
    t0 = time.perf_counter()
    sched = Scheduler(topo)
    running: list[str] = []
    i = 0
    target = 0.85 * topo.n_chips
    used = 0
    while used < target:  # fill
        job = _job(i, rng, 64)
        i += 1
        sched.submit(job)
        for d in sched.schedule():
            if d.kind is DecisionKind.BIND:
                running.append(d.job_id)
                used += len(d.placement.chips)
    fill_s = time.perf_counter() - t0
    placed = 0
    c1, t1 = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        k = int(rng.integers(len(running)))
        running[k], running[-1] = running[-1], running[k]
        sched.finish(running.pop())
        job = _job(i, rng, 64)
        i += 1
        sched.submit(job)
        for d in sched.schedule():
            if d.kind is DecisionKind.BIND:
                running.append(d.job_id)
                placed += 1
    churn_s = time.perf_counter() - t1
    churn_cpu_s = time.process_time() - c1
    util = sum(int((p.owner >= 0).sum()) for p in sched.cluster.pods) / topo.n_chips
    return {
        "fleet_placements_per_s": round(placed / churn_s, 1),
        "fleet_placements_per_cpu_s": round(placed / churn_cpu_s, 1),
        "fleet_placements": placed,
        "fleet_jobs_running": len(running),
        "fleet_utilization": round(util, 4),
        "fleet_fill_s": round(fill_s, 3),
    }


GANG_SIZES = np.array([64, 64, 128, 128, 256, 256, 512, 512, 1024, 2048, 4096])


def fleet_gangs(rounds: int, seed: int = 0, *, first_fit: bool = False) -> dict[str, float]:
    """Gangs of 64-4,096 chips across pods on the 65,536-chip fleet (1,024 pods, 16 per
    network block), filled to about 85%, then churn: each round one random gang
    finishes, one arrives and is scheduled, and every 8th round a chip fails or is
    repaired. Throughput = gangs placed / wall time of the churn (all of it counted).
    Cross-block share: per placement, the share of its inter-pod ring edges that cross a
    spine (0 inside one block), averaged over the placements."""
    rng = np.random.default_rng(seed)
    topo = get_topology("trn2-ultraserver:1024")
    sched = Scheduler(topo, fleet_first_fit=first_fit)
    running: list[str] = []
    shares: list[float] = []
    failed: list[int] = []
    i, used = 0, 0

    def submit() -> None:
        nonlocal i, used
        size = int(GANG_SIZES[rng.integers(len(GANG_SIZES))])
        sched.submit(JobRequest(f"g{i}", size, tp=8))
        i += 1
        for d in sched.schedule():
            if d.kind is DecisionKind.BIND and d.placement is not None:
                running.append(d.job_id)
                used += len(d.placement.chips)
                pods = d.placement.all_pods
                if len(pods) > 1:
                    b = d.placement.blocks  # ring edges across a spine, the closing edge included
                    shares.append((sum(x != y for x, y in itertools.pairwise(b)) + (b[0] != b[-1])) / len(pods))

    while used < 0.85 * topo.n_chips and i < 4000:
        submit()
    placed0 = len(shares)
    c1, t1 = time.process_time(), time.perf_counter()
    n0 = len(running) + len(sched.pending)
    for r in range(rounds):
        if running:
            k = int(rng.integers(len(running)))
            running[k], running[-1] = running[-1], running[k]
            sched.finish(running.pop())
        if r % 8 == 0:
            if failed and rng.random() < 0.5:
                sched.set_chip_state(failed.pop(), ChipState.HEALTHY)
            else:
                chip = int(rng.integers(topo.n_chips))
                sched.set_chip_state(chip, ChipState.FAILED)
                failed.append(chip)
        before = len(running)
        submit()
        del before
    churn_s = time.perf_counter() - t1
    cpu_s = time.process_time() - c1
    placed = len(running) + len(sched.pending) - n0  # not a figure: the running count
    del placed
    gangs = len(shares) - placed0
    return {
        "gangs_placed": gangs,
        "gangs_per_s": round(gangs / churn_s, 1),
        "gangs_per_cpu_s": round(gangs / cpu_s, 1),
        "cross_block_share": round(float(np.mean(shares)) if shares else 0.0, 4),
    }


def run(quick: bool = False) -> dict[str, float]:
    out: dict[str, float] = {"load_avg_1m_start": round(os.getloadavg()[0], 2)}
    out.update(pod_latency(300 if quick else 3000))
    out.update(fleet_throughput(500 if quick else 5000))
    ours = fleet_gangs(200 if quick else 2000)
    base = fleet_gangs(200 if quick else 2000, first_fit=True)
    out["fleet_gangs_per_s"] = ours["gangs_per_s"]
    out["fleet_gangs_per_cpu_s"] = ours["gangs_per_cpu_s"]
    out["fleet_gangs_placed"] = ours["gangs_placed"]
    out["cross_block_share"] = ours["cross_block_share"]
    out["cross_block_share_first_fit"] = base["cross_block_share"]
    # Below 1: fewer spine crossings per inter-pod ring edge than first fit.
    out["cross_block_traffic_ratio"] = round(ours["cross_block_share"] / base["cross_block_share"], 4) \
        if base["cross_block_share"] else 0.0
    out["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    out["goal_pod_p99_ms"] = 2.0
    out["goal_fleet_placements_per_s"] = 1000.0
    out["goal_fleet_gangs_per_s"] = 2000.0
    return out
