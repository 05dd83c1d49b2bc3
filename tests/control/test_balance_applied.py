"""Rebalancing through the control plane changes the twin's work only when the fabric applies it."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from podfleet.benchmarks import bench_dir


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    path = bench_dir() / "balance.py"
    spec = importlib.util.spec_from_file_location("podfleet_bench_balance_test", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_an_ignored_split_does_not_improve_tokens_per_s(bench: ModuleType) -> None:
    applied = bench.scenario(True, True, 200.0, 90.0)
    ignored = bench.scenario(True, False, 200.0, 90.0)
    off = bench.scenario(True, True, 200.0, 90.0, balance_interval_s=1e9)  # no balancer steps at all
    assert applied["throttled"] and ignored["throttled"] and off["throttled"]
    # The balancer decided and told both fabrics; only the one that applied it got faster.
    assert applied["work_split"]["applied"] and ignored["work_split"]["applied"]
    assert ignored["actions"] and off["actions"] == []
    assert ignored["tokens_per_s"] <= off["tokens_per_s"] * 1.01
    assert applied["tokens_per_s"] > 1.2 * ignored["tokens_per_s"]
    assert applied["balance_degree"] > ignored["balance_degree"]


def test_split_reaches_the_whole_sequence_ceiling(bench: ModuleType) -> None:
    """8 sequences per rank caps the balance degree near 0.89; 32 per rank lets it pass 0.97."""
    for model, per_rank in (("llama3-8b", 8), (bench.FINE_MODEL, 32)):
        got = bench.scenario(True, True, 200.0, 90.0, model=model)
        assert got["per_rank"] == per_rank
        assert got["balance_degree"] >= bench.ceiling(got["clocks"], per_rank) - 0.01
