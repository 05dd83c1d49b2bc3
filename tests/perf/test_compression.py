"""Gradient compression in the cost model: parsing, volumes, and what it does to a step."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podfleet.errors import InvalidInputError
from podfleet.hardware.catalog import get_topology
from podfleet.perf.compression import (
    MEASURED,
    NONE,
    CodecFigures,
    GradCompression,
    effect,
    parse_grad_compression,
    powersgd_ratio,
)
from podfleet.perf.models import MODELS, get_model
from podfleet.perf.plan import Plan
from podfleet.perf.step import StepEstimate, estimate


@pytest.mark.parametrize(("text", "want"), [
    (None, NONE), ("none", NONE), ("bf16", GradCompression("bf16")), ("PowerSGD:4", GradCompression("powersgd", 4)),
    ("lossless", GradCompression("lossless")),
])
def test_parse(text: str | None, want: GradCompression) -> None:
    assert parse_grad_compression(text) == want


@pytest.mark.parametrize(("text", "says"), [
    ("zip", "not one of none, bf16, powersgd:RANK, lossless"), ("powersgd", "needs a rank"),
    ("powersgd:0", "rank must be 1-64"), ("powersgd:x", "needs a rank"), ("bf16:2", "takes no argument"),
])
def test_bad_modes_say_what_is_valid(text: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        parse_grad_compression(text)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(MODELS)), st.integers(1, 32))
def test_powersgd_ratio_is_a_fraction_growing_with_rank(name: str, rank: int) -> None:
    m = get_model(name)
    r = powersgd_ratio(m, rank)
    assert 0 < r <= 1
    assert powersgd_ratio(m, rank + 1) >= r


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 512), st.floats(0.05, 1.0))
def test_lossless_volume_is_n_c_over_two(dp: int, c: float) -> None:
    codec = CodecFigures(c, 1e8, 1e8)
    fx = effect(GradCompression("lossless"), get_model("debug"), grad_bytes_per_param=4, local_params=1e6,
                dp=dp, chip_flops=1e12, hbm_bytes_per_s=1e12, codec=codec)
    assert fx.allgather and fx.volume_ratio == pytest.approx(dp * c / 2)
    assert fx.codec_s > 0


def test_bf16_halves_fp32_and_leaves_bf16_alone() -> None:
    m = get_model("debug")
    kw = {"local_params": 1e6, "dp": 8, "chip_flops": 1e12, "hbm_bytes_per_s": 1e12}
    assert effect(GradCompression("bf16"), m, grad_bytes_per_param=4, **kw).volume_ratio == 0.5
    assert effect(GradCompression("bf16"), m, grad_bytes_per_param=2, **kw).volume_ratio == 1.0


def _exposed_dp_plan() -> Plan:
    # Data parallel over 64 chips, ZeRO 0: one all-reduce of every gradient.
    return Plan(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=1, zero_stage=0)


def test_compression_changes_the_exposed_reduction() -> None:
    plan, topo, model = _exposed_dp_plan(), get_topology("trn2-ultraserver"), get_model("llama3-8b")

    def est(mode: str) -> StepEstimate:  # reduced after the flush: all of it shows
        return estimate(model, plan, topo, overlap_grad_reduce=False, compression=parse_grad_compression(mode))

    base, psgd, lossless = est("none"), est("powersgd:4"), est("lossless")
    assert base.grad_codec_s == 0
    assert psgd.dp_comm_exposed_s < base.dp_comm_exposed_s
    assert psgd.grad_codec_s > 0
    # 64 ranks all-gather their compressed buckets: 64 * c / 2 times the all-reduce's bytes.
    assert lossless.dp_comm_exposed_s > base.dp_comm_exposed_s
    assert lossless.step_time_s > base.step_time_s
    assert MEASURED.size_ratio < 1


def test_the_twin_step_follows_the_mode() -> None:
    from podfleet.engine.timeline import Timeline
    from podfleet.fabric.base import WorkerGroupSpec
    from podfleet.fabric.sim import SimFabric
    from podfleet.fabric.sim.perfstep import perf_breakdown

    fab = SimFabric("trn2-ultraserver", Timeline(seed=0))
    chips = tuple(range(64))
    par = {"plan": {"tp": 1, "pp": 1, "dp": 64, "micro_batch": 1, "num_micro_batches": 1, "zero_stage": 0}}
    plain = perf_breakdown(WorkerGroupSpec("job-a", chips, "llama3-8b", 10, options=par), fab)
    lossless = perf_breakdown(WorkerGroupSpec("job-b", chips, "llama3-8b", 10,
                                              options={**par, "grad_compression": "lossless"}), fab)
    assert plain is not None and lossless is not None
    assert lossless[2] > plain[2]
