"""Step time: pipeline bubble, overlap, link state, slow chips; validation and calibration."""

from __future__ import annotations

import pytest

from podfleet import perf
from podfleet.errors import InfeasibleError, InvalidInputError, UnknownNameError
from podfleet.hardware.catalog import get_topology
from podfleet.perf import calibration, validation
from podfleet.perf.efficiency import A100_FIT, TRN2_NCCOM_LINK
from podfleet.perf.flops import Recompute
from podfleet.perf.models import get_model
from podfleet.perf.plan import Plan
from podfleet.perf.step import estimate

GPT175 = get_model("megatron-175b")
DGX8 = get_topology("dgx-a100:8")


def _est(plan: Plan):
    return estimate(GPT175, plan, DGX8, dtype="fp16")


def test_pipeline_bubble_1f1b_and_interleaved() -> None:
    e1 = _est(Plan(8, 8, 1, 1, 64, Recompute.selective, 0, 1))
    e3 = _est(Plan(8, 8, 1, 1, 64, Recompute.selective, 0, 3))
    # bubble / steady state = (p-1)/m for 1F1B and (p-1)/(v*m) interleaved (up to the
    # logits on the last stage, a few percent of a stage).
    steady1 = e1.step_time_s - e1.bubble_s - e1.optimizer_s
    assert e1.bubble_s / steady1 == pytest.approx(7 / 64, rel=0.05)
    steady3 = e3.step_time_s - e3.bubble_s - e3.optimizer_s
    assert e3.bubble_s / steady3 == pytest.approx(7 / (3 * 64), rel=0.05)
    assert e3.step_time_s < e1.step_time_s
    assert e1.memory.activations_bytes < e3.memory.activations_bytes


def test_recompute_costs_time_and_saves_memory() -> None:
    by = {rc: _est(Plan(8, 8, 1, 1, 64, rc, 0, 3)) for rc in (Recompute.none, Recompute.selective, Recompute.full)}
    assert by[Recompute.none].step_time_s < by[Recompute.selective].step_time_s < by[Recompute.full].step_time_s
    assert by[Recompute.none].memory.total_bytes > by[Recompute.selective].memory.total_bytes > by[Recompute.full].memory.total_bytes
    assert by[Recompute.full].hfu > by[Recompute.full].mfu


def test_dp_reduction_overlaps_backward() -> None:
    model = get_model("megatron-1.7b")
    topo = get_topology("dgx-a100:4")
    e = estimate(model, Plan(1, 1, 32, 4, 4, Recompute.full, 0), topo)
    assert e.dp_comm_exposed_s == 0.0  # hidden behind the last micro-batch's backward
    tiny = estimate(model, Plan(1, 1, 32, 1, 1, Recompute.none, 0), topo, precision=perf.memory.Precision(2, 64, 12))
    assert tiny.dp_comm_exposed_s > 0.0  # a huge gradient buffer no longer hides


def test_slow_chip_and_down_links_slow_the_step() -> None:
    plan = Plan(16, 1, 4, 1, 64, Recompute.selective, 1)
    base = perf.step_time_s("llama3-70b", 64, plan=plan, global_batch=256)
    assert perf.step_time_s("llama3-70b", 64, plan=plan, slow_chip_factor=1.3) > base * 1.1
    topo = get_topology("trn2-ultraserver")
    x_links = [lk.index for lk in topo.links if lk.axis == 0][:4]
    slower = perf.step_time_s("llama3-70b", 64, plan=plan, down_links=x_links)
    assert slower > base
    degraded = perf.step_time_s("llama3-70b", 64, plan=plan, degraded_links={x_links[0]: 0.9})
    assert base < degraded < slower


def test_public_step_time_defaults_and_errors() -> None:
    t = perf.step_time_s("llama3-8b", 16, "trn2-node")
    assert t > 0
    est = perf.estimate_step("debug", 1)
    assert est.fits and 0 < est.mfu < 1
    # 256 chips of a 64-chip type become a fleet of 4.
    assert perf.step_time_s("llama3-70b", 256) < perf.step_time_s("llama3-70b", 64) / 2
    with pytest.raises(UnknownNameError, match="llama3-8b"):
        perf.step_time_s("gpt-5", 8)
    with pytest.raises(InfeasibleError, match="fits no plan on 2"):
        perf.step_time_s("llama3-405b", 2)
    with pytest.raises(InvalidInputError, match=r"tp\*pp\*dp \(4\*1\*4 = 16\) != chips \(64\)"):
        perf.step_time_s("llama3-8b", 64, plan=Plan(4, 1, 4, 1, 8))


def test_block_shape_maps_links() -> None:
    topo = get_topology("trn2-ultraserver")
    plan = Plan(4, 1, 4, 1, 16, Recompute.selective, 1)
    base = perf.step_time_s("llama3-8b", 16, plan=plan, block_shape=(4, 4, 1))
    x_link = next(lk.index for lk in topo.links if lk.src == 0 and lk.axis == 0)
    assert perf.step_time_s("llama3-8b", 16, plan=plan, block_shape=(4, 4, 1), down_links=[x_link]) > base
    outside = next(lk.index for lk in topo.links if lk.src == 48 and lk.axis == 0)
    assert perf.step_time_s("llama3-8b", 16, plan=plan, block_shape=(4, 4, 1), down_links=[outside]) == base


def test_validation_within_goal() -> None:
    rows = validation.table()
    assert len(rows) == 12
    s = validation.summary(rows)
    assert s["median_abs_err"] <= 0.10
    assert s["max_abs_err"] <= 0.25
    assert all(r["fits"] for r in rows)


def test_leave_one_out_within_goal_and_beats_baseline() -> None:
    rows = calibration.leave_one_out()
    assert [r["row"] for r in rows] == [r.name for r in validation.ROWS]
    s = calibration.loo_summary(rows)
    assert s["loo_median_abs_err"] <= 0.05
    assert s["loo_max_abs_err"] <= 0.12
    assert abs(s["loo_mean_signed_err"]) <= 0.02
    assert abs(s["loo_mean_signed_err"]) < abs(s["baseline_loo_mean_signed_err"])
    assert max(s["loo_too_fast"], s["rows"] - s["loo_too_fast"]) < 2 / 3 * s["rows"]
    assert s["loo_median_abs_err"] < s["baseline_loo_median_abs_err"]
    assert s["loo_max_abs_err"] < s["baseline_loo_max_abs_err"]
    # Held out, the rows score worse than in sample (a check that the refits really differ).
    assert s["loo_median_abs_err"] >= s["in_sample_median_abs_err"]


def test_baseline_is_flops_over_fitted_throughput() -> None:
    row = validation.ROWS[0]
    t = calibration.baseline_step_s(row, 0.5)
    assert calibration.baseline_step_s(row, 0.25) == pytest.approx(2 * t)
    assert calibration.calibrate_baseline() in calibration.BASELINE_GRID


def test_grad_reduce_after_flush_is_exposed() -> None:
    model = get_model("megatron-1.7b")
    topo = get_topology("dgx-a100:4")
    plan = Plan(1, 1, 32, 4, 4, Recompute.full, 0)
    hidden = estimate(model, plan, topo)
    exposed = estimate(model, plan, topo, overlap_grad_reduce=False)
    assert hidden.dp_comm_exposed_s == 0.0
    assert exposed.dp_comm_exposed_s > 0.0
    assert exposed.step_time_s == pytest.approx(hidden.step_time_s + exposed.dp_comm_exposed_s)


def test_scatter_gather_p2p_all_gathers_without_sequence_parallelism() -> None:
    no_sp = _est(Plan(8, 8, 1, 1, 64, Recompute.selective, 0, 1, sequence_parallel=False))
    sp = _est(Plan(8, 8, 1, 1, 64, Recompute.selective, 0, 1, sequence_parallel=True))
    # Without SP the receiver all-gathers the stage output over NVLink after each send.
    assert no_sp.pp_comm_s > sp.pp_comm_s > 0.0


def test_stored_calibration_is_the_fit() -> None:
    fit = calibration.calibrate()
    assert fit.eff == A100_FIT
    assert calibration.trn2_link_from_nccom() == pytest.approx(TRN2_NCCOM_LINK, abs=0.001)
