"""Failure-prediction features and the logistic fit (trained and measured on twin seeds in tests/twin/test_evaluate.py)."""

from __future__ import annotations

import numpy as np

from podfleet.health.predict import LogisticModel, PrecursorFeatures, fit


def test_logistic_fit_separates_a_simple_rule() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((2000, 4))
    y = x[:, 1] > 0.6
    w = fit(x, y, scale=(1.0, 1.0, 1.0, 1.0))
    p = LogisticModel(w, 0.5, scale=(1.0, 1.0, 1.0, 1.0)).proba(x)
    assert ((p >= 0.5) == y).mean() > 0.95


def test_burst_and_ramp_have_different_features() -> None:
    f = PrecursorFeatures(2)
    ecc = np.zeros(2)
    base = {"temperature_c": np.full(2, 60.0), "power_w": np.full(2, 300.0), "link_errors": np.zeros(2)}
    for minute in range(40):
        if minute == 5:
            ecc[0] += 150  # one burst on chip 0
        ecc[1] += minute % 2  # a steady trickle on chip 1
        f.sample({**base, "mem_ecc_corrected": ecc.copy()})
        f.close_minute()
    x = f.features()
    assert x[1, 1] > 0.4 and x[0, 1] == 0.0  # spread over minutes vs none in the last 30
