"""Memory per chip: Korthikanti's activation formulas and monotonicity properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podfleet.perf.flops import Recompute
from podfleet.perf.memory import (
    MIXED,
    activation_bytes_per_layer,
    in_flight_micro_batches,
    memory_per_chip,
)
from podfleet.perf.models import ModelSpec, get_model
from podfleet.perf.plan import Plan


def test_korthikanti_activation_formulas() -> None:
    m = get_model("megatron-175b")
    s, b, h, a, t = m.seq_len, 1, m.hidden, m.heads, 8
    assert activation_bytes_per_layer(m, b, 1, False, "none") == pytest.approx(s * b * h * (34 + 5 * a * s / h))
    assert activation_bytes_per_layer(m, b, t, False, "none") == pytest.approx(
        s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    )
    assert activation_bytes_per_layer(m, b, t, True, "selective") == pytest.approx(34 * s * b * h / t)
    assert activation_bytes_per_layer(m, b, 1, False, "full") == 2 * s * b * h


def test_in_flight_micro_batches() -> None:
    assert in_flight_micro_batches(Plan(1, 1, 1, 1, 8)) == 1
    assert in_flight_micro_batches(Plan(1, 4, 1, 1, 8)) == 4
    assert in_flight_micro_batches(Plan(1, 4, 1, 1, 2)) == 2
    assert in_flight_micro_batches(Plan(1, 4, 1, 1, 8, interleave=2)) == pytest.approx(4 * (1 + 3 / 8))


def test_model_states_by_zero_stage() -> None:
    m = get_model("llama3-8b")
    base = memory_per_chip(m, Plan(1, 1, 8, 1, 1, zero_stage=0))
    p = m.params
    assert base.params_bytes == pytest.approx(p * MIXED.param_bytes)
    assert base.optimizer_bytes == pytest.approx(p * 12)
    z1 = memory_per_chip(m, Plan(1, 1, 8, 1, 1, zero_stage=1))
    assert z1.optimizer_bytes == pytest.approx(p * 12 / 8)
    z2 = memory_per_chip(m, Plan(1, 1, 8, 1, 1, zero_stage=2))
    assert z2.grads_bytes == pytest.approx(p * 2 / 8)
    z3 = memory_per_chip(m, Plan(1, 1, 8, 1, 1, zero_stage=3))
    assert z3.params_bytes < base.params_bytes / 4


dims = st.tuples(
    st.integers(1, 64), st.sampled_from([512, 1024, 2048, 4096]), st.sampled_from([8, 16, 32])
)


@given(dims, st.integers(1, 32), st.sampled_from(list(Recompute)), st.integers(0, 3))
def test_memory_grows_with_model_size(d, extra_layers, rc, zero) -> None:
    layers, hidden, heads = d
    small = ModelSpec("s", layers, hidden, heads, vocab=32000)
    big = ModelSpec("b", layers + extra_layers, hidden, heads, vocab=32000)
    wider = ModelSpec("w", layers, hidden * 2, heads, vocab=32000)
    plan = Plan(1, 1, 4, 1, 4, rc, zero)
    m0 = memory_per_chip(small, plan).total_bytes
    assert memory_per_chip(big, plan).total_bytes > m0
    assert memory_per_chip(wider, plan).total_bytes > m0


@given(dims, st.sampled_from([2, 4, 8]), st.sampled_from(list(Recompute)))
def test_memory_falls_with_sharding(d, k, rc) -> None:
    layers, hidden, heads = d
    m = ModelSpec("m", layers * 8, hidden, heads, vocab=32000)
    mem = [memory_per_chip(m, Plan(1, 1, 8, 1, 4, rc, z)).total_bytes for z in range(4)]
    assert mem == sorted(mem, reverse=True) and mem[0] > mem[3]
    if heads % k == 0:
        assert memory_per_chip(m, Plan(k, 1, 1, 1, 4, rc, 0)).total_bytes < memory_per_chip(
            m, Plan(1, 1, 1, 1, 4, rc, 0)
        ).total_bytes
    assert memory_per_chip(m, Plan(1, k, 1, 1, 64, rc, 0)).total_bytes < memory_per_chip(
        m, Plan(1, 1, 1, 1, 64, rc, 0)
    ).total_bytes
    by_rc = [memory_per_chip(m, Plan(1, 1, 1, 2, 4, r, 0)).total_bytes for r in Recompute]
    assert by_rc[0] >= by_rc[1] > by_rc[2]
