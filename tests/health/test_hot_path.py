"""The per-tick shortcuts of the health monitor give the same answers as the plain
computations: the telemetry history's one-assignment sample, the shared thermal inputs
of the scan and the predictor, the identity checks of read-only arrays, the scan's
per-job watch."""

from __future__ import annotations

import numpy as np

from podfleet.health.alerts import AlertBook
from podfleet.health.predict import PrecursorFeatures
from podfleet.health.scan import HealthScanner, thermal_inputs
from podfleet.health.telemetry import (
    CHIP_METRICS,
    LINK_METRICS,
    TelemetryHistory,
    chip_sample,
    link_sample,
)
from podfleet.scheduler.samples import same_frozen


def _ro(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def test_history_sample_paths_agree_and_keep_every_value() -> None:
    rng = np.random.default_rng(3)
    a, b = TelemetryHistory("c", 5, 4, 2.0, window_s=100.0), TelemetryHistory("c", 5, 4, 2.0, window_s=100.0)
    fed: list[dict[str, np.ndarray]] = []
    for k in range(200):
        chip = {m: rng.normal(50.0, 10.0, 5) for m in CHIP_METRICS}
        chip["mem_ecc_corrected"] = rng.integers(0, 9, 5)
        chip["neuroncore_utilization"] = rng.random((5, 8)) * 100.0
        util = chip["neuroncore_utilization"].mean(axis=1) / 100.0
        link = {"utilization": rng.random(4), "bandwidth_bytes_per_s": rng.random(4), "errors": rng.integers(0, 3, 4)}
        rows_a = a.add(k * 2.0, chip_sample(chip, util), link_sample(link))
        rows_b = b.add_fabric(k * 2.0, chip, util, link)
        assert [(r.scope, r.metric, r.t_start) for r in rows_a] == [(r.scope, r.metric, r.t_start) for r in rows_b]
        for ra, rb in zip(rows_a, rows_b, strict=True):
            assert np.array_equal(ra.avg, rb.avg) and np.array_equal(ra.min, rb.min) and np.array_equal(ra.max, rb.max)
        fed.append(chip_sample(chip, util) | {f"link:{m}": v for m, v in link_sample(link).items()})
    size = a.raw["chip"].size
    for scope, metrics in (("chip", CHIP_METRICS), ("link", LINK_METRICS)):
        for m in metrics:
            t, v = b.raw[scope].series(m)
            assert np.array_equal(t, np.arange(200 - size, 200) * 2.0)
            key = m if scope == "chip" else f"link:{m}"
            want = np.stack([np.asarray(f[key], np.float32) for f in fed[-size:]])
            assert np.array_equal(v, want)


def test_history_broadcasts_a_scalar_metric() -> None:
    h = TelemetryHistory("c", 3, 2, 2.0)
    chip = {m: np.ones(3) for m in CHIP_METRICS}
    chip["link_errors"] = np.float64(np.nan)  # a fabric that does not measure it
    h.add(0.0, chip, {m: np.ones(2) for m in LINK_METRICS})
    _, v = h.raw["chip"].series("link_errors")
    assert np.isnan(v).all() and v.shape == (1, 3)
    _, t = h.raw["chip"].series("temperature_c")
    assert np.array_equal(t, np.ones((1, 3), np.float32))


def test_same_frozen_needs_the_very_read_only_arrays() -> None:
    a, b, w = _ro(np.zeros(3)), _ro(np.ones(3)), np.zeros(3)
    assert same_frozen((a,), (a,)) and same_frozen((a, b), (a, b)) and same_frozen((a, b, a), (a, b, a))
    assert not same_frozen((a,), (_ro(np.zeros(3)),))  # equal values, another array
    assert not same_frozen((w,), (w,))  # writable: could have been changed in place
    assert not same_frozen((a, w), (a, w)) and not same_frozen((a, b), (b, a)) and not same_frozen((a,), (a, b))
    assert not same_frozen(([0.0],), ([0.0],))  # not an array at all


def test_shared_thermal_inputs_give_the_same_predictor_sums() -> None:
    rng = np.random.default_rng(4)
    plain, shared = PrecursorFeatures(6, 35.0), PrecursorFeatures(6, 35.0)
    ecc = _ro(np.zeros(6, np.int64))
    for k in range(300):
        m = {"temperature_c": rng.normal(70.0, 1.0, 6), "power_w": rng.normal(300.0, 2.0, 6),
             "mem_ecc_corrected": ecc, "link_errors": ecc}
        m["power_w"][0] = 0.5  # below the 1 W floor
        plain.sample(m, k * 2.0)
        rise, power_floor = thermal_inputs(m, 35.0)
        shared.sample(m, k * 2.0, rise=rise, power_floor=power_floor)
        if k % 30 == 29:
            plain.close_minute()
            shared.close_minute()
            assert np.array_equal(plain.features(), shared.features())
    assert np.array_equal(plain.r, shared.r) and np.array_equal(plain.p, shared.p, equal_nan=True)
    assert plain.r.any()  # steady minutes were seen: the resistance sums were compared


def _scanner_run(share: bool) -> list[tuple[str, str, str]]:
    rng = np.random.default_rng(5)
    sc = HealthScanner("c", 4, 0, AlertBook())
    zeros = _ro(np.zeros(4, np.int64))
    events = []
    for k in range(400):
        temp = 60.0 + rng.normal(0.0, 0.2, 4)
        if k > 200:
            temp[1] += 15.0  # a chip running hot: a deviation alert
        m = {"temperature_c": temp, "power_w": 300.0 + rng.normal(0.0, 2.0, 4), "clock_mhz": np.full(4, 2400.0),
             "neuroncore_utilization": np.full((4, 2), 90.0), "mem_ecc_uncorrected": zeros,
             "sram_ecc_uncorrected": zeros, "mem_ecc_corrected": zeros, "throttle": np.zeros(4, bool)}
        jobs = {"j": {"state": "RUNNING", "step": k if k < 300 else 300, "tokens_per_s": 100.0 if k < 250 else 50.0}}
        rise, floor = thermal_inputs(m, sc.cfg.ambient_c) if share else (None, None)
        res = sc.scan(k * 2.0, m, np.zeros(4, np.int64), jobs=jobs, rise=rise, power_floor=floor)
        events += [("fire", a.target, a.rule) for a in res.fired] + [("clear", a.target, a.rule) for a in res.resolved]
    return events


def test_scan_with_shared_inputs_fires_the_same_alerts() -> None:
    plain = _scanner_run(share=False)
    assert ("fire", "chip:1", "deviation:temperature_c") in plain
    assert ("fire", "job:j", "job-slow") in plain and ("fire", "job:j", "job-stalled") in plain
    assert _scanner_run(share=True) == plain
