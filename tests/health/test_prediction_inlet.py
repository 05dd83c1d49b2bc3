"""The predictor's thermal features against the room's inlet (``room_reference``): an
inlet drift every chip shares is not a precursor, a failing thermal interface on one chip
still is, and the inlet is told from chips at different loads (``room_offset_c``)."""

from __future__ import annotations

import numpy as np

from podfleet.health.predict import FEATURES, PrecursorFeatures, room_offset_c

RISE = FEATURES.index("r_rise")
HOT = FEATURES.index("r_hot60")


def _run(room: bool, *, inlet_c_per_h: float, failing: int | None = None, minutes: int = 240) -> np.ndarray:
    """64 chips at two loads, 6 samples a minute; the inlet warms at ``inlet_c_per_h``;
    ``failing``: a chip whose thermal resistance climbs 30% over the last hour."""
    n = 64
    rng = np.random.default_rng(0)
    power = np.where(np.arange(n) % 2 == 0, 100.0, 370.0)
    r = np.full(n, 0.09)
    f = PrecursorFeatures(n, room_reference=room)
    zeros = np.zeros(n, np.int64)
    for m in range(minutes):
        if failing is not None and m >= minutes - 60:
            r[failing] = 0.09 * (1.0 + 0.3 * (m - (minutes - 60)) / 60)
        for s in range(6):
            t = m * 60.0 + s * 10.0
            temp = 35.0 + inlet_c_per_h * t / 3600.0 + power * r + rng.standard_normal(n) * 0.3
            f.sample({"temperature_c": temp, "power_w": power + rng.standard_normal(n) * 3.0,
                      "mem_ecc_corrected": zeros, "link_errors": zeros}, t)
        f.close_minute()
    return f.features()


def test_a_room_wide_inlet_drift_is_rise_against_a_fixed_ambient_and_none_against_the_room() -> None:
    fixed = _run(False, inlet_c_per_h=1.0)
    assert fixed[:, RISE].max() > 0.05 and fixed[:, HOT].max() > 0.5  # idle chips read the inlet as resistance
    room = _run(True, inlet_c_per_h=1.0)
    assert room[:, RISE].max() == 0.0 and room[:, HOT].max() == 0.0


def test_a_failing_chip_still_shows_against_the_room() -> None:
    x = _run(True, inlet_c_per_h=1.0, failing=1)  # a loaded chip (370 W)
    others = np.delete(x, 1, axis=0)
    assert x[1, RISE] > 0.15 and x[1, HOT] > 0.3
    assert others[:, RISE].max() == 0.0


def test_the_room_inlet_is_the_intercept_over_loads_and_a_failing_chip_does_not_move_it() -> None:
    rng = np.random.default_rng(1)
    power = rng.uniform(100.0, 400.0, 200)
    rise = 2.0 + 0.09 * power + rng.standard_normal(200) * 0.1
    rise[:5] += 20.0  # five chips far off the line
    steady = np.ones(200, bool)
    off = room_offset_c(rise, power, steady)
    assert off is not None and abs(off - 2.0) < 0.1
    # One load on every chip: the intercept is not identified, the last estimate is kept.
    assert room_offset_c(rise, np.full(200, 300.0), steady) is None
    assert room_offset_c(rise[:4], power[:4], steady[:4]) is None
