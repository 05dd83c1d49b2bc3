"""Rolling firmware update of a 64-chip job's chips on the real control plane, in virtual
time: ``firmware.start_firmware`` with ``unit: chip``, which updates the chips of one
tensor-parallel group together (8 chips here); their ranks move to free chips first (live
copies at a step boundary, in one pause: the measured rank-move cost plus a rank's state
over the copy path, the group's copies side by side), 60 s per update, a health check
after.

The job fills its pod, so the first group must move to the other pod; every later group
moves to the chips updated just before it (same pod, NeuronLink copies), and at the end
the group outside comes back to the last updated chips: each rank moves once, 16 moves
cross pods (``cross_pod_moves``; each such pause is the measured move plus 16.7 GB at
the network tier's 25 GB/s, ~1.23 s, which bounds ``max_interruption_s`` from below
while the job fills its pod). While the group is away only its pipeline sends and
gradient reduction cross pods; a single rank moved out alone would drag its group's
all-reduces over the network tier (121 -> 325 s per step).

The rehearsal path (``podfleet.rehearsal.recovery_rehearsal``): two-pod twin cluster (128
chips, 4 spares), llama3-70b on 64 chips (tp 8, pp 4, dp 2) submitted through
``plane.jobs.submit``. The job sits on one pod; a rank moved off its pod runs over the
network tier, and the twin's step time (``fabric.sim.perfstep``) stretches the job's
communication to that link's bandwidth.

``max_interruption_s``: the longest pause of the job for one chip's update.
``compute_lost_ratio``: the job's lost time over the rollout window, counting pauses,
the partial step thrown away at each pause, and the slowdown of every step run while a
rank sat across pods (step time over the healthy step time, from the job's own progress).

``sensitivity``: ``max_interruption_s`` and ``compute_lost_ratio`` again with each
assumption they wait on (``SENSITIVITY``) at half and at twice its value. The rank
moves' fixed cost is a draw from the real-process measurements
(``podfleet/recovery/data/measured_costs.json``); that it holds for a 64-rank gang is
the assumption ``fixed_cost_scale``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from podfleet.fabric.base import FabricEvent
from podfleet.recovery.model import Timings
from podfleet.recovery.spares import group_of
from podfleet.rehearsal.recovery_rehearsal import CLUSTER, rehearse

NAME = "firmware"
DESCRIPTION = ("rolling firmware update of a 64-chip job's chips on the control plane: max_interruption_s, "
               "compute_lost_ratio (pauses + lost partial steps + cross-pod slowdown; goal <= 0.02)")

SENSITIVITY = {
    "fixed_cost_scale": "assumption: the measured rank-move fixed cost holds for a 64-rank gang (x1)",
    "select_s": "assumption: the spare choice",
    "resume_s": "assumption: release the paused gang",
}


def run(quick: bool = False) -> dict[str, Any]:
    out = _measure(quick, Timings())
    base = Timings()
    sens: dict[str, Any] = {}
    for name, what in SENSITIVITY.items():
        v = float(getattr(base, name))
        row: dict[str, Any] = {"value": v, "what": what}
        for label, f in (("half", 0.5), ("twice", 2.0)):
            got = _measure(quick, replace(base, **{name: v * f}))
            row[label] = {k: got[k] for k in ("max_interruption_s", "compute_lost_ratio")}
        sens[name] = row
    out["sensitivity"] = sens
    return out


def _measure(quick: bool, timings: Timings) -> dict[str, Any]:
    r = rehearse(5, timings=timings)
    job = r.submit({"model": "llama3-70b", "chips": 64, "steps": 10**7, "checkpoint_interval": 10,
                    "parallelism": {"tp": 8, "pp": 4, "dp": 2}})
    r.tl.run(r.tl.now + 600.0)
    run0 = r.fabric.job(job)
    healthy_s = float(run0.step_time_s)
    acc: dict[str, Any] = {"paused_s": 0.0, "partial_s": 0.0, "slowdown_s": 0.0, "paused_at": None, "last_t": r.tl.now,
           "last_step": run0.step, "window": None, "max_step_s": healthy_s}

    def on(ev: FabricEvent) -> None:
        if ev.job_id != job or acc["window"] is None:
            return
        if ev.kind == "progress":
            step, st = int(ev.detail["step"]), float(ev.detail["step_time_s"])
            acc["slowdown_s"] += max(step - acc["last_step"], 0) * max(st - healthy_s, 0.0)
            acc["max_step_s"] = max(acc["max_step_s"], st)
            acc["last_step"], acc["last_t"] = step, ev.t
        elif ev.kind == "job-paused":
            acc["paused_at"] = ev.t
            acc["partial_s"] += ev.t - acc["last_t"]
        elif ev.kind == "job-resumed" and acc["paused_at"] is not None:
            acc["paused_s"] += ev.t - acc["paused_at"]
            acc["paused_at"] = None
            acc["last_t"] = ev.t

    r.fabric.subscribe(on)
    chips = r.chips(job)[: 16 if quick else 64]
    acc["window"] = r.tl.now
    acc["last_t"], acc["last_step"] = r.tl.now, r.fabric.job(job).step
    step0 = r.fabric.job(job).step
    fw = r.parts.firmware.start_firmware(CLUSTER, "2.22.0", unit="chip", chips=chips, actor="bench")
    view = fw
    while view["state"] == "running":
        r.tl.run(r.tl.now + 600.0)
        view = r.parts.firmware.firmware_rollout(CLUSTER, fw["id"])
    window = (view["t_end"] or r.tl.now) - view["t_start"]
    lost = acc["paused_s"] + acc["partial_s"] + acc["slowdown_s"]
    steps = r.fabric.job(job).step - step0
    ints = view["interruptions_s"]
    topo = r.fabric.topology
    moves = [st["detail"] for x in r.recoveries() if x["job_id"] == job and x["t_start"] >= acc["window"]
             for st in x["steps"] if st["name"] == "move-rank"]
    return {
        "max_interruption_s": round(max(ints, default=0.0), 4),
        "compute_lost_ratio": round(lost / window, 6) if window else 0.0,
        "paused_ratio": round(acc["paused_s"] / window, 6) if window else 0.0,
        "partial_step_lost_ratio": round(acc["partial_s"] / window, 6) if window else 0.0,
        "slowdown_ratio": round(acc["slowdown_s"] / window, 6) if window else 0.0,
        "steps_in_window": steps,
        "rank_moves": len(moves),
        "cross_pod_moves": sum(group_of(topo, m["from_chip"]) != group_of(topo, m["to_chip"]) for m in moves),
        "healthy_step_s": round(healthy_s, 3),
        "slowest_step_s": round(acc["max_step_s"], 3),
        "chips_updated": len(view["done"]),
        "chips_skipped": len(view.get("skipped") or []),
        "state": view["state"],
        "rollout_window_s": round(window, 1),
        "job_state": r.plane.jobs.describe(job)["state"],
    }
