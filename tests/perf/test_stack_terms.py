"""The stack terms of the step model (NeuronCore ranks, the network tier's own
efficiency, the per-micro-batch cost, the stack's gradient-reduction default) and the
Trainium fit: property tests, and the fit re-derived from reference/validation_trn.md."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podfleet import perf
from podfleet.hardware.catalog import get_topology
from podfleet.perf import calibration, fitted, validation, validation_trn
from podfleet.perf.collectives import (
    Level,
    LevelKind,
    all_reduce_s,
    group_levels,
    reduce_scatter_s,
    scale_network,
    with_core_ranks,
)
from podfleet.perf.efficiency import A100_FIT, TRN1_FIT, efficiency_for
from podfleet.perf.flops import Recompute
from podfleet.perf.layout import job_topology, resolve_topology
from podfleet.perf.models import get_model
from podfleet.perf.plan import Plan
from podfleet.perf.step import estimate

LLAMA7 = get_model("llama2-7b")
TRN1 = get_topology("trn1-node:4")

levels_st = st.lists(
    st.builds(Level, st.sampled_from(list(LevelKind)), st.integers(2, 16), st.floats(1e9, 1e12),
              st.floats(0.0, 2e-5)),
    min_size=1, max_size=3,
).map(tuple)


@given(levels_st, st.floats(1e3, 1e10), st.integers(1, 8))
def test_core_ranks_only_add_time(levels: tuple[Level, ...], nbytes: float, c: int) -> None:
    base = reduce_scatter_s(levels, nbytes)
    assert with_core_ranks(levels, 1) == levels
    more = reduce_scatter_s(with_core_ranks(levels, c), nbytes)
    assert more >= base
    assert reduce_scatter_s(with_core_ranks(levels, c + 1), nbytes) >= more


@given(st.integers(2, 16), st.integers(1, 8), st.floats(1e6, 1e10))
def test_core_ranks_move_tc_minus_one_over_tc(t: int, c: int, nbytes: float) -> None:
    lv = (Level(LevelKind.line, t, 1e11, 0.0),)
    ratio = reduce_scatter_s(with_core_ranks(lv, c), nbytes) / reduce_scatter_s(lv, nbytes)
    assert ratio == pytest.approx(((t * c - 1) / (t * c)) / ((t - 1) / t))


@given(st.floats(0.05, 1.0))
def test_network_scaling_touches_only_the_network_tier(factor: float) -> None:
    inside = group_levels(TRN1, range(4))  # one x ring of a node: no network level
    assert scale_network(inside, factor) == inside
    across = group_levels(TRN1, (0, 16, 32, 48))  # the same chip of four nodes: EFA only
    assert all(lv.network for lv in across)
    scaled = scale_network(across, factor)
    assert all_reduce_s(scaled, 1e8) >= all_reduce_s(across, 1e8)
    assert scale_network(across, 1.0) == across


def _trn_plan(pp: int, v: int, m: int) -> Plan:
    return Plan(4, pp, 16 // pp, 1, m, Recompute.selective, 1, v, True)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([4, 8, 16]), st.floats(0.0, 0.05))
def test_microbatch_cost_is_paid_per_micro_batch_chunk_and_bubble(pp: int, v: int, m: int, mb: float) -> None:
    v = 1 if pp == 1 else v
    plan = _trn_plan(pp, v, m)
    zero = estimate(LLAMA7, plan, TRN1, eff=replace(TRN1_FIT, microbatch_s=0.0))
    est = estimate(LLAMA7, plan, TRN1, eff=replace(TRN1_FIT, microbatch_s=mb))
    # m*v launches in the steady state, and (p-1) more in the bubble.
    assert est.step_time_s - zero.step_time_s == pytest.approx((m * v + (pp - 1)) * mb, abs=1e-9)
    assert est.microbatch_overhead_s == pytest.approx(m * v * mb)
    parts = est.to_dict()["breakdown_s"]
    assert isinstance(parts, dict)
    assert sum(parts.values()) == pytest.approx(est.step_time_s)


def test_trainium_rows_reduce_gradients_after_the_accumulation_loop() -> None:
    row = validation_trn.ROWS[0]
    plan, est = validation_trn.predict(row)
    topo = get_topology("trn1-node:16")
    assert est == estimate(LLAMA7, plan, topo, eff=efficiency_for("trn1"), overlap_grad_reduce=False)
    assert est.step_time_s > estimate(LLAMA7, plan, topo, eff=efficiency_for("trn1")).step_time_s


def test_tensor_parallel_collectives_run_over_neuroncores() -> None:
    plan = _trn_plan(1, 1, 16)
    two = estimate(LLAMA7, plan, TRN1)
    one = estimate(LLAMA7, plan, TRN1, eff=replace(TRN1_FIT, core_ranks=1))
    # A ring of 8 cores on 4 chips moves 7/8 of the data, 4 chips alone 3/4; and it has
    # 7 latency steps, not 3.
    assert (7 / 8) / (3 / 4) < two.tp_comm_s / one.tp_comm_s < 1.25


def test_trainium_fit_is_stored_and_uses_only_its_rows() -> None:
    assert len(validation_trn.ROWS) == 3
    assert [round(r.measured_s, 3) for r in validation_trn.ROWS] == [10.763, 12.747, 9.554]
    fit = calibration.calibrate_trn().eff
    assert (fit.matmul, fit.microbatch_s) == (TRN1_FIT.matmul, TRN1_FIT.microbatch_s)
    stored = fitted.FITS["trn1"]
    assert (stored["matmul"], stored["microbatch_s"]) == (fit.matmul, fit.microbatch_s)
    assert calibration.fits()["a100"] == {"matmul": A100_FIT.matmul, "hbm": A100_FIT.hbm, "link": A100_FIT.link}
    # Out-of-sample rows are other runs, never one of the fitting rows.
    key = [(r.model, r.tp, r.pp, r.dp, r.seq_per_s) for r in validation_trn.ROWS]
    assert not {(r.model, r.tp, r.pp, r.dp, r.seq_per_s) for r in validation_trn.OOS_ROWS} & set(key)
    assert not {r.name for r in validation.OOS_ROWS} & {r.name for r in validation.ROWS}


def test_trainium_leave_one_out_within_goal_and_beats_baseline() -> None:
    s = calibration.loo_summary(calibration.trn_leave_one_out())
    assert s["rows"] == 3
    assert s["loo_median_abs_err"] <= 0.05 and s["loo_max_abs_err"] <= 0.12
    assert s["loo_median_abs_err"] < s["baseline_loo_median_abs_err"]
    assert s["loo_max_abs_err"] < s["baseline_loo_max_abs_err"]
    assert abs(s["loo_mean_signed_err"]) < abs(s["baseline_loo_mean_signed_err"])
    assert s["loo_too_fast"] <= 1  # the old model had every Trainium row too fast


def test_narayanan_step_times_follow_their_eq3() -> None:
    # The derived s/iter of reference/validation.md's set 2, from the reported TFLOP/s.
    for name, gpus, batch, tflops, s in (("megatron-1.7b", 32, 512, 137, 3.53), ("megatron-18.4b", 256, 1024, 135, 9.40),
                                         ("megatron-145.6b", 1536, 2304, 148, 24.82),
                                         ("megatron-1008b", 3072, 3072, 163, 102.63)):
        assert validation.narayanan_step_s(name, gpus, batch, tflops) == pytest.approx(s, abs=0.011)


def test_out_of_sample_rows_are_scored_beside_the_baseline() -> None:
    for rows in (calibration.a100_out_of_sample(), calibration.trn_out_of_sample()):
        s = calibration.oos_summary(rows)
        assert s["rows"] == len(rows) >= 5
        assert s["median_abs_err"] < s["baseline_median_abs_err"]
        assert s["max_abs_err"] < s["baseline_max_abs_err"]


def test_default_plan_amortises_the_per_micro_batch_cost() -> None:
    model = get_model("debug")
    topo = job_topology(resolve_topology("trn2-ultraserver", 16), 16, None)
    gb = perf.default_global_batch(model, 16)
    plan = perf.default_plan(model, 16, gb, topo)
    one = replace(plan, micro_batch=1, num_micro_batches=gb // plan.dp)
    assert plan.micro_batch > 1 and plan.global_batch == gb
    assert estimate(model, plan, topo).step_time_s < estimate(model, one, topo).step_time_s
    assert estimate(model, plan, topo).fits
