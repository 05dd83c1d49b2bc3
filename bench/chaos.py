"""Chaos: faults of every kind injected into twin pods running jobs; recovery checked.

Each run is a two-pod twin (128 chips, the last 8 spares) with jobs of 32, 16 and 8
chips (policies: shrink, wait, shrink), a fault every 2 minutes of twin time, chosen
round-robin over the eight kinds, on a random working chip of a job (or, for link
kinds, a random link). Invariants (no chip in two jobs, the owner map matches the
fabric, no running job on a broken chip) are checked after every timeline event; a
broken one fails the run and prints its seed. A fault counts as recovered when every
job it touched runs again within 10 minutes (faults that touch no job, e.g. a corrected
burst or a link fault, count when the invariants held); ``recovery_flows`` /
``recovery_flows_failed`` / ``recovery_flows_open`` count the flows themselves. The recovery
journal and checkpoint records are written to a real SQLite store; at the end every
acknowledged write is looked up again (``acked_writes_lost``). Each run also restarts
the orchestrator once in the middle of a recovery (rebuilt from the journal).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from podfleet.hardware.faults import FaultKind
from podfleet.twin.chaos import ChaosRun

NAME = "chaos"
DESCRIPTION = "1,000 injected faults of every kind on twin pods: recovered, jobs lost, double allocations, acked writes lost"


def run(quick: bool = False) -> dict[str, Any]:
    total = 120 if quick else 1000
    per_run = 40 if quick else 100
    out = {"faults": 0, "recovered": 0, "jobs_lost": 0, "double_allocations": 0, "acked_writes_lost": 0,
           "invariant_violations": 0, "restarts": 0, "recovery_flows": 0, "recovery_flows_failed": 0,
           "recovery_flows_open": 0, "seeds": []}
    by_kind = {k.value: 0 for k in FaultKind}
    with tempfile.TemporaryDirectory() as d:
        seed = 0
        while out["faults"] < total:
            n = min(per_run, total - out["faults"])
            r = ChaosRun(seed, faults=n, db_url=f"sqlite:///{Path(d) / f'chaos-{seed}.db'}").run()
            if r["invariant_violations"]:
                print(f"chaos: invariant broken with seed {seed}: {r['first_violation']}", file=sys.stderr)
            for k in ("faults", "recovered", "jobs_lost", "double_allocations", "acked_writes_lost",
                      "invariant_violations", "restarts", "recovery_flows", "recovery_flows_failed",
                      "recovery_flows_open"):
                out[k] += r[k]
            for k, v in r["by_kind"].items():
                by_kind[k] += v
            out["seeds"].append(seed)
            seed += 1
    out["recovered_ratio"] = round(out["recovered"] / out["faults"], 5) if out["faults"] else 0.0
    out["by_kind"] = by_kind
    return out
