"""A seeded rehearsal gives the same result, record for record: the `rehearsal-pod`
benchmark's scenario (64 chips, four jobs, the whole control plane) for 3 simulated
hours at 1,000x the fault rates (8 faults, 6 recoveries, 2 predicted-failure drains).

Pinned so that work on the rehearsal's speed cannot change what it computes: the figures
the benchmark reports (timing aside) and a digest of the whole event log (ids that carry
the wall clock, ``job-...`` and ``cl-...``, numbered in order of appearance). A change that
is meant to change results updates both, and says so (regenerate by printing
``_figures_and_digest()``)."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path
from typing import Any

from podfleet.rehearsal.rehearsal import Rehearsal
from podfleet.rehearsal.scenario import parse_scenario

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "rehearsal_pod.py"

EXPECTED = {
    "alerts": 12, "alerts_by_rule": {"chip-down": 6, "ecc-corrected-rate": 4, "predicted-failure": 2},
    "availability": 0.941401, "chip_hours_lost": 11.2511,
    "chip_hours_lost_by_cause": {"chip-failure": 9.2173, "predicted-drain": 2.0337}, "chips": 64,
    "ettr_mean": 0.9942, "events_processed": 8919, "faults_total": 8,
    "predictions": {"alarms": 2, "averted": 0, "failures": 4, "false_alarms": 2, "hits": 0, "horizon_s": 28800.0,
                    "misses": 4, "predicted_failures": 0},
    "recoveries": 6, "recoveries_by_path": {"checkpoint": 0, "replica": 6, "requeue": 0},
    "recovery_p50_s": 0.7547, "recovery_p99_s": 36.4049, "sim_s": 10800.0, "telemetry_samples": 5402,
}
EXPECTED_LOG = ("864e5cfa37c15469c01bd451790a23cf5c3072d1f01b384758387a2fb5777f21", 818)


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("rehearsal_pod_bench", _BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _figures_and_digest() -> tuple[dict[str, Any], tuple[str, int]]:
    bench = _bench()
    sc = bench.scenario(False)
    sc["duration"], sc["fault_rate_scale"] = "3h", 1000.0
    r = Rehearsal(parse_scenario(sc))
    figs = bench.figures(r.run())
    figs.pop("wall_s")
    figs.pop("speedup_x")
    ids: dict[str, str] = {}
    text = re.sub(r"(job|cl)-[0-9a-f]{20}", lambda m: ids.setdefault(m.group(0), f"id#{len(ids)}"),
                  r.tl.log.dumps(list(r.tl.log)))
    return figs, (hashlib.sha256(text.encode()).hexdigest(), len(text.splitlines()))


def test_the_seeded_pod_rehearsal_gives_the_same_figures_and_event_log() -> None:
    figs, digest = _figures_and_digest()
    assert figs == EXPECTED
    assert digest == EXPECTED_LOG
