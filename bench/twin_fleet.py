"""twin-fleet: 1,024 UltraServers (65,536 chips), 1 simulated hour, telemetry every 2 s.

Default fault rates; eight 4,096-chip jobs keep half the fleet busy; a reader takes every
chip and link metric at every sample (as a health monitor would). Figure ``wall_s``
(goal < 60 on a 2-core machine).
"""

from __future__ import annotations

from podfleet.rehearsal.scenario import benchmark_figures, parse_scenario, run_scenario

NAME = "twin-fleet"
DESCRIPTION = "1,024 pods (65,536 chips), 1 h simulated, telemetry every 2 s; figure wall_s (goal < 60)"


def run(quick: bool = False) -> dict:
    sc = parse_scenario({
        "name": NAME,
        "seed": 1,
        "pod_type": "trn2-ultraserver",
        "pods": 1024,
        "duration": "5m" if quick else "1h",
        "telemetry_interval_s": 2.0,
        "fault_rates": "default",
        "jobs": [
            {"id": f"job-{i}", "model": "llama3-405b", "chips": 4096, "steps": 100000,
             "checkpoint_interval": 50}
            for i in range(8)
        ],
    })
    r = run_scenario(sc, read_metrics=True)  # every sample read, as a health monitor would
    bare = run_scenario(sc)  # the twin alone: noisy readings are built only when read
    return {**benchmark_figures(r, bare), "goal_wall_s": 60}
