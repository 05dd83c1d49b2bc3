"""rehearsal-pod: one simulated day of a 64-chip Trn2 UltraServer with the whole control
plane in the loop (``podfleet sim``'s path: scheduler, balancer, health scans and the
failure predictor, alerts, recovery), fault rates raised 100x, four jobs (16, 16, 16
and 8 chips, data-parallel so a lost rank is restored from a peer replica), 4 spares,
telemetry every 2 s as the server samples it.

Figures: ``speedup_x`` (simulated seconds per wall second; goal >= 10,000 on a 2-core
machine), recoveries by path with p50/p99 time, alerts, strict predictions, mean ETTR,
chip-hours lost. ``--quick`` rehearses 20 minutes.
"""

from __future__ import annotations

from typing import Any

from podfleet.rehearsal.rehearsal import rehearse
from podfleet.rehearsal.scenario import parse_scenario

NAME = "rehearsal-pod"
DESCRIPTION = ("64-chip pod, 1 day simulated with the whole control plane, 4 jobs, fault rates x100; "
               "figure speedup_x (goal >= 10,000)")


def scenario(quick: bool) -> dict[str, Any]:
    return {
        "name": NAME,
        "seed": 1,
        "pod_type": "trn2-ultraserver",
        "duration": "20m" if quick else "24h",
        "telemetry_interval_s": 2.0,
        "fault_rates": "default",
        "fault_rate_scale": 100.0,
        "spares": 4,
        "jobs": [{"id": f"job-{i}", "model": "llama3-8b", "chips": c, "steps": 10**6, "checkpoint_interval": 50,
                  "parallelism": {"tp": 1, "pp": 1, "dp": c}} for i, c in enumerate((16, 16, 16, 8))],
    }


def figures(rep: dict[str, Any]) -> dict[str, Any]:
    ettr = [j["ettr"] for j in rep["jobs"] if j["ettr"] is not None]
    rec = rep["recoveries"]
    return {
        "wall_s": rep["wall_s"], "speedup_x": rep["speedup_x"], "sim_s": rep["sim_s"], "chips": rep["chips"],
        "events_processed": rep["events_processed"], "telemetry_samples": rep["telemetry_samples"],
        "faults_total": rep["faults_total"], "recoveries": rec["count"], "recoveries_by_path": rec["by_path"],
        "recovery_p50_s": rec["p50_s"], "recovery_p99_s": rec["p99_s"], "alerts": rep["alerts"]["total"],
        "alerts_by_rule": rep["alerts"]["by_rule"], "predictions": rep["predictions"],
        "ettr_mean": round(sum(ettr) / len(ettr), 4) if ettr else None,
        "chip_hours_lost": rep["chip_hours_lost"], "chip_hours_lost_by_cause": rep["chip_hours_lost_by_cause"],
        "availability": rep["availability"],
    }


def run(quick: bool = False) -> dict:
    return {**figures(rehearse(parse_scenario(scenario(quick)))), "goal_speedup_x": 10000}
