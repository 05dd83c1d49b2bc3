"""Per-rank speed from worker reports (fabric/local/speed.py): a synchronous gang with
one rank away between steps."""

from __future__ import annotations

import numpy as np

from podfleet.fabric.local.speed import RankSpeed


def _gang(sp: RankSpeed, step: int, t: float, shares: list[int], away: list[float], per_sample_s: float) -> float:
    """Feed one step: each rank leaves at ``t``, is away ``away[r]``, then all compute
    together (the step ends when the slowest share is done); returns the end time."""
    starts = [t + a for a in away]
    ready = max(starts)
    end = ready + per_sample_s * max(shares)
    for r in range(len(shares)):
        sp.observe(step, r, end, end - starts[r])
    return end


def test_slow_rank_between_steps_is_found_and_split_invariant() -> None:
    sp = RankSpeed(4, [(0, (4, 4, 4, 4))])
    t = 0.0
    for step in range(1, 4):
        t = _gang(sp, step, t, [4, 4, 4, 4], [0.0, 0.0, 0.04, 0.0], 0.01)
    assert sp.samples_per_s is not None
    even = sp.samples_per_s.copy()
    assert int(np.argmin(even)) == 2
    np.testing.assert_allclose(even, [100.0, 100.0, 50.0, 100.0])
    sp.split_logged("work split [4, 4, 4, 4] -> [5, 5, 2, 4] from step 4")
    for step in range(4, 6):
        t = _gang(sp, step, t, [5, 5, 2, 4], [0.0, 0.0, 0.02, 0.0], 0.01)
    np.testing.assert_allclose(sp.samples_per_s, [100.0, 100.0, 50.0, 100.0])  # the same speeds under a new split
    assert sp.shares_at(3) == (4, 4, 4, 4) and sp.shares_at(9) == (5, 5, 2, 4)


def test_unparsable_split_line_is_ignored() -> None:
    sp = RankSpeed(2, [(0, (2, 2))])
    sp.split_logged("work split [2, 2] -> [1, 2, 1] from step 3")
    sp.split_logged("something else")
    assert sp.splits == [(0, (2, 2))]
