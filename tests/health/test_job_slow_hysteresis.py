"""job-slow opens only on a sustained slowdown and closes only on a sustained recovery: a
real (local) job's tokens/s is noisy around the bar and must not flap the alert."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from podfleet.health.alerts import AlertBook
from podfleet.health.scan import HealthConfig, HealthScanner


def _metrics() -> dict[str, np.ndarray]:
    zeros = np.zeros(2, np.int64)
    return {"temperature_c": np.full(2, 60.0), "power_w": np.full(2, 300.0), "clock_mhz": np.full(2, 2400.0),
            "neuroncore_utilization": np.full((2, 2), 90.0), "mem_ecc_uncorrected": zeros,
            "sram_ecc_uncorrected": zeros, "mem_ecc_corrected": zeros, "throttle": np.zeros(2, bool)}


def _run(series: Iterable[float], cfg: HealthConfig | None = None) -> list[tuple[int, str]]:
    """(scan index, "open" / "close") of job-slow over one tokens/s sample a scan (the
    job steps every scan: never stalled)."""
    sc = HealthScanner("c", 2, 0, AlertBook(), config=cfg or HealthConfig())
    m, states, out = _metrics(), np.zeros(2, np.int64), []
    for k, tps in enumerate(series):
        res = sc.scan(k * 2.0, m, states, jobs={"j": {"state": "RUNNING", "step": k, "tokens_per_s": tps}})
        out += [(k, "open") for a in res.fired if a.rule == "job-slow"]
        out += [(k, "close") for a in res.resolved if a.rule == "job-slow"]
    return out


WARM = [100.0] * 20  # the median the bar is 10% under (90 tokens/s)


def test_noise_alternating_around_the_bar_never_opens() -> None:
    assert _run(WARM + [89.0, 91.0] * 40) == []
    assert _run(WARM + [85.0, 85.0, 95.0] * 20) == []  # two slow scans in a row are not three


def test_a_sustained_slowdown_opens_once_and_noise_near_the_bar_does_not_close_it() -> None:
    # 50 tokens/s from scan 20: open at the third slow scan. Then noise between the open
    # bar (90) and the close bar (95), and single good scans: still open, no flap. Then
    # three scans back within 5%: closed, once.
    series = WARM + [50.0] * 5 + [89.0, 92.0, 93.0, 96.0, 89.0, 97.0, 91.0] * 6 + [99.0, 100.0, 98.0] + [100.0] * 5
    assert _run(series) == [(22, "open"), (len(series) - 6, "close")]


def test_the_old_single_scan_behaviour_flaps_on_the_same_noise() -> None:
    # The hysteresis is what keeps the alert still: with one scan to open and one to close,
    # a series alternating under the open bar and over the close bar (96 > 95) flaps.
    flappy = HealthConfig(job_slow_open_scans=1, job_slow_close_scans=1, rel=0.1)
    events = _run(WARM + [89.0, 96.0] * 10, flappy)
    assert len(events) >= 10 and events[0] == (20, "open") and events[1] == (21, "close")
