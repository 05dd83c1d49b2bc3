"""ETTR (effective training time ratio) of a 64-chip job over a simulated week.

Faults arrive as often as a 16,384-chip job meets them: Llama 3 405B saw 419 unexpected
interruptions in 54 days on 16,384 GPUs (about one every 3 hours), in the published mix
of causes (``fabric.sim.faults``). The twin's rates are per chip-hour, so the pod's rates
are scaled by 16,384 / 64 = 256: the job's 64 chips then meet the big job's rate.

ETTR = productive time / wall time, with productive time = steps kept at the end x the
healthy step time. That charges everything: recovery time, the partial step lost at
each interruption, steps recomputed after a checkpoint restore, and slowdowns (a rank
moved to the second pod). ``running_ratio`` is the looser figure: time running minus
time recomputing checkpoint-lost steps, over wall time.
The job: llama3-70b, 2 data-parallel replicas with peer replicas, checkpoint every 10
steps; two-pod twin with 8 spares; failed chips are replaced after 4 hours.
"""

from __future__ import annotations

from typing import Any

from podfleet.fabric.base import FabricEvent
from podfleet.fabric.sim import FaultRates
from podfleet.recovery.model import JobPolicy
from podfleet.twin.harness import make_pod

NAME = "ettr"
DESCRIPTION = "ETTR of a 64-chip job, simulated week, faults at a 16,384-chip job's rate (goal >= 0.99)"
SCALE = 16_384 / 64


def run(quick: bool = False, seed: int = 1) -> dict[str, Any]:
    days = 1.0 if quick else 7.0
    pod = make_pod(seed, jobs=(64,), policy=JobPolicy(dp=2), fault_rates=FaultRates().scaled(SCALE))
    tl, fab = pod.tl, pod.fab
    run0 = fab.job("job-0")
    acc = {"running_s": 0.0, "since": 0.0, "recompute_s": 0.0, "interruptions": 0, "paused_at_step": 0}

    def on(ev: FabricEvent) -> None:
        if ev.job_id != "job-0":
            return
        if ev.kind == "job-paused":
            acc["running_s"] += ev.t - acc["since"]
            acc["interruptions"] += 1
            acc["paused_at_step"] = int(ev.detail.get("step", run0.step))
        elif ev.kind == "job-resumed":
            acc["since"] = ev.t
            lost = acc["paused_at_step"] - int(ev.detail.get("step", acc["paused_at_step"]))
            acc["recompute_s"] += max(lost, 0) * (run0.step_time_s or 0.0)

    fab.subscribe(on)
    wall = days * 86400.0
    tl.run(until=wall)
    run0 = fab.job("job-0")
    if str(run0.state) == "running":
        acc["running_s"] += tl.now - acc["since"]
    # The healthy step time: the job's own model on its original chips, no faults.
    nominal_step_s = _healthy_step_s(seed)
    recs = [r for r in pod.orch.done if r.job_id == "job-0"]
    return {
        "ettr": round(run0.step * nominal_step_s / wall, 5),
        "running_ratio": round((acc["running_s"] - acc["recompute_s"]) / wall, 5),
        "steps": run0.step,
        "healthy_step_s": round(nominal_step_s, 3),
        "interruptions": acc["interruptions"],
        "faults": sum(fab.faults_by_kind.values()),
        "faults_by_kind": dict(sorted(fab.faults_by_kind.items())),
        "recoveries": len(recs),
        "from_checkpoint": sum(r.restored_from == "checkpoint" for r in recs),
        "recompute_s": round(acc["recompute_s"], 1),
        "simulated_days": days,
    }


def _healthy_step_s(seed: int) -> float:
    pod = make_pod(seed, jobs=(64,))
    pod.tl.run(until=600.0)
    return float(pod.fab.job("job-0").step_time_s)
