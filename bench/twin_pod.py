"""twin-pod: one 64-chip Trn2 UltraServer, 24 simulated hours, telemetry every 2 s.

Default (Llama 3-derived) fault rates, one 64-chip llama3-70b job, and the real health
monitor (``podfleet.health.monitor.HealthMonitor``: telemetry history, vectorized scan,
failure predictor) reading every sample, as the server's health service does. Figure
``speedup_x``: simulated seconds per wall second (goal >= 10,000 on a 2-core machine);
``*_unread`` is the twin alone, nobody reading.
"""

from __future__ import annotations

from podfleet.rehearsal.scenario import benchmark_figures, parse_scenario, run_scenario

NAME = "twin-pod"
DESCRIPTION = "64-chip pod, 24 h simulated, telemetry every 2 s read by the health monitor; figure speedup_x (goal >= 10,000)"


def run(quick: bool = False) -> dict:
    sc = parse_scenario({
        "name": NAME,
        "seed": 1,
        "pod_type": "trn2-ultraserver",
        "duration": "2h" if quick else "24h",
        "telemetry_interval_s": 2.0,
        "fault_rates": "default",
        "jobs": [{"id": "job-70b", "model": "llama3-70b", "chips": 64, "steps": 100000,
                  "checkpoint_interval": 50}],
    })
    r = run_scenario(sc, monitor=True)  # every sample read by the health monitor and predictor
    bare = run_scenario(sc)  # the twin alone: noisy readings are built only when read
    return {**benchmark_figures(r, bare), "goal_speedup_x": 10000}
