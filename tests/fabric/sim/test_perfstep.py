"""The twin's step time comes from the performance model, with throttling and links applied."""

from __future__ import annotations

import pytest

from podfleet.engine import Timeline
from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.sim import SimFabric
from podfleet.fabric.sim.perfstep import healthy_step, perf_breakdown
from podfleet.fabric.sim.workload import step_breakdown
from podfleet.perf import default_global_batch, default_plan, estimate_step
from podfleet.perf.layout import job_topology, resolve_topology
from podfleet.perf.models import get_model


def _fab() -> SimFabric:
    return SimFabric("trn2-ultraserver", Timeline(3))


def test_healthy_step_equals_perf_estimate() -> None:
    fab = _fab()
    spec = WorkerGroupSpec("j", tuple(range(64)), "llama3-8b", 10)
    model = get_model("llama3-8b")
    topo = job_topology(resolve_topology(fab.topology, 64), 64, None)
    plan = default_plan(model, 64, default_global_batch(model, 64), topo)
    est = estimate_step(model, 64, fab.topology, plan=plan)
    step = step_breakdown(spec, fab)[2]
    assert step == pytest.approx(est.step_time_s, rel=1e-9)
    h = healthy_step(spec, fab)
    assert h is not None and h.tokens_per_step == pytest.approx(est.tokens_per_s * est.step_time_s)


def test_explicit_parallelism_is_used() -> None:
    fab = _fab()
    a = WorkerGroupSpec("a", tuple(range(64)), "llama3-8b", 10, options={"parallelism": {"tp": 1, "pp": 1, "dp": 64}})
    b = WorkerGroupSpec("b", tuple(range(64)), "llama3-8b", 10, options={"parallelism": {"tp": 8, "pp": 1, "dp": 8}})
    assert perf_breakdown(a, fab) != perf_breakdown(b, fab)


def test_down_link_slows_only_the_communication() -> None:
    fab = _fab()
    spec = WorkerGroupSpec("j", tuple(range(64)), "llama3-8b", 10, options={"parallelism": {"tp": 8, "pp": 1, "dp": 8}})
    base = perf_breakdown(spec, fab)
    assert base is not None
    fab.inject_fault("link-down", link=0)
    after_link = perf_breakdown(spec, fab)
    assert after_link is not None and after_link[1] > base[1] and after_link[0] == base[0]


def test_unknown_model_falls_back_to_simple_model() -> None:
    fab = _fab()
    spec = WorkerGroupSpec("j", tuple(range(16)), "mystery-1b", 10)
    assert perf_breakdown(spec, fab) is None
    assert step_breakdown(spec, fab)[2] > 0


def test_only_the_groups_that_span_pods_slow_down() -> None:
    """A 64-chip job on the first pod of two: a tensor-parallel group moved whole to the
    other pod keeps its all-reduces on NeuronLink (only pipeline and gradient traffic
    cross the network); one rank moved alone drags its group's all-reduces across."""
    from podfleet.hardware.catalog import get_topology

    fab = SimFabric(get_topology("trn2-ultraserver:2"), Timeline(3))
    opts = {"parallelism": {"tp": 8, "pp": 4, "dp": 2}}
    home = tuple(range(64))
    group_out = tuple(range(64, 72)) + home[8:]
    rank_out = (64, *home[1:])
    steps = [perf_breakdown(WorkerGroupSpec("j", c, "llama3-70b", 10, options=opts), fab) for c in
             (home, group_out, rank_out)]
    assert all(s is not None for s in steps)
    healthy, group, rank = (s[2] for s in steps if s is not None)
    assert healthy < group < 1.05 * healthy
    assert rank > 1.5 * healthy
