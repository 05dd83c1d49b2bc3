"""Recovery time, detection to the job running again, in twin time, as a distribution.

A 64-chip llama3-70b job (17.5 GB of state per rank: 70e9 params x 16 bytes / 64) on a
two-pod twin with 8 spares; chip failures of every chip-failing kind injected one at a
time, 5 minutes apart. Two policies: with a peer replica (2 data-parallel replicas, a
rank's state copied from its peer over NeuronLink) and without (restart from the latest
checkpoint on shared storage). Step costs are ``recovery.model.Timings`` (documented
assumptions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.fabric.base import ChipState
from podfleet.recovery.model import JobPolicy, Timings
from podfleet.twin.harness import make_pod

NAME = "recovery-time"
DESCRIPTION = "recovery time detection -> running, twin time: replica_p99_ms (<= 100), checkpoint_p99_s (<= 180)"
KINDS = ("chip-failure", "hbm-uncorrectable", "sram-uncorrectable", "firmware-fault")


def _measure(replica: bool, n: int, seed: int) -> list[float]:
    pod = make_pod(seed, policy=JobPolicy(dp=2, peer_replica=replica), timings=Timings(repair_s=600.0))
    tl, fab = pod.tl, pod.fab
    rng = np.random.default_rng(seed)
    tl.run(until=300.0)
    for i in range(n):
        chips = [c for c in fab.job("job-0").chips if fab.chip_state(c) == ChipState.HEALTHY]
        fab.inject_fault(KINDS[i % len(KINDS)], chip=int(chips[rng.integers(len(chips))]))
        tl.run(until=tl.now + 300.0)
    return [r.t_end - r.detected_t for r in pod.orch.done if r.job_id and r.t_end is not None]


def run(quick: bool = False) -> dict[str, Any]:
    n = 40 if quick else 400
    rep = np.array(_measure(True, n, 1))
    ck = np.array(_measure(False, n // 4, 2))

    def dist(a: np.ndarray, scale: float) -> dict[str, float]:
        return {f"p{q}": round(float(np.percentile(a, q)) * scale, 3) for q in (50, 90, 99)} | {
            "max": round(float(a.max()) * scale, 3), "n": int(a.size)}

    return {
        "replica_p99_ms": round(float(np.percentile(rep, 99)) * 1000, 3),
        "checkpoint_p99_s": round(float(np.percentile(ck, 99)), 3),
        "replica_ms": dist(rep, 1000.0),
        "checkpoint_s": dist(ck, 1.0),
    }
