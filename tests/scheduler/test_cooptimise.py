from __future__ import annotations

import pytest

from podfleet.errors import InvalidInputError
from podfleet.hardware.catalog import get_topology
from podfleet.planner.adapter import PlannerAdapter
from podfleet.scheduler import DecisionKind, JobRequest, PluginConfig, Scheduler
from podfleet.scheduler.framework import DEFAULT_PLUGINS, FrameworkConfig
from tests.scheduler.fake_planner import FakePlan, FakePlanner

POD = get_topology("trn2-ultraserver")


def test_auto_parallelism_picks_block_and_plan_together() -> None:
    s = Scheduler(POD, planner=FakePlanner())
    s.submit(JobRequest("auto", 16, parallelism="auto", model="m"))
    [d] = s.schedule()
    assert d.kind is DecisionKind.BIND
    assert d.placement.shape == (2, 2, 4)  # the planner's fastest shape, not the comm-cost one
    assert d.placement.plan == FakePlan(1.0, (2, 2, 4))


def test_auto_without_a_feasible_plan_falls_back_to_comm_cost() -> None:
    s = Scheduler(POD, planner=FakePlanner())
    s.submit(JobRequest("auto", 16, parallelism="auto", model="too-big"))
    [d] = s.schedule()
    assert d.placement.shape == (4, 4, 1) and d.placement.plan is None


def test_without_a_planner_the_shape_is_chosen_by_communication_cost() -> None:
    s = Scheduler(POD)
    s.submit(JobRequest("auto", 16, parallelism="auto", model="llama3-8b"))
    [d] = s.schedule()
    assert d.kind is DecisionKind.BIND and d.placement.plan is None


def test_the_planner_comes_through_the_port_not_plugin_config() -> None:
    plugins = tuple(PluginConfig(p.name, p.weight, {"planner_module": "x"}) if p.name == "topology_block" else p
                    for p in DEFAULT_PLUGINS)
    with pytest.raises(InvalidInputError, match="takes no arguments"):
        Scheduler(POD, config=FrameworkConfig(plugins))


def test_real_planner_through_its_adapter() -> None:
    s = Scheduler(POD, planner=PlannerAdapter())
    s.submit(JobRequest("auto", 16, parallelism="auto", model="llama3-8b"))
    [d] = s.schedule()
    assert d.placement.plan is not None
    assert d.placement.plan.step_time_s > 0


def test_a_compressed_job_is_planned_with_its_compression() -> None:
    """The plan chosen with the block is estimated with the job's gradient compression,
    so its step time is the one the twin runs the job at (``perf.compression``)."""
    from podfleet.control.scheduling import plan_fields

    def placed(comp: str) -> dict:
        s = Scheduler(POD, planner=PlannerAdapter())
        s.submit(JobRequest("auto", 16, parallelism="auto", model="llama3-8b", grad_compression=comp))
        [d] = s.schedule()
        assert d.kind is DecisionKind.BIND
        out = plan_fields(d.placement.plan)
        assert out is not None
        return out.to_dict()

    plain, lossless = placed("none"), placed("lossless")
    assert "grad_compression" not in plain
    assert lossless["grad_compression"] == "lossless"
    # Without compression the job's best block and plan are the fastest: compression
    # cannot make the uncompressed figure better, and lossless costs this model time.
    assert lossless["uncompressed_step_time_s"] >= plain["step_time_s"] * (1 - 1e-9)
    assert lossless["step_time_s"] > plain["step_time_s"]
