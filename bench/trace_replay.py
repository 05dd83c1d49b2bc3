"""Replay a synthetic job trace: podfleet's control plane vs FIFO and FIFO + EASY backfill.

Trace (seeded, ``make_trace``): Poisson arrivals, mean inter-arrival chosen so the
offered load is ~95% of the pod's chip-time; sizes 1/2/4/8/16/32/64 chips with
probabilities .10/.10/.20/.20/.20/.15/.05; run times log-normal (median 20 min,
sigma 1.0, clipped to 1 min - 8 h); priorities 0/1/2 with probabilities .7/.2/.1;
four teams. No public cluster trace was fetched (none is available through the
package registries), so the mix is documented here instead.

podfleet runs the path users run: ``podfleet.compose.build(MemoryStore(), Timeline)``,
one trn2-ultraserver twin cluster (64 chips, no spares, no faults), each job submitted
with ``plane.jobs.submit`` at its arrival time (virtual time), with its trace priority
and team. A job trains the ``small`` preset, data parallel over its chips; its step
count is its trace run time divided by the twin's step time for that many chips, which
is measured first (``calibrate``: one job per size alone on a fresh twin). Completion
and wait come from the job views: ``created_at`` and ``timestamps["SUCCEEDED"]`` for
the completion time, ``scheduling.queue_wait_s`` (all stints in the queue) for the wait.

Baselines (``podfleet.scheduler.baselines``, a pure simulation) replay the same jobs,
with the same run times (steps x measured step time), on the same 64 chips placed as
contiguous blocks of the same torus: strict FIFO first-fit, and FIFO with EASY backfill
(Slurm's default; exact run times, the baseline's best case).

Figures, one definition for all three (``baselines.figures``):
utilization = useful chip-seconds / (64 x makespan), where useful chip-seconds are the
steps each job completed once (steps x step time x chips; a preemption checkpoint, a
requeue, a restart and any step lost to an interrupt are idle time), and the makespan
runs from the first arrival's origin (t=0) to the last job's end; mean job completion
time (end - submit); p95 and max queue wait; p95 wait per priority class.

``--fleet`` (``run(fleet=True)``): the same replay on a fleet, 64 trn2-ultraserver pods
(4,096 chips, network blocks of 8 pods; ``--quick``: 16 pods, 1,024 chips) with a size
mix from 1 to 4,096 chips: 1/2/4/8/16/32/64 chips with .12/.10/.12/.12/.12/.10/.10 and
128/256/512/1,024/2,048/4,096 (whole pods) with .07/.05/.04/.03/.02/.01, sizes larger
than the fleet left out and the rest renormalised. Most jobs are small and most of the
chip-time is in the large ones, as in the published cluster traces (Philly, Helios,
Alibaba PAI), though none was fetched. Same arrivals, run times and priorities, at 95%
of the fleet's chip-time; the baselines place a job of at most a pod as a block of one
pod and a larger one on whole free pods (``baselines.simulate(pods=N)``).
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import replace
from typing import Any

import numpy as np

from podfleet.compose import build
from podfleet.control import ControlPlane
from podfleet.engine import Timeline
from podfleet.fabric.sim import FaultRates, SimFabric
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.topology import GridTopology
from podfleet.health.scan import HealthConfig
from podfleet.scheduler.baselines import Policy, TraceJob, figures, run_figures, simulate
from podfleet.store.memory import MemoryStore

NAME = "trace-replay"
DESCRIPTION = ("synthetic job trace through the control plane (twin, virtual time) vs FIFO and "
               "FIFO + EASY backfill (utilization, JCT, p95 wait)")

SIZES = np.array([1, 2, 4, 8, 16, 32, 64])
SIZE_P = np.array([0.10, 0.10, 0.20, 0.20, 0.20, 0.15, 0.05])
POD_CHIPS = 64
MODEL = "small"
CALIBRATION_STEPS = 400
MONITOR_S = 30.0
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")
VARIANTS = ("fleet",)
FLEET_SIZES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
FLEET_SIZE_P = np.array([0.12, 0.10, 0.12, 0.12, 0.12, 0.10, 0.10, 0.07, 0.05, 0.04, 0.03, 0.02, 0.01])
FLEET_PODS, FLEET_PODS_QUICK, PODS_PER_BLOCK = 64, 16, 8


def make_trace(n: int, seed: int = 7, load: float = 0.95, pod_chips: int = POD_CHIPS,
               sizes_p: tuple[np.ndarray, np.ndarray] = (SIZES, SIZE_P)) -> list[TraceJob]:
    rng = np.random.default_rng(seed)
    sizes = rng.choice(sizes_p[0], size=n, p=sizes_p[1])
    run = np.clip(rng.lognormal(np.log(1200.0), 1.0, size=n), 60.0, 8 * 3600.0)
    prio = rng.choice([0, 1, 2], size=n, p=[0.7, 0.2, 0.1])
    mean_gap = float((sizes * run).mean()) / (pod_chips * load)
    arrivals = np.cumsum(rng.exponential(mean_gap, size=n))
    return [
        TraceJob(f"job-{i:04d}", float(arrivals[i]), int(sizes[i]), float(run[i]), int(prio[i]), f"team-{i % 4}")
        for i in range(n)
    ]


def _spec(chips: int, steps: int, priority: int = 50, team: str | None = None) -> dict[str, Any]:
    return {"model": MODEL, "chips": chips, "steps": steps, "checkpoint_interval": 0, "priority": priority,
            "parallelism": {"tp": 1, "pp": 1, "dp": chips}, **({"team": team} if team else {})}


def fleet_sizes(pods: int) -> tuple[np.ndarray, np.ndarray]:
    """The fleet's size mix, sizes larger than ``pods`` pods left out (renormalised)."""
    keep = np.less_equal(FLEET_SIZES, pods * POD_CHIPS)
    return FLEET_SIZES[keep], FLEET_SIZE_P[keep] / FLEET_SIZE_P[keep].sum()


def _plane(seed: int, pods: int | None = None) -> tuple[ControlPlane, float]:
    """A control plane with one active twin pod (or a fleet of ``pods``); returns it and
    the time it became active."""
    # Telemetry, health scans and load balancing every MONITOR_S instead of 1-2 s: they
    # do not change when jobs start or end on a fault-free twin, and at 1-2 s they were
    # most of the replay's wall time. The periodic queue pass (aging, starvation holds;
    # submits and finishes schedule at once anyway) runs every MONITOR_S too: every 10 s
    # over days of trace it re-rendered each waiting job's view thousands of times.
    plane = build(MemoryStore(), Timeline(seed=seed), telemetry_interval_s=MONITOR_S,
                  schedule_interval_s=MONITOR_S, health_config=HealthConfig(interval_s=MONITOR_S)).plane
    plane.load()
    fleet = {"pods": pods, "pods_per_block": min(pods, PODS_PER_BLOCK), "spares": 0} if pods else {}
    view = plane.create_cluster({"name": "pod", "type": "trn2-ultraserver", **fleet}, actor="bench")
    fabric = plane.clusters[view["id"]].fabric
    # A fault-free pod: the replay compares scheduling policies on the same chips (the
    # twin's default fault process, with nothing to repair chips, would take them away).
    assert isinstance(fabric, SimFabric)
    fabric.set_fault_rates(FaultRates.none())
    while plane.describe_cluster(view["id"])["state"] != "active":
        plane.tl.run(plane.tl.now + 5)
    return plane, plane.tl.now


def _t(plane: ControlPlane, stamp: str) -> float:
    """A view's RFC 3339 time as timeline seconds (ms resolution)."""
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - plane.epoch


def calibrate(seed: int = 7, pods: int | None = None, sizes: np.ndarray = SIZES) -> dict[int, float]:
    """The twin's step time per gang size, measured through the control plane: one job of
    ``CALIBRATION_STEPS`` steps per size, alone on the pod (or fleet), RUNNING to SUCCEEDED."""
    plane, _ = _plane(seed, pods)
    out: dict[int, float] = {}
    for n in (int(s) for s in sizes):
        j = plane.jobs.submit("pod", _spec(n, CALIBRATION_STEPS), actor="bench")
        while plane.jobs.describe(j["id"])["state"] not in ENDED:
            plane.tl.run(plane.tl.now + 30)
        ts = plane.jobs.describe(j["id"])["timestamps"]
        out[n] = (_t(plane, ts["SUCCEEDED"]) - _t(plane, ts["RUNNING"])) / CALIBRATION_STEPS
    return out


def in_steps(trace: list[TraceJob], step_s: dict[int, float]) -> tuple[list[TraceJob], dict[str, int]]:
    """Each job as whole steps of the twin, and its run time as those steps take."""
    steps = {j.job_id: max(1, round(j.run_s / step_s[j.chips])) for j in trace}
    return [replace(j, run_s=steps[j.job_id] * step_s[j.chips]) for j in trace], steps


def run_podfleet(trace: list[TraceJob], steps: dict[str, int], seed: int = 7,
                 pods: int | None = None) -> dict[str, Any]:
    """Submit the trace to a control plane at its arrival times; read the job views."""
    plane, origin = _plane(seed, pods)
    n_chips = POD_CHIPS * (pods or 1)
    ids: dict[str, str] = {}

    def arrive(job: TraceJob) -> None:
        view = plane.jobs.submit("pod", _spec(job.chips, steps[job.job_id], job.priority, job.team), actor="bench")
        ids[job.job_id] = view["id"]

    for job in trace:
        plane.tl.call_at(job.submit_s, functools.partial(arrive, job))
    plane.tl.run(origin + max(j.submit_s for j in trace) + 1)
    while any(plane.jobs.describe(i)["state"] not in ENDED for i in ids.values()):
        plane.tl.run(plane.tl.now + 600)
    views = {j.job_id: plane.jobs.describe(ids[j.job_id]) for j in trace}
    bad = [v["id"] for v in views.values() if v["state"] != "SUCCEEDED"]
    if len(views) != len(trace) or bad:
        raise RuntimeError(f"not every job succeeded ({bad[:3]}...); the replay is incomplete")
    submit = [_t(plane, views[j.job_id]["created_at"]) - origin for j in trace]
    end = [_t(plane, views[j.job_id]["timestamps"]["SUCCEEDED"]) - origin for j in trace]
    wait = [float(views[j.job_id]["scheduling"].get("queue_wait_s") or 0.0) for j in trace]
    preempted = {j.job_id for j in trace if views[j.job_id]["scheduling"].get("preemptions")}
    # Run time of jobs never preempted, as measured against steps x calibrated step time.
    ratio = [(e - s - w) / j.run_s for j, s, e, w in zip(trace, submit, end, wait, strict=True)
             if j.job_id not in preempted]
    useful = sum(j.chips * j.run_s for j in trace)  # every step completed once: none redone
    return {"figures": figures(useful, n_chips, submit, end, wait), "wait": {j.job_id: w for j, w in zip(trace, wait, strict=True)},
            "preemptions": sum(int(v["scheduling"].get("preemptions") or 0) for v in views.values()),
            "run_time_ratio": float(np.mean(ratio)) if ratio else float("nan")}


def _p95(xs: list[float]) -> float:
    return round(float(np.percentile(xs, 95)), 1) if xs else 0.0


def run(quick: bool = False, fleet: bool = False) -> dict[str, Any]:
    topo = get_topology("trn2-ultraserver")
    assert isinstance(topo, GridTopology)
    pods = (FLEET_PODS_QUICK if quick else FLEET_PODS) if fleet else None
    n_chips = POD_CHIPS * (pods or 1)
    mix = fleet_sizes(pods) if pods else (SIZES, SIZE_P)
    step_s = calibrate(pods=pods, sizes=mix[0])
    n_jobs = (60 if quick else 300) if fleet else (120 if quick else 500)
    trace, steps = in_steps(make_trace(n_jobs, pod_chips=n_chips, sizes_p=mix), step_s)
    ours = run_podfleet(trace, steps, pods=pods)
    fifo = simulate(trace, n_chips, Policy.FIFO, topology=topo, pods=pods or 1)
    easy = simulate(trace, n_chips, Policy.EASY, topology=topo, pods=pods or 1)
    waits: dict[str, dict[str, float]] = {
        "": ours["wait"],
        "baseline_fifo_": {r.job.job_id: r.wait_s for r in fifo},
        "baseline_easy_": {r.job.job_id: r.wait_s for r in easy},
    }
    out: dict[str, Any] = {"jobs": len(trace), "pod_chips": POD_CHIPS, "model": MODEL}
    if pods:
        out.update({"pods": pods, "chips": n_chips, "jobs_across_pods": sum(j.chips > POD_CHIPS for j in trace)})
    for prefix, f in (("", ours["figures"]), ("baseline_fifo_", run_figures(fifo, n_chips)),
                      ("baseline_easy_", run_figures(easy, n_chips))):
        out.update({f"{prefix}{k}": round(v, 4 if k == "utilization" else 1) for k, v in f.as_dict().items()})
        for p in (0, 1, 2):
            out[f"{prefix}p95_wait_s_priority{p}"] = _p95([waits[prefix][j.job_id] for j in trace if j.priority == p])
    out["preemptions"] = ours["preemptions"]
    out["run_time_ratio"] = round(ours["run_time_ratio"], 4)
    out["step_s_by_chips"] = {str(k): round(v, 6) for k, v in step_s.items()}
    return out
