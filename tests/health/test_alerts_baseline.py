from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from podfleet.errors import InvalidTransitionError, NotFoundError
from podfleet.health.alerts import AlertBook, AlertState
from podfleet.health.baseline import DeviationRule, DeviationTracker


def fire(book: AlertBook, now: float, target: str = "chip:3"):
    return book.fire(cluster_id="cl-1", target=target, rule="deviation:temp", severity="warning",
                     message="hot", now=now, value=90.0)


def test_alert_dedup_and_lifecycle() -> None:
    book = AlertBook()
    a, new = fire(book, 1.0)
    assert new and a.state == AlertState.FIRING
    b, new2 = fire(book, 3.0)
    assert b is a and not new2 and a.count == 2 and a.last_seen == 3.0
    book.acknowledge(a.id, "alice")
    assert a.state == AlertState.ACKNOWLEDGED and a.acknowledged_by == "alice"
    with pytest.raises(InvalidTransitionError):
        book.acknowledge(a.id, "bob")
    book.clear("cl-1", "chip:3", "deviation:temp", 5.0)
    assert a.state == AlertState.RESOLVED and a.resolved_at == 5.0
    shown = a.to_dict(epoch=1_700_000_000.0)  # as the API shows it: every *_at is RFC 3339
    assert shown["resolved_at"] == "2023-11-14T22:13:25.000Z" and shown["resolved_t"] == 5.0
    assert shown["first_seen_at"] == "2023-11-14T22:13:21.000Z" and shown["first_seen"] == 1.0
    c, new3 = fire(book, 6.0)  # the condition returns: a new alert
    assert new3 and c.id != a.id
    assert len(book.all()) == 2 and book.open_alerts() == [c]
    with pytest.raises(NotFoundError):
        book.get("al-nope")


def test_deviation_fires_after_hold_and_only_on_the_deviating_chip() -> None:
    rule = DeviationRule("temperature_c", rel=0.10, hold_s=10.0)
    tr = DeviationTracker(rule, n=4, window=20)
    rng = np.random.default_rng(0)
    t = 0.0
    for _ in range(20):
        t += 2.0
        alerting, _ = tr.observe(60 + rng.normal(0, 0.5, 4), t)
        assert not alerting.any()
    fired_at = None
    for _ in range(10):
        t += 2.0
        v = 60 + rng.normal(0, 0.5, 4)
        v[2] = 70.0  # +16%
        alerting, base = tr.observe(v, t)
        assert not alerting[[0, 1, 3]].any()
        if alerting[2] and fired_at is None:
            fired_at = t
    assert fired_at is not None
    assert abs(base[2] - 60) < 2  # the anomaly did not drag the baseline


def test_sustained_shift_becomes_new_normal_after_adapt_s() -> None:
    rule = DeviationRule("power_w", rel=0.10, hold_s=4.0, adapt_s=20.0)
    tr = DeviationTracker(rule, n=1, window=10)
    t = 0.0
    for _ in range(10):
        t += 1.0
        tr.observe(np.array([100.0]), t)
    states = []
    for _ in range(60):
        t += 1.0
        alerting, _ = tr.observe(np.array([150.0]), t)
        states.append(bool(alerting[0]))
    assert any(states) and not states[-1]


@given(st.floats(min_value=1.0, max_value=1e4), st.floats(min_value=0.0, max_value=0.09))
def test_small_deviation_never_alerts(level: float, frac: float) -> None:
    tr = DeviationTracker(DeviationRule("m", rel=0.10, hold_s=0.0), n=1, window=10)
    for i in range(10):
        tr.observe(np.array([level]), float(i))
    alerting, _ = tr.observe(np.array([level * (1 + frac)]), 11.0)
    assert not alerting[0]


@given(st.lists(st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6)), min_size=3, max_size=3), min_size=1, max_size=12))
def test_nanmedian_matches_numpy(rows: list[list[float | None]]) -> None:
    import warnings

    from podfleet.health.baseline import _nanmedian0

    a = np.array([[np.nan if v is None else v for v in r] for r in rows])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = np.nanmedian(a, axis=0)
    got = _nanmedian0(a)
    assert np.array_equal(np.isnan(ref), np.isnan(got))
    assert np.allclose(ref[~np.isnan(ref)], got[~np.isnan(got)])
