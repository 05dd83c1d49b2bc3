"""Diagnosis accuracy on the twin, through the control plane (``DiagnoseCluster``'s path).

Each trial is a fresh control plane in virtual time (``compose.build``, a 64-chip
trn2-ultraserver with 2 spares) with decoys that must not become findings: a running
32-chip job (its chips run hot and its links busy, within spec) and a second job stopped
a minute before the diagnosis (a job-induced utilization dip). Then one or two faults
at once (half the trials each), of random kinds, on random distinct chips or links,
injected through ``plane.inject_fault``; after ``SETTLE_S`` of timeline the diagnosis
runs with the health service's alerts.

A fault is diagnosed right when a finding names its kind and its location (the chip;
for a link, the link). ``accuracy`` = faults diagnosed right / faults injected;
``false_findings_ratio`` = findings that match no injected fault / all findings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.advisor.diagnose import diagnose
from podfleet.compose import build
from podfleet.engine.timeline import Timeline
from podfleet.hardware.faults import FAULT_KINDS, LINK_FAULTS
from podfleet.store.memory import MemoryStore

NAME = "diagnosis"
DESCRIPTION = ("diagnosis on the twin: faults of every kind, one or two at once, with decoys (hot busy chips, a "
               "utilization dip): accuracy (goal >= 0.98), false_findings_ratio (goal <= 0.02)")
SETTLE_S = 60.0


def trial(seed: int, n_faults: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    tl = Timeline(seed)
    parts = build(MemoryStore(), tl)
    plane = parts.plane
    plane.load()
    plane.create_cluster({"name": "pod", "type": "trn2-ultraserver", "spares": 2})
    tl.run(tl.now + 60)
    plane.jobs.submit("pod", {"name": "hot", "model": "llama3-8b", "chips": 32, "steps": 10**6,
                              "checkpoint_interval": 20})
    dip = plane.jobs.submit("pod", {"name": "dip", "model": "llama3-8b", "chips": 16, "steps": 10**6,
                                    "checkpoint_interval": 20})
    tl.run(tl.now + 240)
    plane.jobs.stop(dip["id"])
    tl.run(tl.now + 60)
    topo = plane.resolve("pod").topology
    truth: list[tuple[str, str]] = []
    used: set[str] = set()
    while len(truth) < n_faults:
        kind = str(rng.choice(FAULT_KINDS))
        if kind in LINK_FAULTS:
            lk = topo.links[int(rng.integers(len(topo.links)))]
            target = f"link:{min(lk.src, lk.dst)}-{max(lk.src, lk.dst)}"
        else:
            target = f"chip:{int(rng.integers(topo.n_chips))}"
        if target in used:
            continue
        used.add(target)
        truth.append((kind, target))
        if kind in LINK_FAULTS:
            plane.inject_fault("pod", kind, link=target.removeprefix("link:"))
        else:
            plane.inject_fault("pod", kind, chip=int(target.removeprefix("chip:")))
    tl.run(tl.now + SETTLE_S)
    found = diagnose(plane, "pod", parts.health.list_alerts("pod"))["findings"]
    got = {(f["kind"], f"link:{f['links'][0]}" if f["links"] else f"chip:{f['chips'][0]}") for f in found}
    right = sum(t in got for t in truth)
    return {"faults": len(truth), "right": right, "findings": len(found), "false": len(got - set(truth)),
            "missed": [t for t in truth if t not in got], "extra": sorted(got - set(truth))}


def run(quick: bool = False) -> dict[str, Any]:
    n = 12 if quick else 200
    trials = [trial(seed, 1 + seed % 2) for seed in range(n)]
    faults = sum(t["faults"] for t in trials)
    findings = sum(t["findings"] for t in trials)
    return {
        "trials": n,
        "faults": faults,
        "accuracy": round(sum(t["right"] for t in trials) / faults, 4),
        "false_findings_ratio": round(sum(t["false"] for t in trials) / findings, 4) if findings else 0.0,
        "findings": findings,
        "missed": [m for t in trials for m in t["missed"]][:10],
        "extra": [e for t in trials for e in t["extra"]][:10],
    }
