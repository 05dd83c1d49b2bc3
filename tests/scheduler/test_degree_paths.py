"""Balance degrees of a few jobs (Python divisions) and of many (array divisions), one group
at a time or planned (one gather, one ``reduceat`` of the maxima), are the same values as
``balance_degree`` job by job."""

from __future__ import annotations

import math

import numpy as np

from podfleet.scheduler.metrics import (
    DegreePlan,
    balance_degree,
    degree_groups,
    grouped_balance_degrees,
    planned_balance_degrees,
)


def test_grouped_degrees_match_one_job_at_a_time() -> None:
    rng = np.random.default_rng(7)
    for trial in range(300):
        u = rng.random(64)
        if trial % 3 == 0:
            u[rng.integers(0, 64, 6)] = 0.0
        if trial % 5 == 0:
            u[rng.integers(0, 64, 2)] = np.nan
        jobs = 3 if trial % 2 else 100  # the few-jobs path and the array path
        chips = {f"j{i}": rng.choice(64, size=int(rng.choice([1, 4, 8])), replace=False) for i in range(jobs)}
        chips["idle"] = np.array([0, 1])
        u[[0, 1]] = 0.0
        groups = degree_groups(chips)
        got = grouped_balance_degrees(u, groups)
        planned = planned_balance_degrees(u, DegreePlan(groups))
        assert planned.keys() == got.keys()
        for j, c in chips.items():
            want = balance_degree(u[c])
            for value in (got[j], planned[j]):
                assert value == want or (math.isnan(value) and math.isnan(want)), (j, value, want)
