"""The stacked deviation bank and the incremental telemetry history give the same
answers as the straightforward computations they replace."""

from __future__ import annotations

import numpy as np

from podfleet.health.baseline import (
    DeviationBank,
    DeviationRule,
    DeviationTracker,
    RollingBaseline,
    _median1,
)
from podfleet.health.telemetry import TelemetryHistory


def test_median_matches_numpy_with_and_without_nan() -> None:
    rng = np.random.default_rng(1)
    for k in (1, 2, 9, 10, 60):
        a = rng.normal(size=(7, k))
        assert np.array_equal(_median1(a), np.median(a, axis=1))
        a[0, 0] = np.nan
        got = _median1(a)
        ref = np.array([np.median(r[~np.isnan(r)]) if (~np.isnan(r)).any() else np.nan for r in a])
        assert np.array_equal(got, ref, equal_nan=True)


def test_round_robin_refresh_keeps_medians_between_turns() -> None:
    rb = RollingBaseline(10, window=6, min_samples=2, refresh_every=5, rows=2)
    rng = np.random.default_rng(2)
    for _ in range(6):
        rb.update(rng.normal(size=(2, 10)))
    full = np.median(rb.buf, axis=1).reshape(2, 10)
    assert np.array_equal(rb.baseline(), full)  # the first call computes everything
    rb.update(rng.normal(size=(2, 10)) + 100.0)
    b = rb.baseline().copy()
    changed = ~np.isclose(b, full)
    assert changed.sum() == 4  # one fifth of each row: 2 chips x 2 rows
    assert not changed[0, 2:].any() and changed[0, :2].all()  # row 0 starts at chunk 0
    assert not changed[1, :2].any() and changed[1, 2:4].all()  # row 1 at chunk 1


def test_bank_rows_match_separate_trackers() -> None:
    rules = [DeviationRule("a", floor=1.0, hold_s=4.0, direction="up"),
             DeviationRule("b", floor=10.0, hold_s=0.0, direction="both"),
             DeviationRule("c", floor=1.0, hold_s=2.0, adapt_s=20.0, direction="down")]
    n = 6
    bank = DeviationBank(rules, n, window=12, refresh_every=3)
    single = [DeviationTracker(r, n, window=12, refresh_every=3, offset=j) for j, r in enumerate(rules)]
    rng = np.random.default_rng(3)
    level = rng.uniform(20, 80, (3, n))
    for step in range(200):
        v = level + rng.normal(0, 0.3, (3, n))
        if step % 17 == 5:
            v[:, step % n] *= 1.5 if step % 2 else 0.5
        if step % 41 == 7:
            level[:, (step // 3) % n] *= 1.2
        if step == 90:
            v[1, 2] = np.nan
        if step % 50 == 30:
            mask = np.arange(n) == (step // 50)
            bank.reset(mask)
            for t in single:
                t.reset(mask)
        alerting, base = bank.observe(v, step * 2.0)
        for j, t in enumerate(single):
            a1, b1 = t.observe(v[j], step * 2.0)
            assert np.array_equal(a1, alerting[j])
            assert np.array_equal(b1, base[j], equal_nan=True)


def test_rollups_match_a_naive_fold() -> None:
    h = TelemetryHistory("cl", 3, 2, 2.0)
    rng = np.random.default_rng(4)
    chips: dict[str, list[np.ndarray]] = {m: [] for m in h.raw["chip"].metrics}
    for i in range(31):  # 31 samples: minute 0 holds 30, the 31st closes it
        c = {m: rng.normal(50, 5, 3) for m in h.raw["chip"].metrics}
        rows = h.add(i * 2.0, c, {m: rng.random(2) for m in h.raw["link"].metrics})
        if i < 30:
            assert rows == []
            for m, v in c.items():
                chips[m].append(v)
    minute = {r.metric: r for r in rows if r.scope == "chip" and r.resolution_s == 60.0}
    assert len(rows) == len(h.raw["chip"].metrics) + len(h.raw["link"].metrics)
    for m, vals in chips.items():
        s = np.zeros(3)
        for v in vals:
            s += v
        r = minute[m]
        assert r.count == 30 and r.t_start == 0.0
        assert r.avg.tolist() == [float(x) for x in np.round(s / 30, 6)]
        assert r.min.tolist() == [float(x) for x in np.round(np.min(vals, axis=0), 6)]
        assert r.max.tolist() == [float(x) for x in np.round(np.max(vals, axis=0), 6)]
        assert not r.avg.flags.writeable  # rows are shared with the store: read-only
    t, v = h.raw["chip"].series("temperature_c")
    assert len(t) == 31 and v.shape == (31, 3)
