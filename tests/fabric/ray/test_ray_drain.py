"""A drained chip's rank on the Ray fabric moves alone (``runner.evict``, ``rankmove.py``):
its actor is ended as ``drain`` (never logged as a fault), the move is eligible as a lost
rank's is, and the new chip is a spare, else a free chip, else none (a drained chip is
isolated, so never its own). No Ray needed: a fake Ray module records the kills; the real
two-raylet move through the control plane is test_ray_rank_move.py's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from podfleet.fabric.base import ChipState, FabricEvent, WorkerGroupSpec
from podfleet.fabric.ray import rankmove
from podfleet.fabric.ray.faultlog import FaultLog
from podfleet.fabric.ray.jobs import ExitCause, RankRecord, RayJob, RayState, RunState
from podfleet.fabric.ray.nodes import NodeMap
from podfleet.fabric.ray.runner import JobRunner
from tests.fabric.ray.test_nodes import rec

NODES = [rec("a" * 56, "10.0.0.1", 2.0, head=True), rec("b" * 56, "10.0.0.2", 2.0)]  # chips 0, 1 | 2, 3


class FakeRay:
    def __init__(self) -> None:
        self.killed: list[Any] = []

    def kill(self, actor: Any, no_restart: bool = True) -> None:
        self.killed.append(actor)


def _runner(states: list[ChipState], spares: tuple[int, ...] = ()) -> tuple[Any, RayJob]:
    state = RayState(FakeRay())
    job = RayJob(WorkerGroupSpec("j", (0, 1), "debug", 10), "pack", "/tmp/j", None, state=RunState.RUNNING)
    job.ranks = [RankRecord(0, 0, actor="actor-0"), RankRecord(1, 1, actor="actor-1")]
    state.jobs["j"] = job
    state.chip_job.update({0: ("j", 0), 1: ("j", 1)})
    nodes = NodeMap(NODES, "CPU", 1.0, len(states))
    nodes.apply(NODES)  # a fresh view of the cluster
    fab = SimpleNamespace(spares=spares, nodes=nodes, unreachable=None, gcs=None,
                          chip_states=lambda: list(states))
    runner = JobRunner.__new__(JobRunner)
    runner.state, runner.f = state, fab
    return runner, job


def test_a_drained_chips_rank_is_ended_as_a_drain_and_moves_like_a_lost_one() -> None:
    runner, job = _runner([ChipState.HEALTHY, ChipState.ISOLATED, ChipState.HEALTHY, ChipState.HEALTHY])
    runner.evict(1)
    assert runner.state.ray.killed == ["actor-1"] and job.ranks[1].killed_by == "drain"
    runner.evict(1)  # once: a second drain (or the plane's kill_worker) changes nothing
    assert runner.state.ray.killed == ["actor-1"]
    runner.evict(2)  # no rank there
    assert runner.state.ray.killed == ["actor-1"]
    job.state = RunState.RECOVERING  # another rank moving: ended all the same (the gang then relaunches)
    runner.evict(0)
    assert runner.state.ray.killed == ["actor-1", "actor-0"] and job.ranks[0].killed_by == "drain"
    job.state, job.ranks[0].killed_by = RunState.RUNNING, None
    lost = job.ranks[1]
    JobRunner.settle(lost, None, "actor died: killed by ray.kill")
    assert lost.cause is ExitCause.INFRA
    assert rankmove.eligible(job, lost, "/tmp/j/rendezvous.json")
    assert rankmove.choose_chip(runner, job, 1) == ("free-chip", 2)  # its own chip is drained (isolated)
    ev = FabricEvent("worker-exited", 1.0, chip=1, job_id="j",
                     detail={"rank": 1, "exit_code": None, "killed_by": "drain", "error": "actor died"})
    assert FaultLog().observe(ev) is None  # a drain is no worker fault


def test_the_new_chip_is_a_spare_then_a_free_chip_and_never_a_held_or_lost_one() -> None:
    states = [ChipState.HEALTHY, ChipState.ISOLATED, ChipState.HEALTHY, ChipState.HEALTHY]
    runner, job = _runner(states, spares=(3,))
    assert rankmove.choose_chip(runner, job, 1) == ("spare", 3)
    runner.state.chip_job[3] = ("other", 0)  # the spare runs another job's rank
    runner.state.chip_job[2] = ("j", 1)  # held by this job (a chip a rank left earlier)
    why = rankmove.choose_chip(runner, job, 1)
    assert why == "chip 1 is isolated", why  # no chip passes its check: the move falls back to a relaunch
    del runner.state.chip_job[2]
    runner.f.nodes.apply([NODES[0], {**NODES[1], "Alive": False}])  # chips 2 and 3's node is lost
    assert rankmove.choose_chip(runner, job, 1) == "chip 1 is isolated"
    states[1] = ChipState.HEALTHY
    runner.state.chip_job.pop(1)
    assert rankmove.choose_chip(runner, job, 1) == ("own-chip", 1)  # a killed (not drained) rank
