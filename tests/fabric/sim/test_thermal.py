"""The first-order thermal model: temperature follows power; throttling slows jobs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podfleet.engine import Timeline
from podfleet.fabric.base import ChipState, RunState, WorkerGroupSpec
from podfleet.fabric.sim import SimFabric, ThermalParams
from podfleet.fabric.sim.telemetry import ChipTelemetry
from podfleet.hardware.specs import get_chip


def _telemetry(n: int = 4, **kw) -> ChipTelemetry:
    p = ThermalParams(sensor_noise_c=0.0, power_noise_w=0.0, util_noise_pct=0.0, **kw)
    return ChipTelemetry(n, get_chip("trn2"), p, np.random.default_rng(0), "1")


@settings(max_examples=10)
@given(load=st.floats(0.0, 1.0), dt=st.sampled_from([2.0, 5.0]))
def test_temperature_relaxes_to_ambient_plus_power_times_r(load: float, dt: float) -> None:
    t = _telemetry(throttle_c=1e9, release_c=1e9, critical_c=1e9)
    t.load[:] = load
    t.dirty = True
    for _ in range(int(600 / dt)):  # 20 time constants
        t.tick(dt, np.random.default_rng(1))
    p = t.p
    expect = p.ambient_c + t.power_w * p.r_c_per_w
    assert np.allclose(t.temperature_c, expect, atol=1e-3)
    assert np.all(np.diff(t.power_w) == 0)


def test_time_constant_and_monotone_approach() -> None:
    t = _telemetry(throttle_c=1e9, release_c=1e9, critical_c=1e9)
    t0 = float(t.temperature_c[0])
    t.load[:] = 1.0
    t.dirty = True
    temps = []
    for _ in range(15):  # 30 s = one tau at dt = 2 s
        t.tick(2.0, np.random.default_rng(1))
        temps.append(float(t.temperature_c[0]))
    t_ss = t.p.ambient_c + float(t.power_w[0]) * t.p.r_c_per_w
    frac = (temps[-1] - t0) / (t_ss - t0)
    assert abs(frac - (1 - math.exp(-1))) < 1e-6
    assert all(b > a for a, b in itertools.pairwise(temps))


def test_throttle_with_hysteresis() -> None:
    t = _telemetry(r_c_per_w=0.14)  # full load steady state: 35 + 500*0.14 = 105 C
    t.load[:] = 1.0
    t.dirty = True
    states = []
    for _ in range(300):
        _, _changed, _ = t.tick(2.0, np.random.default_rng(1))
        states.append(bool(t.throttle[0]))
    assert any(states)
    assert t.clock_mhz[t.throttle].max(initial=0) < t.p.base_clock_mhz
    # Throttled power holds the chip between release and throttle temperatures.
    assert t.temperature_c.max() < t.p.throttle_c + 2


def test_hot_chip_throttles_and_slows_the_job() -> None:
    tl = Timeline(3)
    fab = SimFabric("trn2-node", tl)
    events = []
    fab.subscribe(events.append)
    # A compute-bound job: a debug model's step on Trainium is the stack's fixed
    # per-micro-batch cost (perf ``microbatch_s``), which a clock does not stretch.
    run = fab.launch(WorkerGroupSpec("job-t", tuple(range(4)), "llama3-8b", 10**7))
    tl.run(300.0)
    fast = run.step_time_s
    fab.telemetry.r_scale[2] = 2.0  # poor cooling: hot enough to throttle, not to fail
    fab.telemetry.dirty = True
    tl.run(600.0)
    throttles = [e for e in events if e.kind == "thermal-throttle" and e.chip == 2]
    assert throttles and throttles[0].detail["on"] is True
    slow = [run.step_time_s]
    for _ in range(60):
        tl.run(tl.now + 2.0)
        slow.append(run.step_time_s)
    # While chip 2 is throttled the whole gang runs at its clock.
    assert max(slow) > fast * 1.5
    assert fab.chip_state(2) == ChipState.HEALTHY
    assert fab.chip_metrics()["temperature_c"][2] < fab.thermal.critical_c


def test_thermal_runaway_under_load_fails_the_chip() -> None:
    tl = Timeline(3)
    fab = SimFabric("trn2-node", tl)
    events = []
    fab.subscribe(events.append)
    run = fab.launch(WorkerGroupSpec("job-t", tuple(range(4)), "debug", 10**7))
    tl.run(60.0)
    fab.inject_fault("thermal-runaway", chip=2)
    assert fab.chip_state(2) == ChipState.DEGRADED
    tl.run(3000.0)
    # Even throttled, a tripled thermal resistance passes the critical temperature.
    assert fab.chip_state(2) == ChipState.FAILED
    failed = next(e for e in events if e.kind == "chip-failed")
    assert failed.detail["cause"] == "thermal-runaway" and failed.job_id == "job-t"
    assert failed.detail["temperature_c"] > fab.thermal.critical_c
    assert run.state == RunState.PAUSED


def test_idle_runaway_chip_degrades_but_survives() -> None:
    tl = Timeline(3)
    fab = SimFabric("trn2-node", tl)
    fab.inject_fault("thermal-runaway", chip=1)
    tl.run(3600.0)
    assert fab.chip_state(1) == ChipState.DEGRADED
    assert fab.chip_metrics()["temperature_c"][1] > fab.chip_metrics()["temperature_c"][0] + 10


def test_sensor_readings_average_to_the_model_over_a_long_run() -> None:
    """Noise is unbiased: over 2,000 samples the mean reading of each chip is within
    4 standard errors of the model (0.3 C and 3 W per sample)."""
    tl = Timeline(11)
    fab = SimFabric("trn2-node", tl)
    fab.launch(WorkerGroupSpec("job-n", tuple(range(8)), "debug", 10**9))
    tl.run(600.0)  # settle
    temps, powers = [], []
    for _ in range(2000):
        tl.run(tl.now + 2.0)
        m = fab.chip_metrics()
        temps.append(m["temperature_c"])
        powers.append(m["power_w"])
    t_err = np.mean(temps, axis=0) - fab.telemetry.model_temperature_c
    p_clean = fab.telemetry._power_clean
    p_err = np.mean(powers, axis=0) - p_clean
    n = len(temps)
    assert np.abs(t_err).max() < 4 * 0.3 / np.sqrt(n)
    assert np.abs(p_err[:8]).max() < 4 * 3.0 / np.sqrt(n)
    assert np.all(p_err[8:] == 0)  # idle chips: no load, no power noise
    assert np.std(np.array(temps)[:, 0]) == pytest.approx(0.3, rel=0.1)
