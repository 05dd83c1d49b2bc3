"""Failure-prediction features and the logistic fit (trained and measured on twin seeds in tests/rehearsal/test_evaluate.py)."""

from __future__ import annotations

import numpy as np

from podfleet.health.predict import (
    BASELINE_MIN,
    DEFAULT_MODEL,
    EXCESS_Z,
    FEATURES,
    HISTORY_MIN,
    NOISE_Z,
    SENSOR_NOISE_C,
    LogisticModel,
    PrecursorFeatures,
    fit,
)


def _feed(f: PrecursorFeatures, ecc: np.ndarray, temp: np.ndarray | None = None,
          power: np.ndarray | None = None) -> None:
    n = f.n
    f.sample({"temperature_c": np.full(n, 60.0) if temp is None else temp,
              "power_w": np.full(n, 300.0) if power is None else power,
              "link_errors": np.zeros(n), "mem_ecc_corrected": ecc.copy()})
    f.close_minute()


def test_logistic_fit_separates_a_simple_rule() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((2000, 4))
    y = x[:, 1] > 0.6
    w = fit(x, y, scale=(1.0, 1.0, 1.0, 1.0))
    p = LogisticModel(w, 0.5, scale=(1.0, 1.0, 1.0, 1.0)).proba(x)
    assert ((p >= 0.5) == y).mean() > 0.95


def test_one_burst_a_trickle_and_repeated_bursts_have_different_features() -> None:
    f = PrecursorFeatures(3)
    ecc = np.zeros(3)
    for minute in range(130):
        if minute == 100:
            ecc[0] += 150  # one burst on chip 0
        ecc[1] += minute % 2  # a steady trickle on chip 1
        if minute % 10 == 0:
            ecc[2] += 5  # intermittent bursts on chip 2
        _feed(f, ecc)
    x = f.features()
    m, e = FEATURES.index("ecc_minutes120"), FEATURES.index("ecc_episodes120")
    assert x[0, m] == x[0, e] == 1 / 120  # one minute, one episode
    assert x[1, m] == 0.5 and x[1, e] == 0.5
    assert x[2, m] == x[2, e] == 12 / 120


def test_thermal_step_and_bursts_show_as_rise_and_hot_minutes() -> None:
    f = PrecursorFeatures(3)
    ecc = np.zeros(3)
    for minute in range(200):
        temp = np.full(3, 65.0)  # (65 - 35) / 300 W: R = 0.1
        if minute >= 190:
            temp[1] = 35.0 + 30.0 * 1.3  # a step: R +30%
        if minute >= 140 and minute % 15 < 2:
            temp[2] = 35.0 + 30.0 * 1.3  # 2-minute episodes every 15 minutes
        _feed(f, ecc, temp)
    x = f.features()
    r, hot = FEATURES.index("r_rise"), FEATURES.index("r_hot60")
    assert abs(x[0, r]) < 1e-9 and x[0, hot] == 0.0
    # One 300 W sample a minute: the rise is shrunk by the noise of the difference of the
    # 5-minute mean and the baseline's (90 steady minutes, 30-119 ago).
    margin = NOISE_Z * SENSOR_NOISE_C * np.sqrt(1 / 5 + 1 / 90) / 300.0 / 0.1
    assert abs(x[1, r] - (0.3 - margin)) < 1e-6 and x[1, hot] == 10 / 60
    assert x[2, hot] == 8 / 60


def test_running_window_sums_equal_the_windows() -> None:
    n = 40
    rng = np.random.default_rng(1)
    f = PrecursorFeatures(n)
    ecc, link = np.zeros(n), np.zeros(n)
    since, minutes = np.zeros(n), np.zeros(n)  # minutes with errors since each chip's history began
    for m in range(400):
        for _ in range(6):
            ecc += rng.poisson(0.05 if m < 300 else 0.05 + 0.01 * (np.arange(n) % 5), n)
            link += rng.poisson(0.02, n)
            power = np.where(rng.random(n) < 0.02, 100.0, 300.0) + rng.standard_normal(n)
            temp = 60 + rng.standard_normal(n) * 0.3 + (m > 200) * np.arange(n) * 0.1
            f.sample({"temperature_c": temp, "power_w": power, "mem_ecc_corrected": ecc.copy(),
                      "link_errors": link.copy()})
        f.close_minute()
        since += f.ecc[f.row] > 0
        minutes += 1
        if m == 250:
            mask = np.arange(n) % 7 == 0
            f.reset(mask)
            since[mask], minutes[mask] = 0, 0
        if m % 20 == 0 or m > 380:
            assert np.allclose(f.features(), _features_from_the_ring(f, since, minutes))


def _features_from_the_ring(f: PrecursorFeatures, since: np.ndarray, minutes: np.ndarray) -> np.ndarray:
    """The features summed directly over the history windows (what the running sums keep)."""
    idx = [(f.row - a) % HISTORY_MIN for a in range(121)]
    e, r, s = f.ecc[idx], f.r[idx], f.steady[idx]
    k5, kb, st60 = s[:5].sum(0), s[30:120].sum(0), s[:60].sum(0)
    have = (kb >= 20) & (k5 >= 2)
    base = np.where(have, r[30:120].sum(0) / np.maximum(kb, 1), 1.0)
    d = r[:5].sum(0) / np.maximum(k5, 1) - base
    iv = f.iv[idx]
    var = iv[:5].sum(0) / np.maximum(k5, 1) ** 2 + np.where(have, iv[30:120].sum(0) / np.maximum(kb, 1) ** 2, 0.0)
    margin = NOISE_Z * SENSOR_NOISE_C * np.sqrt(var)
    d = np.sign(d) * np.maximum(np.abs(d) - margin, 0.0)
    rise = np.clip(np.where(have, d / base, 0.0), -1.0, 2.0)
    hot = np.where(st60 >= 5, f.hot[idx][:60].sum(0) / np.maximum(st60, 1), 0.0)
    m120 = (e[:120] > 0).sum(0)
    before = minutes - 120
    share = np.where(before >= BASELINE_MIN, np.clip((since - m120) / np.maximum(before, 1), 0, 1), 0.0)
    excess = np.maximum(m120 - share * 120 - EXCESS_Z * np.sqrt(share * 120 * (1 - share)), 0.0) / 120
    return np.stack([np.log1p(e[:10].sum(0)), (e[:120] > 0).sum(0) / 120, f.begins[idx][:120].sum(0) / 120,
                     rise, hot, (f.link[idx][:30] > 0).sum(0) / 30, excess], axis=1)


def test_idle_and_changing_load_with_sparse_noisy_samples_is_neither_rise_nor_hot() -> None:
    """Job churn: chips go idle (~9 C over ambient, where 0.3 C of sensor noise is 3%)
    and busy again, sampled twice a minute; temperature follows power (the twin's model)."""
    n = 200
    rng = np.random.default_rng(3)
    f = PrecursorFeatures(n)
    power = np.full(n, 100.0)
    temp = 35.0 + 0.09 * power
    worst = np.zeros((n, len(FEATURES)))
    top = 0.0
    for m in range(400):
        if m % 7 == 0:  # jobs start and stop on random chips
            idx = rng.choice(n, 30, replace=False)
            power[idx] = rng.choice([100.0, 180.0, 300.0, 440.0], 30)
        for _ in range(2):
            temp += (35.0 + 0.09 * power - temp) * (1 - np.exp(-30.0 / 30.0))
            busy = power > 100.0
            f.sample({"temperature_c": temp + rng.standard_normal(n) * 0.3,
                      "power_w": power + busy * rng.standard_normal(n) * 3.0,
                      "mem_ecc_corrected": np.zeros(n), "link_errors": np.zeros(n)})
        f.close_minute()
        x = f.features()
        worst = np.maximum(worst, np.abs(x))
        top = max(top, float(DEFAULT_MODEL.proba(x).max()))
    r, hot = FEATURES.index("r_rise"), FEATURES.index("r_hot60")
    # 80,000 chip-minutes: at most a rare noise tail (a minute in an hour), never an alarm.
    assert worst[:, r].max() < 0.01 and worst[:, hot].max() <= 1 / 50
    assert top < DEFAULT_MODEL.threshold


def test_fault_free_pod_with_job_churn_raises_no_predicted_failure() -> None:
    """Through the control plane: jobs of 1-16 chips start and stop on a fault-free pod for
    hours (chips heat and cool); no predicted-failure alarm, no chip drained or isolated."""
    from podfleet.compose import build
    from podfleet.engine.timeline import Timeline
    from podfleet.fabric.sim import FaultRates, SimFabric
    from podfleet.health.scan import HealthConfig
    from podfleet.store.memory import MemoryStore

    parts = build(MemoryStore(), Timeline(seed=11), telemetry_interval_s=30.0, schedule_interval_s=30.0,
                  health_config=HealthConfig(interval_s=30.0))
    plane = parts.plane
    plane.load()
    view = plane.create_cluster({"name": "pod", "type": "trn2-ultraserver"}, actor="t")
    fabric = plane.clusters[view["id"]].fabric
    assert isinstance(fabric, SimFabric)
    fabric.set_fault_rates(FaultRates.none())
    rng = np.random.default_rng(11)
    running: list[str] = []
    end = plane.tl.now + 6 * 3600.0
    while plane.tl.now < end:
        if running and rng.random() < 0.5:
            plane.jobs.stop(running.pop(int(rng.integers(len(running)))), actor="t")
        else:
            chips = int(rng.choice([1, 2, 4, 8, 16]))
            body = {"model": "small", "chips": chips, "steps": 10**7, "checkpoint_interval": 0,
                    "parallelism": {"tp": 1, "pp": 1, "dp": chips}}
            running.append(plane.jobs.submit("pod", body, actor="t")["id"])
        plane.tl.run(plane.tl.now + float(rng.uniform(120.0, 900.0)))
    rules = {a["rule"] for a in parts.health.list_alerts(view["id"])}
    assert "predicted-failure" not in rules
    assert [str(s) for s in fabric.chip_states()].count("healthy") == fabric.n_chips
    assert sum(plane.jobs.describe(j)["state"] == "RUNNING" for j in running) >= 1


def test_load_steps_and_dips_with_thermal_lag_raise_no_alarm() -> None:
    """Busy -> idle -> busy (a live rank move) and short power dips within minutes (a
    step's communication phase), with the twin's first-order thermal lag: temperature
    lags power, which is not a rise of the thermal resistance."""
    from podfleet.health.predict import THERMAL_TAU_S, Predictor

    n, dt, r_c_per_w, amb = 4, 2.0, 0.09, 35.0
    rng = np.random.default_rng(3)
    pred = Predictor(n)
    temp = np.full(n, amb + 100.0 * r_c_per_w)
    a = 1.0 - np.exp(-dt / THERMAL_TAU_S)
    alarms = []
    rises, hots = [], []
    for i in range(int(4 * 3600 / dt)):
        t = i * dt
        busy = t < 5400 or t >= 7200  # idle for 30 minutes in the middle
        power = np.full(n, 425.0 if busy else 100.0)
        if busy and t % 92.0 < 8.0:  # a short dip every step
            power[:] = 150.0
        power[1] = 100.0 if (t // 600) % 2 else 425.0  # chip 1 toggles every 10 minutes
        temp += (amb + power * r_c_per_w - temp) * a
        m = {"temperature_c": temp + rng.standard_normal(n) * 0.3, "power_w": power + rng.standard_normal(n) * 3.0,
             "mem_ecc_corrected": np.zeros(n), "link_errors": np.zeros(n)}
        alarms += pred.observe(t, m)
        rises.append(pred.last_x[:, FEATURES.index("r_rise")].copy())
        hots.append(pred.last_x[:, FEATURES.index("r_hot60")].copy())
    assert alarms == []
    assert np.abs(np.array(rises)).max() < 0.005
    assert np.array(hots).max() < 0.1
