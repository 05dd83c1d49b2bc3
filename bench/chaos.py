"""Chaos on the rehearsal path: the real control plane, killed and restarted mid-run.

Each run (``podfleet.rehearsal.chaos.ChaosRun``) builds the control plane with
``podfleet.compose.build`` on a SQLite file, in virtual time, with one twin
trn2-ultraserver (64 chips, 4 spares) and three resident llama3-8b jobs of 32 (dp 4,
shrinks), 16 (dp 1, waits) and 8 chips (dp 2, shrinks). Every 2 minutes of twin time a
fault is injected through the InjectFault command, round-robin over the eight kinds,
85% of them aimed at a running job (a chip it holds, or a link inside its block). Every
4th fault a 2-chip job is submitted and an older one stopped (acknowledged writes). The
plane is killed ``restarts`` times (no shutdown: a new plane is built on the same file
and ``load()``-ed), alternately 5 ms after a fault (mid-recovery) and at a random moment.
A technician replaces chips and reseats links down for 30 minutes (an assumption).

Counted strictly (see the module for the rules): ``interrupting_faults`` paused, slowed
or stopped a running job (``by_effect``); ``recovered`` ones had the recovery flow their
kind needs run for them and their job back at full speed (>= 95% of its tokens/s per
chip before the fault; a link fault may leave it reported degraded) within 10 simulated
minutes; ``no_action_needed`` touched a running job and did none of that;
``untouched_faults`` hit no running job; ``jobs_lost``; ``double_allocations``; ``acked_writes_lost`` (read
back from a new store on the file after every restart and at the end);
``invariant_violations`` (listed). Any violation or loss fails the benchmark.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from podfleet.errors import PodfleetError
from podfleet.hardware.faults import FaultKind
from podfleet.rehearsal.chaos import ChaosRun

NAME = "chaos"
DESCRIPTION = ("1,000 injected faults on the real control plane in virtual time, with restarts: recovered, "
               "jobs lost, double allocations, acked writes lost, invariant violations")

_SUMS = ("faults", "interrupting_faults", "recovered", "no_action_needed", "untouched_faults", "jobs_lost", "double_allocations", "acked_writes",
         "acked_writes_lost", "invariant_violations", "restarts", "repairs", "sim_s")
_LISTS = ("unrecovered", "lost", "acked_lost", "violations")


def run(quick: bool = False) -> dict[str, Any]:
    total = 48 if quick else 1000
    per_run = 48 if quick else 100
    restarts = 2 if quick else 4
    out: dict[str, Any] = {k: 0 for k in _SUMS}
    lists: dict[str, list[str]] = {k: [] for k in _LISTS}
    by_kind = {k.value: 0 for k in FaultKind}
    by_effect = {"paused": 0, "slowed": 0, "stopped": 0}
    seeds: list[int] = []
    with tempfile.TemporaryDirectory() as d:
        seed = 0
        while out["faults"] < total:
            n = min(per_run, total - out["faults"])
            r = ChaosRun(seed, faults=n, db_path=str(Path(d) / f"chaos-{seed}.db"), restarts=restarts).run()
            for k in _SUMS:
                out[k] += r[k]
            for k in _LISTS:
                lists[k] += [f"seed {seed}: {x}" for x in r[k]]
            for k, v in r["by_kind"].items():
                by_kind[k] += v
            for k, v in r["by_effect"].items():
                by_effect[k] += v
            seeds.append(seed)
            seed += 1
    out["sim_s"] = round(out["sim_s"], 1)
    n_int = out["interrupting_faults"]
    out["recovered_ratio"] = round(out["recovered"] / n_int, 5) if n_int else 0.0
    out["by_kind"] = by_kind
    out["by_effect"] = by_effect
    out["seeds"] = seeds
    out.update(lists)
    bad = lists["violations"] + lists["lost"] + lists["acked_lost"]
    if bad or out["double_allocations"]:
        print(json.dumps(out, indent=1), file=sys.stderr)
        raise PodfleetError(f"chaos: {len(lists['violations'])} invariant violation(s), {out['jobs_lost']} job(s) "
                            f"lost, {out['acked_writes_lost']} acknowledged write(s) lost: " + "; ".join(bad[:20]))
    return out
