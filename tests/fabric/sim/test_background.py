"""Healthy chips' corrected-ECC background (field data, ``fabric.sim.background``)."""

from __future__ import annotations

import numpy as np

from podfleet.engine.timeline import Timeline
from podfleet.fabric.sim import FaultRates, SimFabric
from podfleet.fabric.sim.background import YEAR_S, Background, BackgroundParams


def test_the_background_has_the_field_studys_share_and_mean() -> None:
    bg = Background(200_000, BackgroundParams(), seed=1)
    share = bg.chips.size / 200_000
    assert abs(share - 0.29) < 0.01  # 1 - (1 - 0.082)^4 of chips
    per_year = bg.rate_per_s[bg.chips] * YEAR_S
    assert 0.7 * 4000 < per_year.mean() < 1.3 * 4000  # ~4,000 a year on an affected chip, on average
    assert np.median(per_year) < 0.2 * per_year.mean()  # concentrated: most affected chips have few


def test_healthy_chips_count_background_errors_and_the_fault_arrivals_stay_the_same() -> None:
    def run(background: BackgroundParams | None) -> tuple[np.ndarray, list[tuple[str, int | None]]]:
        tl = Timeline(seed=4)
        fab = SimFabric("trn2-ultraserver:4", tl, fault_rates=FaultRates().scaled(400.0), telemetry_interval_s=10.0,
                        background=background)
        tl.run(until=24 * 3600.0)
        faults = [(r["fault"], r.get("chip")) for r in tl.log.filter("fault")]
        return np.asarray(fab.telemetry.mem_ecc_corrected), faults

    with_bg, faults_bg = run(BackgroundParams())
    without, faults = run(None)
    assert faults_bg == faults  # the background draws from its own generator
    extra = with_bg - without
    assert (extra >= 0).all() and (extra > 0).sum() >= 10


def test_inlet_drift_is_a_shared_daily_swing_plus_each_chips_wander() -> None:
    from podfleet.fabric.sim.background import ThermalDrift, ThermalDriftParams

    d = ThermalDrift(4000, ThermalDriftParams(diurnal_c=1.5, chip_sigma_c=0.5), seed=2)
    offsets = []
    for _ in range(int(86400 / 60)):
        d.step(60.0)
        offsets.append(d.offset.copy())
    o = np.asarray(offsets)  # [minutes, chips]
    room = o.mean(axis=1)
    assert 2.5 < room.max() - room.min() < 3.1  # a 3 C peak-to-peak day, common to all chips
    wander = o - room[:, None]
    assert 0.4 < wander.std() < 0.6  # each chip's own 0.5 C wander, stationary
    # The wander moves over hours, not samples: a minute apart nearly the same (0.5 C x
    # sqrt(2 x 60 / 7200) = 0.065 C), an hour apart still correlated (exp(-0.5) = 0.61).
    assert np.diff(wander, axis=0).std() < 0.08
    assert 0.5 < np.corrcoef(wander[:-60].ravel(), wander[60:].ravel())[0, 1] < 0.7


def test_inlet_drift_moves_what_the_sensor_reads_and_not_the_faults() -> None:
    from podfleet.fabric.sim.background import ThermalDriftParams

    def run(drift: ThermalDriftParams | None) -> tuple[np.ndarray, list[tuple[str, int | None]]]:
        tl = Timeline(seed=4)
        fab = SimFabric("trn2-ultraserver", tl, fault_rates=FaultRates().scaled(400.0), telemetry_interval_s=10.0,
                        thermal_drift=drift)
        tl.run(until=6 * 3600.0)
        return np.asarray(fab.chip_metrics()["temperature_c"]), [(r["fault"], r.get("chip")) for r in tl.log.filter("fault")]

    t_drift, f_drift = run(ThermalDriftParams(diurnal_c=0.0, chip_sigma_c=2.0))
    t_none, f_none = run(None)
    assert f_drift == f_none
    assert 1.0 < np.std(t_drift - t_none) < 3.0


def test_inlet_drift_rejects_bad_sizes() -> None:
    import pytest

    from podfleet.errors import InvalidInputError
    from podfleet.fabric.sim.background import ThermalDriftParams

    with pytest.raises(InvalidInputError, match="chip_sigma_c"):
        ThermalDriftParams(chip_sigma_c=-1.0)
    with pytest.raises(InvalidInputError, match="chip_tau_s"):
        ThermalDriftParams(chip_tau_s=0.0)
