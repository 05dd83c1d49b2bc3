"""The fault model: rates from the Llama 3 table, arrivals within statistical tolerance,
precursors, determinism."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podfleet.engine import Timeline
from podfleet.errors import InvalidInputError, UnknownNameError
from podfleet.fabric.base import ChipState, WorkerGroupSpec
from podfleet.fabric.sim import FaultKind, FaultRates, PrecursorParams, SimFabric
from podfleet.fabric.sim.faults import LLAMA3_GPU_HOURS
from podfleet.hardware.faults import LINK_FAULTS

CHI2_DF7_P001 = 24.32  # chi-square critical value, 7 degrees of freedom, p = 0.001


def test_default_rates_derive_from_llama3_table() -> None:
    r = FaultRates()
    assert LLAMA3_GPU_HOURS == 21_233_664
    assert r.chip_failure == pytest.approx(148 / 21_233_664)
    assert r.hbm_uncorrectable == pytest.approx(72 / 21_233_664)
    assert r.link_down == pytest.approx(35 / 21_233_664)
    assert r.sram_uncorrectable == pytest.approx(19 / 21_233_664)
    # 16,384 chips see the modelled kinds 311 times in 54 days, as in the report.
    interrupting = r.total_per_chip_hour() - r.hbm_corrected_burst
    assert 16_384 * interrupting == pytest.approx(311 / (54 * 24), rel=1e-9)


def test_rate_validation() -> None:
    with pytest.raises(UnknownNameError, match="chip-failure"):
        FaultRates.from_mapping({"gremlins": 1.0})
    with pytest.raises(InvalidInputError):
        FaultRates(chip_failure=-1.0)
    with pytest.raises(InvalidInputError):
        FaultRates().scaled(-2)
    with pytest.raises(InvalidInputError):
        PrecursorParams(hbm_share=1.5)


@given(scale=st.floats(0, 1e4), kind=st.sampled_from(list(FaultKind)), value=st.floats(0, 1))
def test_rates_scale_and_override(scale: float, kind: FaultKind, value: float) -> None:
    r = FaultRates.from_mapping({kind.value: value})
    assert r.per_chip_hour(kind) == value
    s = r.scaled(scale)
    for k in FaultKind:
        assert s.per_chip_hour(k) == pytest.approx(r.per_chip_hour(k) * scale)


def test_observed_rates_within_poisson_tolerance() -> None:
    """64 chips x 20,000 h at 45x the Llama 3 rates: each kind's count per exposed
    chip-hour matches its rate (4-sigma per kind, chi-square over all kinds)."""
    tl = Timeline(2024)
    rates = FaultRates().scaled(45.0)
    fab = SimFabric("trn2-ultraserver", tl, fault_rates=rates, telemetry_interval_s=3600.0,
                    auto_repair_s=4 * 3600.0, precursors=PrecursorParams(hbm_share=0.0, chip_thermal_share=0.0))
    hours = 20_000.0
    tl.run(hours * 3600.0)
    fab.account()
    exposed_h = fab.exposed_chip_s / 3600.0
    assert 0.99 * 64 * hours < exposed_h < 64 * hours
    chi2 = 0.0
    for k in FaultKind:
        # Link kinds are drawn over the whole fabric's chip-hours, chip kinds over exposed ones.
        expo = 64 * hours if k in LINK_FAULTS else exposed_h
        expected = rates.per_chip_hour(k) * expo
        observed = fab.faults_by_kind.get(k.value, 0)
        assert abs(observed - expected) < 4 * math.sqrt(expected) + 1, (k, observed, expected)
        chi2 += (observed - expected) ** 2 / expected
    assert chi2 < CHI2_DF7_P001


def test_precursor_shares_are_respected() -> None:
    tl = Timeline(5)
    rates = FaultRates.from_mapping({"hbm-uncorrectable": 2e-3}, base=FaultRates.none())
    SimFabric("trn2-ultraserver", tl, fault_rates=rates, telemetry_interval_s=3600.0,
                    auto_repair_s=3600.0, precursors=PrecursorParams(hbm_share=0.7))
    tl.run(5000 * 3600.0)
    starts = tl.log.filter("precursor-start")
    faults = tl.log.filter("fault")
    n = len(faults)
    assert n > 300
    share = len(starts) / n
    sd = math.sqrt(0.7 * 0.3 / n)
    assert abs(share - 0.7) < 4 * sd + 0.01


def test_hbm_precursor_ramps_corrected_ecc_before_the_uncorrectable(pod: SimFabric, tl: Timeline, events) -> None:
    pod.inject_fault("hbm-uncorrectable", chip=9, precursor=True, lead_s=3 * 3600.0)
    assert tl.log.filter("precursor-start")[0]["chip"] == 9
    assert events == []  # the precursor is ground truth: subscribers only see telemetry
    counts = []
    for _ in range(6):
        tl.run(tl.now + 1800.0)
        counts.append(int(pod.chip_metrics()["mem_ecc_corrected"][9]))
        assert pod.chip_state(9) == ChipState.HEALTHY
    increments = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert counts[-1] > 20 and increments[-1] > increments[0]  # the rate rises
    assert pod.chip_metrics()["mem_ecc_corrected"][10] == 0
    tl.run(tl.now + 10.0)
    assert pod.chip_state(9) == ChipState.FAILED
    assert pod.chip_metrics()["mem_ecc_uncorrected"][9] == 1
    assert tl.log.filter("fault")[-1]["precursor"] is True


def test_isolating_during_precursor_averts_the_failure(pod: SimFabric, tl: Timeline, events) -> None:
    pod.inject_fault("chip-failure", chip=11, precursor=True, lead_s=7200.0)
    pod.launch(WorkerGroupSpec("job-p", (11, 12), "debug", 10**8))
    tl.run(3600.0)
    hot, cool = pod.chip_metrics()["temperature_c"][[11, 12]]
    assert hot > cool + 2  # the temperature trend a predictor can learn
    pod.set_chip_state(11, ChipState.ISOLATED, "predicted failure")
    tl.run(8000.0)
    assert pod.chip_state(11) == ChipState.ISOLATED
    assert tl.log.filter("fault")[-1]["averted"] is True
    assert not [e for e in events if e.kind == "chip-failed"]


def test_fault_arrivals_never_touch_failed_chips() -> None:
    tl = Timeline(9)
    fab = SimFabric("trn2-node", tl, fault_rates=FaultRates().scaled(1e4), telemetry_interval_s=600.0)
    for c in range(16):
        if c != 4:
            fab.set_chip_state(c, ChipState.FAILED, "test")
    tl.run(200 * 3600.0)
    chips = {r["chip"] for r in tl.log.filter("fault") if "chip" in r}
    assert chips <= {4}
