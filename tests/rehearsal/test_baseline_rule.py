"""The prediction benchmark's fixed-threshold baseline (``rehearsal.evaluate.baseline_alarms``):
nothing fitted, the same alarm rule (two confirming minutes, one open alarm per chip)."""

from __future__ import annotations

import numpy as np

from podfleet.health.predict import FEATURES
from podfleet.rehearsal.evaluate import SeedRun, baseline_alarms, score_baseline


def _run(x: np.ndarray) -> SeedRun:
    m, n, _ = x.shape
    return SeedRun(seed=0, x=x.astype(np.float32), y=np.zeros((m, n), bool), alarms=[],
                   failures=[{"chip": 1, "t": 4000.0, "kind": "x", "precursor": True, "shape": "ramp"}],
                   chip_hours=float(n), end_t=60.0 * 60 * 24, minute_t=np.arange(m) * 60.0,
                   reset=np.zeros((m, n), bool))


def test_the_baseline_alarms_on_either_rule_after_two_minutes_and_once() -> None:
    x = np.zeros((10, 3, len(FEATURES)))
    x[3:, 1, FEATURES.index("r_rise")] = 0.06  # chip 1: a rise over 5% from minute 3 on
    x[5, 2, FEATURES.index("ecc_minutes120")] = 0.2  # chip 2: one minute only, not confirmed
    x[7:, 0, FEATURES.index("ecc_minutes120")] = 10 / 120  # chip 0: errors in 10 of 120 minutes
    alarms = baseline_alarms(_run(x))
    assert [(c, t) for c, t, _p in alarms] == [(1, 240.0), (0, 480.0)]


def test_the_baseline_is_scored_like_the_model() -> None:
    x = np.zeros((10, 3, len(FEATURES)))
    x[3:, 1, FEATURES.index("r_rise")] = 0.06
    out = score_baseline([_run(x)])
    assert out["recall"] == 1.0 and out["false_alarm_ratio"] == 0.0 and out["alarms"] == 1
