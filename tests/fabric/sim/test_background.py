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
