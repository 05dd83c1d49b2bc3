"""Planner: matches exhaustive search, never returns infeasible plans, scales with chips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podfleet.errors import InfeasibleError, InvalidInputError, UnknownNameError
from podfleet.hardware.specs import get_chip
from podfleet.perf.models import ModelSpec
from podfleet.planner import MODELS, PlanResult, custom_model, get_model, plan


@pytest.mark.parametrize(
    ("model", "chips", "topology", "batch"),
    [
        ("debug", 8, "trn2-node", 64),
        ("llama3-8b", 16, "trn2-node", 32),
        ("llama3-8b", 8, "dgx-a100", 16),
        ("megatron-1.7b", 16, "dgx-a100:2", 64),
        ("llama3-70b", 32, "trn2-ultraserver", 32),
    ],
)
def test_best_equals_exhaustive(model: str, chips: int, topology: str, batch: int) -> None:
    fast = plan(model, chips, topology=topology, global_batch=batch)
    full = plan(model, chips, topology=topology, global_batch=batch, exhaustive=True, top=0)
    assert fast.best.plan == full.best.plan
    assert fast.best.step_time_s == full.best.step_time_s
    assert fast.evaluated < full.evaluated
    # The exhaustive list really is everything that fits: no faster plan was skipped.
    assert min(c.step_time_s for c in full.candidates) == fast.best.step_time_s


def _assert_fitting(result: PlanResult) -> None:
    hbm = get_chip(result.chip_type).hbm_bytes
    for c in result.candidates:
        assert c.fits and c.estimate.memory.total_bytes <= hbm
    times = [c.step_time_s for c in result.candidates]
    assert times == sorted(times)


@settings(max_examples=25)
@given(
    layers=st.sampled_from([4, 8, 16, 32, 48]),
    hidden=st.sampled_from([1024, 2048, 4096, 8192]),
    heads=st.sampled_from([8, 16, 32]),
    chips=st.sampled_from([1, 2, 4, 8, 16]),
)
def test_infeasible_never_returned_as_fitting(layers: int, hidden: int, heads: int, chips: int) -> None:
    spec = ModelSpec("h", layers, hidden, heads, vocab=32000, seq_len=4096)
    try:
        result = plan(spec, chips, topology="trn2-node", global_batch=64)
    except InfeasibleError as exc:
        assert "does not fit" in str(exc)
        return
    _assert_fitting(result)


@settings(max_examples=12)
@given(
    model=st.sampled_from(["llama3-8b", "megatron-18.4b", "megatron-1.7b", "llama3-70b"]),
    topology=st.sampled_from(["trn2-ultraserver", "dgx-a100"]),
    k=st.integers(0, 3),
)
def test_more_chips_never_slower(model: str, topology: str, k: int) -> None:
    # Models whose step is compute-bound; a toy model whose step is microseconds of
    # latency can get slower on more chips (more ring steps), and the model says so.
    n = 8 * 2**k
    batch = 256
    try:
        fewer = plan(model, n, topology=topology, global_batch=batch).best.step_time_s
    except InfeasibleError:
        return
    more = plan(model, 2 * n, topology=topology, global_batch=batch).best.step_time_s
    assert more <= fewer


def test_block_shape_puts_tp_on_fast_links() -> None:
    r = plan("llama3-70b", 32, block_shape=(4, 4, 2), tp=4, pp=1, global_batch=64)
    assert r.best.plan.tp == 4
    r2 = plan("llama3-70b", 32, block_shape=(2, 4, 4), tp=4, pp=1, global_batch=64)
    # tp=4 on a 4x4x2 block is a full x ring; on a 2x4x4 block it spans x and y lines.
    assert r.best.estimate.tp_comm_s < r2.best.estimate.tp_comm_s
    with pytest.raises(InvalidInputError, match=r"block_shape 4x4x4 \(64 chips\) != chips \(32\)"):
        plan("llama3-70b", 32, block_shape=(4, 4, 4))


def test_explicit_plan_is_evaluated_not_searched() -> None:
    r = plan("llama3-8b", 16, topology="trn2-node", tp=4, pp=2, dp=2, micro_batch=1,
             recompute="full", zero_stage=1, interleave=1, global_batch=32)
    assert len(r.candidates) == 1
    p = r.best.plan
    assert (p.tp, p.pp, p.dp, p.micro_batch, str(p.recompute), p.num_micro_batches) == (4, 2, 2, 1, "full", 16)


def test_bad_input_names_the_numbers() -> None:
    with pytest.raises(InvalidInputError, match=r"tp\*pp\*dp \(4\*2\*2 = 16\) != chips \(64\)"):
        plan("llama3-70b", 64, tp=4, pp=2, dp=2)
    with pytest.raises(UnknownNameError, match="valid: debug, gpt3-175b"):
        plan("llama9", 64)
    with pytest.raises(UnknownNameError, match="valid: a100"):
        plan("debug", 8, chip_type="tpu-v5")
    with pytest.raises(InvalidInputError, match=r"tp \(5\) must divide the attention heads \(64\)"):
        plan("llama3-70b", 40, tp=5, topology="dgx-a100:5")
    with pytest.raises(InfeasibleError, match=r"405.9B params.*4 trn2 chips \(384 GiB HBM\)"):
        plan("llama3-405b", 4)
    with pytest.raises(InvalidInputError, match=r"chips \(7\) cannot form a block"):
        plan("debug", 7)
    with pytest.raises(InvalidInputError, match="does not match topology"):
        plan("debug", 8, chip_type="a100", topology="trn2-node")


def test_registry_and_result_payload() -> None:
    assert {"debug", "llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b"} <= set(MODELS)
    assert get_model("debug").params < 10_000_000
    r = plan(custom_model(4, 512, 8, 1000), 8, topology="dgx-a100")
    d = r.to_dict()
    for key in ("tp", "pp", "dp", "micro_batch", "num_micro_batches", "recompute", "step_time_s",
                "tokens_per_s", "tflops_per_chip", "mfu", "memory_per_chip_bytes", "fits",
                "candidates", "rejected"):
        assert key in d
    assert d["tp"] * d["pp"] * d["dp"] == 8
    assert (r.step_time_s, r.mfu, r.memory_per_chip_bytes) == (
        d["step_time_s"], d["mfu"], d["memory_per_chip_bytes"]
    )
    assert d["tokens_per_s"] == pytest.approx(d["global_batch"] * 2048 / d["step_time_s"])
