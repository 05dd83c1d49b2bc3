"""Scheduler figures kept between ticks are those ``numpy`` gives."""

from __future__ import annotations

import numpy as np

from podfleet.scheduler.metrics import balance_degree, grouped_balance_degrees, percentile


def test_percentile_is_numpys_for_repeated_and_changed_values() -> None:
    rng = np.random.default_rng(3)
    values = rng.random(7).tolist()
    for _ in range(3):
        for q in (50, 95):
            assert percentile(values, q) == float(np.percentile(values, q))
        values[2] += 1.0
    assert percentile([], 50) == 0.0
    assert str(percentile([-0.0], 50)) == str(float(np.percentile([-0.0], 50)))
    assert str(percentile([0.0], 50)) == str(float(np.percentile([0.0], 50)))


def test_grouped_degrees_idle_busy_and_nan() -> None:
    u = np.array([0.5, 1.0, 0.0, 0.0, np.nan, 0.2, 0.4, 0.8])
    groups = [(["a", "b"], np.array([[0, 1], [2, 3]])), (["c", "d"], np.array([[4, 5], [6, 7]]))]
    d = grouped_balance_degrees(u, groups)
    assert d["a"] == 0.75 and d["b"] == 1.0 and np.isnan(d["c"])
    for jobs, idx in groups:  # the same as one job at a time
        for j, row in zip(jobs, idx, strict=True):
            assert str(d[j]) == str(balance_degree(u[row]))
