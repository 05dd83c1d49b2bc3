from __future__ import annotations

import numpy as np
import pytest

from podfleet.engine.timeline import Timeline
from podfleet.errors import UnknownNameError
from podfleet.fabric.sim import SimFabric
from podfleet.health.alerts import AlertState
from podfleet.health.monitor import HealthMonitor
from podfleet.health.scan import HealthConfig
from podfleet.health.telemetry import TelemetryHistory


def monitor(hold_s: float = 10.0, **kw):
    tl = Timeline(4)
    fab = SimFabric("trn2-ultraserver", tl)
    fab.telemetry.load[:] = 0.7
    fab.telemetry.dirty = True
    mon = HealthMonitor("cl-t", fab, tl, config=HealthConfig(hold_s=hold_s), **kw)
    mon.start()
    return tl, fab, mon


def rules(mon, state=None) -> set[tuple[str, str]]:
    return {(a.target, a.rule) for a in mon.book.all() if state is None or a.state == state}


def test_quiet_pod_raises_no_alerts() -> None:
    tl, _fab, mon = monitor()
    tl.run(until=1200.0)
    assert mon.book.all() == []
    assert set(mon.chip_health()) == {"ok"} and set(mon.link_health()) == {"ok"}


def test_thermal_drift_fires_deviation_after_hold_and_resolves() -> None:
    tl, fab, mon = monitor(hold_s=20.0)
    tl.run(until=600.0)
    fab.telemetry.r_scale[9] = 1.3  # cooling degrades: +30% thermal resistance
    fab.telemetry.dirty = True
    tl.run(until=615.0)
    assert ("chip:9", "deviation:thermal_resistance") not in rules(mon)  # not yet: hold
    tl.run(until=720.0)
    assert ("chip:9", "deviation:thermal_resistance") in rules(mon, AlertState.FIRING)
    assert {t for t, _ in rules(mon)} == {"chip:9"}  # no other chip
    assert mon.chip_health()[9] == "warning"
    fab.telemetry.r_scale[9] = 1.0
    fab.telemetry.dirty = True
    tl.run(until=900.0)
    assert ("chip:9", "deviation:thermal_resistance") in rules(mon, AlertState.RESOLVED)


def test_job_start_is_not_an_anomaly() -> None:
    tl, fab, mon = monitor()
    tl.run(until=600.0)
    fab.telemetry.load[:32] = 0.05  # half the pod goes idle
    fab.telemetry.dirty = True
    tl.run(until=1200.0)
    assert not [a for a in mon.book.all() if a.rule.startswith("deviation:")]


def test_fault_rules_and_dedup() -> None:
    tl, fab, mon = monitor()
    tl.run(until=100.0)
    fab.inject_fault("hbm-corrected-burst", chip=3)
    fab.inject_fault("link-down", link=5)
    fab.inject_fault("hbm-uncorrectable", chip=8)
    tl.run(until=110.0)
    got = rules(mon)
    k = fab.topology.links[5]
    link5 = f"link:{min(k.src, k.dst)}-{max(k.src, k.dst)}"  # alerts name links as A-B
    assert ("chip:3", "ecc-corrected-rate") in got
    assert (link5, "link-down") in got and (link5, "link-errors") in got
    assert ("chip:8", "ecc-uncorrected") in got and ("chip:8", "chip-down") in got
    assert mon.chip_health()[8] == "critical" and mon.link_health()[5] == "critical"
    n = len(mon.book.all())
    tl.run(until=130.0)
    assert len([a for a in mon.book.all() if a.target == "chip:8" and a.rule == "chip-down"]) == 1
    assert len(mon.book.all()) >= n
    fab.repair_link(5)
    tl.run(until=200.0)
    assert (link5, "link-down") in rules(mon, AlertState.RESOLVED)


def test_mounts_and_jobs() -> None:
    mounts = [{"name": "/fsx", "state": "ok", "used_bytes": 95, "capacity_bytes": 100},
              {"name": "/ckpt", "state": "unavailable", "used_bytes": 1, "capacity_bytes": 100}]
    jobs = {"job-1": {"state": "RUNNING", "step": 5, "tokens_per_s": 100.0}}
    tl, _fab, mon = monitor(mounts=lambda: mounts, jobs=lambda: jobs)
    tl.run(until=300.0)
    got = rules(mon)
    assert ("mount:/fsx", "mount-full") in got and ("mount:/ckpt", "mount-unavailable") in got
    assert ("job:job-1", "job-stalled") in got  # no step for 120 s


def test_queue_wait_is_no_stall() -> None:
    # Queued for 500 s, then running: the stall clock starts when it runs, not at submit,
    # and a resume (after recovering) starts it over again.
    jobs = {"job-q": {"state": "PENDING", "step": 0, "tokens_per_s": 0.0}}
    tl, _fab, mon = monitor(jobs=lambda: jobs)
    tl.run(until=500.0)
    jobs["job-q"] = {"state": "RUNNING", "step": 0, "tokens_per_s": 0.0}
    tl.run(until=560.0)
    assert ("job:job-q", "job-stalled") not in rules(mon)
    jobs["job-q"] = {"state": "RUNNING", "step": 3, "tokens_per_s": 10.0}
    tl.run(until=600.0)
    jobs["job-q"] = {"state": "RECOVERING", "step": 3, "tokens_per_s": 0.0}
    tl.run(until=900.0)
    jobs["job-q"] = {"state": "RUNNING", "step": 3, "tokens_per_s": 0.0}
    tl.run(until=960.0)
    assert ("job:job-q", "job-stalled") not in rules(mon)
    tl.run(until=1100.0)  # 120 s running without a step: now it is a stall
    stalled = [a for a in mon.book.all() if a.rule == "job-stalled"]
    assert len(stalled) == 1 and stalled[0].first_seen >= 900 + 110, stalled[0]


def test_long_steps_are_no_stall() -> None:
    # A 70B job's 258 s steps: between two of them it is not stalled (the bar is three of its
    # own steps, the setting's 120 s at least); once it misses three, it is.
    jobs = {"job-big": {"state": "RUNNING", "step": 0, "tokens_per_s": 10.0, "step_time_s": 258.0}}
    tl, _fab, mon = monitor(jobs=lambda: jobs)
    for k in range(1, 5):
        tl.run(until=258.0 * k)
        jobs["job-big"] = {**jobs["job-big"], "step": k}
    assert ("job:job-big", "job-stalled") not in rules(mon)
    tl.run(until=258.0 * 4 + 3 * 258.0 + 10)
    assert ("job:job-big", "job-stalled") in rules(mon)
    # Without a reported step time, the step lengths the scan saw set the bar.
    jobs2 = {"job-seen": {"state": "RUNNING", "step": 0, "tokens_per_s": 10.0}}
    tl, _fab, mon = monitor(jobs=lambda: jobs2)
    for k in range(1, 6):
        tl.run(until=100.0 * k)
        jobs2["job-seen"] = {**jobs2["job-seen"], "step": k}
    tl.run(until=500.0 + 250.0)  # 250 s without a step: under 3 x 100 s
    assert ("job:job-seen", "job-stalled") not in rules(mon)
    tl.run(until=500.0 + 320.0)
    assert ("job:job-seen", "job-stalled") in rules(mon)


def test_history_windows_and_rollups() -> None:
    sunk = []
    tl, _fab, mon = monitor(sink=sunk.extend)
    tl.run(until=2 * 3600.0 + 10)
    h = mon.history
    rt = h.query("chip", "temperature_c", "realtime", tl.now)
    assert 440 <= len(rt["t"]) <= 452 and rt["resolution_s"] is None  # 15 min at 2 s
    hr = h.query("chip", "temperature_c", "hour", tl.now, target=3)
    assert 59 <= len(hr["t"]) <= 61 and all(lo <= a <= hi for lo, a, hi in zip(hr["min"], hr["avg"], hr["max"], strict=False))
    day = h.query("link", "utilization_ratio", "week", tl.now)
    assert len(day["t"]) == 2 and day["resolution_s"] == 3600.0
    assert {r.resolution_s for r in sunk} == {60.0, 3600.0}
    with pytest.raises(UnknownNameError, match="realtime"):
        h.query("chip", "temperature_c", "fortnight", tl.now)
    with pytest.raises(UnknownNameError, match="temperature_c"):
        h.query("chip", "nope", "hour", tl.now)


def test_minute_rollups_expire_after_a_day() -> None:
    h = TelemetryHistory("cl", 2, 1, 60.0)
    for i in range((26 * 60) + 2):
        h.add(i * 60.0, {m: np.ones(2) for m in h.raw["chip"].buf}, {m: np.ones(1) for m in h.raw["link"].buf})
    rows = h.rows[("chip", "temperature_c", 60.0)]
    assert rows[0].t_start >= 26 * 3600 - 86400 - 60
    assert len(h.rows[("chip", "temperature_c", 3600.0)]) == 26


def test_hour_rollups_equal_the_samples_of_the_hour() -> None:
    # An hour's min and max come from its minutes' (folded at each minute's close); its
    # avg, min and max must still be those of every sample in the hour.
    rng = np.random.default_rng(5)
    h = TelemetryHistory("cl", 3, 2, 2.0)
    temps: list[np.ndarray] = []
    t0 = 1314.0  # not on a minute boundary, as after a deployment
    for i in range(2 * 1800 + 40):
        t = t0 + 2.0 * i
        sample = {m: rng.normal(50.0, 10.0, 3) for m in h.raw["chip"].buf}
        h.add(t, sample, {m: rng.random(2) for m in h.raw["link"].buf})
        if 3600.0 <= t < 7200.0:
            temps.append(sample["temperature_c"])
    row = next(r for r in h.rows[("chip", "temperature_c", 3600.0)] if r.t_start == 3600.0)
    seen = np.array(temps)
    assert row.count == len(temps) == 1800
    np.testing.assert_array_equal(row.min, np.round(seen.min(axis=0), 6))
    np.testing.assert_array_equal(row.max, np.round(seen.max(axis=0), 6))
    np.testing.assert_allclose(row.avg, seen.mean(axis=0), atol=1e-6)


def test_job_slow_baseline_is_the_median_of_its_last_samples() -> None:
    from podfleet.health.scan import _Throughputs

    rng = np.random.default_rng(2)
    hist, kept = _Throughputs(60), []
    for x in rng.choice([1.0, 2.0, 3.5], size=300).tolist() + rng.random(300).tolist():
        hist.add(x)
        kept = [*kept, x][-60:]
        assert hist.median() == float(np.median(kept))


def test_util_ratio_is_computed_once_per_read_only_sample() -> None:
    from podfleet.scheduler.samples import util_ratio

    a = np.arange(12, dtype=np.float64).reshape(4, 3)
    a.flags.writeable = False
    first = util_ratio({"neuroncore_utilization": a})
    assert np.array_equal(first, a.mean(axis=1) / 100.0)
    assert util_ratio({"neuroncore_utilization": a}) is first and not first.flags.writeable
    # A writable array could change in place: never taken from the last call.
    b = np.arange(12, dtype=np.float64).reshape(4, 3)
    one = util_ratio({"neuroncore_utilization": b})
    b += 1.0
    assert np.array_equal(util_ratio({"neuroncore_utilization": b}), b.mean(axis=1) / 100.0)
    assert np.array_equal(one, a.mean(axis=1) / 100.0)


def test_throughput_median_is_numpys_over_the_last_samples() -> None:
    from collections import deque

    from podfleet.health.scan import _Throughputs

    rng = np.random.default_rng(5)
    hist, last = _Throughputs(60), deque(maxlen=60)
    for x in rng.choice([100.0, 101.5, 99.25, 250.0], size=400).tolist():  # repeats: steady spells
        hist.add(x)
        last.append(x)
        assert hist.median() == float(np.median(list(last))) and hist.sorted == sorted(last)


def test_a_stall_is_wall_seconds_on_a_fast_plane() -> None:
    # A real local job on a demo paced at 20x: its workers take seconds of wall clock to
    # start, hundreds of timeline seconds. Not a stall; 120 s of wall clock without a step is.
    jobs = {"job-l": {"state": "RUNNING", "step": 0, "tokens_per_s": 0.0}}
    tl, _fab, mon = monitor(jobs=lambda: jobs)
    tl.speed = 20.0  # virtual time, read at a 20x plane's pace (what ``pace`` tells the scan)
    tl.run(until=600.0)  # 30 s of wall clock
    assert ("job:job-l", "job-stalled") not in rules(mon)
    tl.run(until=2500.0)
    stalled = [a for a in mon.book.all() if a.rule == "job-stalled"]
    assert len(stalled) == 1 and stalled[0].first_seen >= 2400.0, stalled
    assert stalled[0].message.startswith("no training step for 12"), stalled[0].message
