"""Recovery time of chip faults on the real control plane in virtual time, as distributions.

The rehearsal path (``podfleet.rehearsal.recovery_rehearsal``): ``compose.build`` on a seeded
timeline, a two-pod twin cluster (128 chips, 4 spares), a llama3-70b job of 64 chips
submitted through ``plane.jobs.submit``, faults injected through ``plane.inject_fault``
one at a time, a minute apart, on a random working chip of the job, round-robin over the
chip-failing kinds and thermal runaway. Recoveries are read back from
``recovery.recoveries`` (each one's journal).

Two paths: ``replica`` (tp 8, pp 4, dp 2: a rank's state is copied from the same rank of
the other data-parallel replica) and ``checkpoint`` (tp 8, pp 8, dp 1: no replica holds
it; the gang restarts and loads the latest checkpoint from storage).

Recovery time = fault -> the job running again, split into detection (fault -> the
control plane knows: heartbeat hang timeout for hard failures, then the hung worker
killed and seen gone; telemetry + health scan for degradations) and recovery proper
(detection -> resume). Every figure comes out of the simulated events; the kill ->
detection and the fixed costs of a rank move and a cold relaunch are draws (the
timeline's seeded RNG) from the real-process measurements in
``podfleet/recovery/data/measured_costs.json`` (``measured_costs``: how and when they
were made), the copies are each rank's state over the copy path (derivation in
docs/health.md).

``sensitivity``: the p50 of each path again, with each assumption or configured
constant of ``recovery.model.Timings`` that the flows of these faults wait on at half
and at twice its value (``SENSITIVITY``: fewer faults per run, 20 and 8, each on its own
plane with the other constants at their defaults); ``{path}_p50_s_sensitivity`` puts the
same figures beside the headline, largest spread first. A figure that moves one-for-one
with a constant is that constant restated, not a measurement.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from podfleet.fabric.base import ChipState
from podfleet.recovery.model import Timings
from podfleet.rehearsal.recovery_rehearsal import CLUSTER, rehearse

NAME = "recovery-time"
DESCRIPTION = ("recovery time fault -> running on the control plane in twin time, per path: replica_p99_s, "
               "checkpoint_p99_s (goal <= 10 s and <= 180 s), detection included")
KINDS = ("chip-failure", "hbm-uncorrectable", "sram-uncorrectable", "firmware-fault", "thermal-runaway")
GAP_S = 60.0
PLANS = {"replica": {"tp": 8, "pp": 4, "dp": 2}, "checkpoint": {"tp": 8, "pp": 8, "dp": 1}}
# The ``Timings`` fields these flows wait on that are not measured here: what each is.
SENSITIVITY = {
    "hang_timeout_s": "configured: the local fabric's heartbeat hang timeout (detection of a hard failure)",
    "scan_interval_s": "configured: the health scan interval (detection of a degradation)",
    "checkpoint_bw_bytes_per_s": "assumption: per-chip read bandwidth from shared storage",
    "fixed_cost_scale": "assumption: the rank-move / relaunch fixed costs measured on 2 processes of the debug "
                        "model hold for a 64-rank gang (x1)",
    "isolate_s": "assumption: fence the chip out of the collective group",
    "select_s": "assumption: the spare choice",
    "fence_s": "assumption: retire a bad HBM partition",
    "throttle_s": "assumption: hold a runaway chip's clock down",
    "resume_s": "assumption: release the paused gang",
}


def _measure(path: str, n: int, seed: int, timings: Timings | None = None) -> tuple[list[dict[str, Any]], float]:
    r = rehearse(seed, timings=timings)
    job = r.submit({"model": "llama3-70b", "chips": 64, "steps": 10**7, "checkpoint_interval": 10,
                    "parallelism": PLANS[path]})
    rng = np.random.default_rng(seed)
    fab = r.fabric
    for i in range(n):
        chips = [c for c in r.chips(job) if fab.chip_state(c) == ChipState.HEALTHY]
        if not chips:  # the job waits for chips (none healthy and free): let repairs catch up
            r.tl.run(r.tl.now + GAP_S)
            continue
        r.plane.inject_fault(CLUSTER, KINDS[i % len(KINDS)], chip=int(chips[rng.integers(len(chips))]), actor="bench")
        r.tl.run(r.tl.now + GAP_S)
        # A technician returns the chips isolated so far (the control plane has no repair
        # command yet): 400 faults on 128 chips would otherwise use up every spare.
        for c in range(fab.topology.n_chips):
            if fab.chip_state(c) == ChipState.ISOLATED and c not in r.plane.clusters[r.cluster_id].owners:
                fab.repair_chip(c, "repaired by the benchmark's technician")
    recs = [x for x in r.recoveries() if x["job_id"] == job and x["state"] == "done"
            # A move back home (rank returns from the other pod once its own chip is free)
            # is not a recovery from a fault: leave it out of the fault-to-running times.
            and x["kind"] not in ("link", "rehome")]
    nbytes = next((s["detail"]["nbytes"] for x in recs for s in x["steps"] if s["name"] == "restore"), 0.0)
    return recs, float(nbytes)


def _dist(a: np.ndarray) -> dict[str, float]:
    if not a.size:
        return {"n": 0}
    return {f"p{q}": round(float(np.percentile(a, q)), 3) for q in (50, 90, 99)} | {
        "min": round(float(a.min()), 3), "max": round(float(a.max()), 3), "n": int(a.size)}


def _p50(path: str, n: int, seed: int, timings: Timings) -> float | None:
    recs, _ = _measure(path, n, seed, timings)
    total = [x["t_end"] - x["t_start"] for x in recs if x["restored_from"] == path]
    return round(float(np.percentile(total, 50)), 3) if total else None


def sensitivity(quick: bool = False) -> dict[str, Any]:
    """Each path's p50 with each ``SENSITIVITY`` constant at half and at twice its value."""
    sizes = {"replica": 10 if quick else 20, "checkpoint": 4 if quick else 8}
    base = Timings()

    def p50s(tm: Timings) -> dict[str, float | None]:
        return {path: _p50(path, n, seed, tm) for path, n, seed in
                (("replica", sizes["replica"], 1), ("checkpoint", sizes["checkpoint"], 2))}

    default = p50s(base)  # the same run for every constant
    out: dict[str, Any] = {"faults_per_run": sizes}
    for name, what in SENSITIVITY.items():
        v = float(getattr(base, name))
        out[name] = {"value": v, "what": what, "half": p50s(replace(base, **{name: v * 0.5})), "default": default,
                     "twice": p50s(replace(base, **{name: v * 2.0}))}
    return out


def beside(sens: dict[str, Any], path: str) -> dict[str, dict[str, float | None]]:
    """One path's p50 at half / twice each constant, the largest spread first."""
    rows = {name: {"half": sens[name]["half"][path], "twice": sens[name]["twice"][path]}
            for name in SENSITIVITY}

    def spread(r: dict[str, float | None]) -> float:
        a, b = r["half"], r["twice"]
        return abs(b - a) if a is not None and b is not None else 0.0

    return dict(sorted(rows.items(), key=lambda kv: -spread(kv[1])))


def run(quick: bool = False) -> dict[str, Any]:
    n = 40 if quick else 400
    out: dict[str, Any] = {}
    for path, count, seed in (("replica", n, 1), ("checkpoint", n // 4, 2)):
        recs, nbytes = _measure(path, count, seed)
        mine = [x for x in recs if x["restored_from"] == path]
        total = np.array([x["t_end"] - x["t_start"] for x in mine])
        detect = np.array([x["detected_t"] - x["t_start"] for x in mine])
        after = np.array([x["t_end"] - x["detected_t"] for x in mine])
        hard = np.array([x["detected_t"] - x["t_start"] for x in recs if x["kind"] in ("chip-failure", "ecc")])
        degraded = np.array([x["detected_t"] - x["t_start"] for x in recs if x["kind"] == "thermal"])
        out[f"{path}_p50_s"] = round(float(np.percentile(total, 50)), 3) if total.size else None
        out[f"{path}_p99_s"] = round(float(np.percentile(total, 99)), 3) if total.size else None
        out[f"{path}_s"] = _dist(total)
        out[f"{path}_detect_s"] = _dist(detect)
        out[f"{path}_after_detect_s"] = _dist(after)
        out[f"{path}_detect_hard_s"] = _dist(hard)
        out[f"{path}_detect_degraded_s"] = _dist(degraded)
        out[f"{path}_state_bytes_per_rank"] = nbytes
        out[f"{path}_recoveries"] = len(recs)
        out[f"{path}_other_source"] = len(recs) - len(mine)  # e.g. a replica job whose peer was down
    out["faults_per_path"] = {"replica": n, "checkpoint": n // 4}
    out["model"] = "llama3-70b, 64 chips, two-pod twin (128 chips), 4 spares, repair after 600 s"
    sens = sensitivity(quick)
    for path in PLANS:
        out[f"{path}_p50_s_sensitivity"] = beside(sens, path)
    prov = Timings().costs.provenance
    out["measured_costs"] = {k: prov.get(k) for k in ("command", "started_utc", "git_commit")} | {
        "shared_machine": (prov.get("machine") or {}).get("shared")}
    out["sensitivity"] = sens
    return out
