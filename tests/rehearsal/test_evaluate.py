"""Prediction trained on some twin seeds and shapes, measured on others (held out); the
precursor generator; and the strict false-alarm count."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from podfleet.engine.timeline import Timeline
from podfleet.fabric.sim import FaultRates, SimFabric
from podfleet.fabric.sim.faults import PRECURSOR_SHAPES, PrecursorParams
from podfleet.fabric.sim.injector import draw_precursor
from podfleet.hardware.faults import FaultKind
from podfleet.health.predict import FEATURES, LogisticModel
from podfleet.rehearsal.evaluate import (
    HORIZON_S,
    SeedRun,
    fit_model,
    replay_alarms,
    run_seed,
    score,
)

KW: dict[str, Any] = {"pods": 2, "hours": 12.0, "rate_scale": 800.0, "interval_s": 10.0}


@pytest.fixture(scope="module")
def trained() -> tuple[LogisticModel, SeedRun]:
    model = fit_model([run_seed(1, shapes=("ramp", "step"), **KW)])
    return model, run_seed(55, model=model, **KW)


def test_prediction_on_held_out_seeds_and_shapes(trained: tuple[LogisticModel, SeedRun]) -> None:
    _model, run = trained
    held_out = score([run])
    assert held_out["failures_with_precursor"] >= 2
    assert held_out["recall"] >= 0.5
    assert held_out["recall_all_failures"] <= held_out["precursor_share"] + 0.25
    assert held_out["median_lead_s"] >= 600.0
    assert set(held_out["recall_by_shape"]) <= set(PRECURSOR_SHAPES)


def test_replaying_the_alarm_rule_gives_the_predictors_alarms(trained: tuple[LogisticModel, SeedRun]) -> None:
    model, run = trained
    assert [(c, t) for c, t, _ in replay_alarms(run, model)] == [(c, t) for c, t, _ in run.alarms]


def test_a_predictor_that_alarms_on_everything_has_a_high_false_alarm_ratio(
        trained: tuple[LogisticModel, SeedRun]) -> None:
    _model, run = trained
    everything = LogisticModel((40.0,) + (0.0,) * len(FEATURES), 0.5)
    alarms = replay_alarms(run, everything)
    assert {c for c, _, _ in alarms} == set(range(run.x.shape[1]))
    out = score([replace(run, alarms=alarms)])
    assert out["recall_all_failures"] > 0.5  # it "predicts" most failures...
    assert out["false_alarm_ratio"] > 0.8  # ...and nearly all of its alarms are false


def _run(alarms: list[tuple[int, float]], failures: list[tuple[int, float]], end_t: float) -> SeedRun:
    return SeedRun(0, np.zeros((0, 4, len(FEATURES)), np.float32), np.zeros((0, 4), bool),
                   [(c, t, 0.99) for c, t in alarms],
                   [{"chip": c, "t": t, "kind": "chip-failure", "precursor": True, "shape": "ramp"}
                    for c, t in failures], 4.0, end_t)


def test_the_strict_count_leaves_out_only_alarms_the_run_cannot_judge() -> None:
    h = HORIZON_S
    end = 3 * h
    run = _run(
        alarms=[
            (0, 1000.0),  # chip 0 fails within the horizon: true
            (1, 1000.0),  # chip 1 fails just after the horizon: false
            (2, 1000.0),  # another chip fails: false
            (3, 5000.0),  # chip 3 failed before the alarm: false
            (0, end - h),  # the horizon ends with the run: judged (false, no failure after)
            (1, end - h + 1.0),  # its horizon runs past the end: left out of both counts
        ],
        failures=[(0, 1000.0 + h), (1, 1000.0 + h + 1.0), (3, 4000.0)],
        end_t=end,
    )
    out = score([run])
    assert out["alarms"] == 5 and out["alarms_unjudged"] == 1
    assert out["false_alarms"] == 4 and out["false_alarm_ratio"] == 0.8


def test_precursor_shapes_and_magnitudes_are_drawn_per_fault() -> None:
    pp = PrecursorParams()
    for kind in (FaultKind.HBM_UNCORRECTABLE, FaultKind.CHIP_FAILURE):
        for seed in range(20):
            draws = [draw_precursor(kind, pp, np.random.default_rng(seed)) for _ in range(2)]
            assert draws[0] == draws[1]  # seeded: the same seed draws the same precursor
        rng = np.random.default_rng(7)
        drawn = [draw_precursor(kind, pp, rng) for _ in range(300)]
        assert {d.shape for d in drawn} == set(PRECURSOR_SHAPES)
        for shape in PRECURSOR_SHAPES:
            mags = [d.magnitude for d in drawn if d.shape == shape]
            assert len(set(mags)) == len(mags) > 50  # drawn per fault, not fixed
            if kind == FaultKind.HBM_UNCORRECTABLE:
                lo, hi = {"ramp": pp.hbm_growth_range, "step": pp.hbm_step_rate_per_s,
                          "bursts": pp.hbm_burst_errors}[shape]
            else:
                lo, hi = pp.chip_thermal_r_rise_range
            assert all(lo <= m <= hi for m in mags)
        rates = [d.burst_per_s * 3600.0 for d in drawn if d.shape == "bursts"]
        assert all(pp.burst_per_hour[0] <= r <= pp.burst_per_hour[1] for r in rates) and len(set(rates)) > 50
        assert all(d.burst_per_s == 0.0 for d in drawn if d.shape != "bursts")
    only = PrecursorParams(shapes=("bursts",))
    assert {draw_precursor(FaultKind.CHIP_FAILURE, only, np.random.default_rng(s)).shape for s in range(30)} == {"bursts"}


def _log(shapes: tuple[str, ...]) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    tl = Timeline(4)
    SimFabric("trn2-ultraserver:2", tl, fault_rates=FaultRates().scaled(5000.0), telemetry_interval_s=10.0,
              auto_repair_s=7200.0, precursors=PrecursorParams(shapes=shapes))
    tl.run(until=8 * 3600.0)
    faults = [(r["t"], r["fault"], r.get("chip"), r.get("link")) for r in tl.log.filter("fault")]
    return faults, tl.log.filter("precursor-start")


def test_shapes_change_the_precursors_but_not_the_fault_arrivals() -> None:
    faults_all, pre_all = _log(PRECURSOR_SHAPES)
    faults_bursts, pre_bursts = _log(("bursts",))
    assert faults_all == faults_bursts
    assert len(pre_all) >= 10 and {r["shape"] for r in pre_all} == set(PRECURSOR_SHAPES)
    assert {r["shape"] for r in pre_bursts} == {"bursts"}
    assert [r["lead_s"] for r in pre_all] == [r["lead_s"] for r in pre_bursts]  # leads: the twin's draws
    assert len({r["lead_s"] for r in pre_all}) == len(pre_all) and len({r["magnitude"] for r in pre_all}) > 5
