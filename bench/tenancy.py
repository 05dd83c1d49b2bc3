"""Sharing a pod between teams: fairness, idle-quota use, reclaim time, admission rate.

The path users run: ``podfleet.compose.build(MemoryStore(), Timeline)``, one fault-free
trn2-ultraserver twin (64 chips, no spares) in virtual time, four queues in one cohort
with weights 1:1:2:4 and nominal quotas in the same ratio (8, 8, 16, 32 chips), jobs
submitted with ``plane.jobs.submit`` (``tiny`` preset, 4 chips, ``STEPS`` steps).

Phases (virtual time):

1. **Fairness** (``WINDOW_S``): every queue kept backlogged (a top-up every 30 s keeps
   two jobs queued per queue). Each queue's busy chip-seconds come from the accounting
   (``control.accounting``); Jain's index over busy / weight:
   J = (sum x)^2 / (n sum x^2), 1 = each queue got exactly its weighted share.
2. **Idle quota** (``WINDOW_S``): queue ``d`` (32 chips) goes idle, the others stay
   backlogged and borrow. ``idle_quota_utilization`` = mean over 10 s samples of the
   chips ``d`` lent (DescribeQueue ``lent``) / its 32 idle chips.
3. **Reclaim** (``RECLAIMS`` times): ``d`` submits one 32-chip job while its quota is
   lent; ``reclaim_s`` = time from that submit until the job is RUNNING (borrowers
   checkpointed on demand, the write charged, and requeued); the job is then stopped,
   and the borrowers take the chips again before the next reclaim. A sample counts as
   a reclaim (``reclaims_preempting``, ``reclaim_s_*_preempting``) only when d's quota
   was lent and the job preempted borrowers; ``reclaims_holding_a_block``: samples where
   no block could be freed by preemption alone and the job held one until the jobs
   within quota in it ended; ``reclaims_moving``: samples where no block could be freed
   by preemption alone and the jobs within quota in the chosen block were moved out of
   it (on-demand checkpoint, its write charged, relaunch on chips the borrowers freed;
   not preempted), ``jobs_moved_by_reclaim`` the moves in all.

``admission_decisions_per_s``: a bare ``Scheduler`` (the same queues) with
``PENDING_JOBS`` pending jobs that all fail admission (their queues are full), timed
over whole cycles on this machine's wall clock: each cycle decides every pending job.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from podfleet.compose import build
from podfleet.control import ControlPlane, accounting
from podfleet.engine import Timeline
from podfleet.fabric.sim import FaultRates, SimFabric
from podfleet.hardware.catalog import get_topology
from podfleet.health.scan import HealthConfig
from podfleet.scheduler import JobRequest, Scheduler
from podfleet.scheduler.queues import QueueSpec
from podfleet.store.memory import MemoryStore

NAME = "tenancy"
DESCRIPTION = ("queues sharing one pod: Jain's fairness over 4 queues weighted 1:1:2:4, idle-quota utilization, "
               "reclaim_s p99 (virtual), admission decisions/s at 10,000 pending jobs")

QUEUES = (("a", 8, 1.0), ("b", 8, 1.0), ("c", 16, 2.0), ("d", 32, 4.0))
CHIPS = 4
STEPS = 20_000
MONITOR_S = 30.0


def _plane() -> ControlPlane:
    plane = build(MemoryStore(), Timeline(seed=7), telemetry_interval_s=MONITOR_S, schedule_interval_s=MONITOR_S,
                  health_config=HealthConfig(interval_s=MONITOR_S)).plane
    plane.load()
    view = plane.create_cluster({"name": "pod", "type": "trn2-ultraserver"}, actor="bench")
    fabric = plane.clusters[view["id"]].fabric
    assert isinstance(fabric, SimFabric)
    fabric.set_fault_rates(FaultRates.none())  # scheduling is measured, not fault repair
    while plane.describe_cluster(view["id"])["state"] != "active":
        plane.tl.run(plane.tl.now + 5)
    for name, nominal, weight in QUEUES:
        plane.queues.create("pod", {"name": name, "nominal": nominal, "cohort": "lab", "weight": weight},
                            actor="bench")
    return plane


def jain(x: list[float]) -> float:
    a = np.asarray(x, dtype=float)
    return float(a.sum() ** 2 / (len(a) * (a ** 2).sum())) if (a ** 2).sum() > 0 else 0.0


def _busy(plane: ControlPlane) -> dict[str, float]:
    rep = accounting.report(plane.table, plane.now(), by="queue")
    return {r["queue"]: float(r["busy"]) for r in rep["rows"]}


def _run_backlogged(plane: ControlPlane, queues: list[str], seconds: float,
                    sample: list[float] | None = None) -> None:
    """Keep each of ``queues`` two jobs deep for ``seconds``; ``sample``: d's lent chips every 10 s."""
    end = plane.tl.now + seconds
    while plane.tl.now < end:
        for q in queues:
            waiting = plane.queues.describe("pod", q)["jobs"].get("pending", 0)
            for _ in range(max(0, 2 - waiting)):
                plane.jobs.submit("pod", {"model": "tiny", "chips": CHIPS, "steps": STEPS, "queue": q,
                                          "checkpoint_interval": 1000}, actor=f"team-{q}")
        for _ in range(3):
            plane.tl.run(min(end, plane.tl.now + 10))
            if sample is not None:
                sample.append(plane.queues.describe("pod", "d")["lent"])


def _admission_rate(pending: int) -> float:
    s = Scheduler(get_topology("trn2-ultraserver"),
                  queues=[QueueSpec(n, nom, cohort="lab", weight=w) for n, nom, w in QUEUES])
    for n, nom, _ in QUEUES:  # fill every queue's quota and the cohort: nothing more is admitted
        for i in range(nom // CHIPS):
            s.submit(JobRequest(f"run-{n}-{i}", CHIPS, queue=n), now_s=0)
    s.schedule(now_s=0)
    for i in range(pending):
        s.submit(JobRequest(f"p{i}", CHIPS, queue=QUEUES[i % 4][0], priority=i % 3), now_s=1)
    cycles, t0 = 0, time.perf_counter()
    while cycles < 3 or time.perf_counter() - t0 < 1.0:
        assert s.schedule(now_s=2 + cycles) == []
        cycles += 1
    return pending * cycles / (time.perf_counter() - t0)


def _pct(x: list[float], q: float) -> float | None:
    return round(float(np.percentile(x, q)), 3) if x else None


def run(quick: bool = False) -> dict[str, Any]:
    window = 1800.0 if quick else 7200.0
    reclaims = 5 if quick else 20
    plane = _plane()
    names = [q for q, _, _ in QUEUES]
    before = _busy(plane)
    _run_backlogged(plane, names, window)
    busy = _busy(plane)
    got = {q: busy.get(q, 0.0) - before.get(q, 0.0) for q in names}
    weights = {q: w for q, _, w in QUEUES}
    fairness = jain([got[q] / weights[q] for q in names])
    # Phase 2: d idle; its jobs drain, the others borrow.
    for j in plane.table:
        if j.spec.queue == "d" and not j.ended:
            plane.jobs.stop(j.id, actor="bench")
    lent: list[float] = []
    _run_backlogged(plane, names[:3], window, lent)
    idle_use = float(np.mean(lent)) / 32.0 if lent else 0.0
    # Phase 3: d reclaims its quota, RECLAIMS times.
    reclaim_s: list[float] = []
    preempting: list[bool] = []  # did the sample preempt anything (else it was no reclaim)
    held: list[bool] = []  # did it hold a block for jobs within quota to end (Nomination.awaited)
    moving: list[bool] = []  # did it move jobs within quota out of the block (Nomination.moves)
    rt = next(iter(plane.clusters.values()))
    for _ in range(reclaims):
        _run_backlogged(plane, names[:3], 600.0)
        t0 = plane.tl.now
        lent = plane.queues.describe("pod", "d")["lent"]
        job = plane.jobs.submit("pod", {"model": "tiny", "chips": 32, "steps": STEPS, "queue": "d"}, actor="team-d")
        waited = moved = False
        while plane.jobs.describe(job["id"])["state"] != "RUNNING" and plane.tl.now - t0 < 3600:
            # 1 ms steps for the first 0.1 s: an on-demand checkpoint of a tiny job takes ms.
            plane.tl.run(plane.tl.now + (0.001 if plane.tl.now - t0 < 0.1 else 0.1))
            reason = rt.scheduler.jobs[job["id"]].reason
            waited = waited or "holding the block" in reason
            moved = moved or "out of the block" in reason
        reclaim_s.append(plane.tl.now - t0)
        log = [ln["message"] for ln in plane.jobs.job_logs(job["id"]).since(0)]
        preempting.append(lent > 0 and any(m.startswith("preempting ") for m in log))
        held.append(waited)
        moving.append(moved)
        plane.jobs.stop(job["id"], actor="bench")
    preempted = sum(1 for j in plane.table if j.status.scheduling.preemptions)
    rate = _admission_rate(1000 if quick else 10_000)
    return {
        "jain_fairness_weighted": round(fairness, 4),
        "busy_chip_s_by_queue": {q: round(v, 1) for q, v in got.items()},
        "idle_quota_utilization": round(idle_use, 4),
        "reclaim_s_p50": round(float(np.percentile(reclaim_s, 50)), 3),
        "reclaim_s_p99": round(float(np.percentile(reclaim_s, 99)), 3),
        "reclaims": len(reclaim_s),
        # Honest counting: only samples that preempted borrowers are reclaims.
        "reclaims_preempting": sum(preempting),
        "reclaim_s_p50_preempting": _pct([r for r, p in zip(reclaim_s, preempting, strict=True) if p], 50),
        "reclaim_s_p99_preempting": _pct([r for r, p in zip(reclaim_s, preempting, strict=True) if p], 99),
        "reclaims_holding_a_block": sum(held),
        "reclaims_moving": sum(moving),
        "jobs_moved_by_reclaim": sum(r.moves for r in rt.scheduler.jobs.values()),
        "reclaim_s_by_sample": [round(r, 3) for r in reclaim_s],
        "jobs_preempted_by_reclaim": preempted,
        "admission_decisions_per_s": round(rate, 1),
        "pending_jobs": 1000 if quick else 10_000,
        "window_s": window,
    }
