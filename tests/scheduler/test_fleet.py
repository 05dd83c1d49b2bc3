"""Gangs across pods (``scheduler.fleet``): whole pods or the same sub-block on each pod,
packed in the fewest network blocks, Kueue-style required/preferred levels, queued
reasons per level, rank order that keeps TP groups inside a pod (issue 28)."""

from __future__ import annotations

import numpy as np
import pytest

from podfleet.errors import InvalidInputError
from podfleet.hardware.catalog import fleet_topology
from podfleet.planner.adapter import PlannerAdapter
from podfleet.scheduler import DecisionKind, JobRequest, Scheduler


def _sched(pods: int = 16, per_block: int = 8, **kw: object) -> Scheduler:
    return Scheduler(fleet_topology("trn2-ultraserver", pods, per_block), **kw)  # type: ignore[arg-type]


def _bind(s: Scheduler, job: JobRequest):
    assert s.submit(job).kind is DecisionKind.PENDING
    ds = {d.job_id: d for d in s.schedule()}
    return ds.get(job.job_id)


def test_a_gang_larger_than_a_pod_takes_whole_pods_in_one_block() -> None:
    s = _sched()
    d = _bind(s, JobRequest("a", 512, tp=8))
    p = d.placement
    assert len(p.pods) == 8 and set(p.blocks) == {0} and p.shape == (8, 4, 4, 4)
    assert len(set(p.chips)) == 512
    # Rank order: pod by pod, so each TP group of 8 ranks sits on one pod.
    pods = np.asarray(p.chips) // 64
    assert (pods.reshape(-1, 8) == pods.reshape(-1, 8)[:, :1]).all()
    assert list(dict.fromkeys(pods.tolist())) == list(p.pods)


def test_pods_gives_the_same_sub_block_on_each_pod() -> None:
    s = _sched()
    d = _bind(s, JobRequest("a", 256, pods=8))
    assert d.placement.shape[0] == 8 and np.prod(d.placement.shape[1:]) == 32
    assert all(sum(1 for c in d.placement.chips if c // 64 == p) == 32 for p in d.placement.pods)


def test_best_fit_block_keeps_an_empty_block_whole() -> None:
    s = _sched(pods=16, per_block=8)
    _bind(s, JobRequest("small", 64))  # block 0 loses a pod
    d = _bind(s, JobRequest("b", 256))  # 4 pods: block 0 (7 free) fits best, block 1 stays whole
    assert set(d.placement.blocks) == {0}
    d2 = _bind(s, JobRequest("c", 512))
    assert set(d2.placement.blocks) == {1}


def test_required_block_waits_and_says_which_level_is_short() -> None:
    s = _sched(pods=8, per_block=4)
    _bind(s, JobRequest("half", 256, pods=8))  # 32 chips used on every pod
    assert _bind(s, JobRequest("req", 256, topology_required="block")) is None
    reason = s.reason("req")
    assert "topology_required block" in reason and "best block" in reason, reason
    # Preferred (default): crosses the spine rather than wait, with the fewest crossings.
    d = _bind(s, JobRequest("pref", 256))
    assert d is not None and set(d.placement.blocks) == {0, 1}
    assert "spine crossings" in d.placement.reason


def test_required_pod_and_impossible_splits_are_rejected_at_submit() -> None:
    s = _sched(pods=8, per_block=4)
    for job, words in [(JobRequest("p", 128, topology_required="pod"), "topology_required pod"),
                       (JobRequest("big", 1024), "the fleet has 512"),
                       (JobRequest("odd", 100), "equal block"),
                       (JobRequest("blk", 512, topology_required="block"), "a network block has 4 pods")]:
        d = s.submit(job)
        assert d.kind is DecisionKind.REJECTED and words in str(d.status), (job.job_id, str(d.status))


def test_spares_per_pod_keep_whole_pods_out_and_the_reason_says_so() -> None:
    s = _sched(pods=8, per_block=8, spares=8)  # one spare per pod
    d = s.submit(JobRequest("a", 512))
    assert d.kind is DecisionKind.REJECTED and "spares" in str(d.status)
    assert _bind(s, JobRequest("b", 256)) is not None  # 8 pods x 32: spares stay out of it


def test_a_lost_rank_elsewhere_and_finish_release_every_pod() -> None:
    s = _sched(pods=4, per_block=4)
    d = _bind(s, JobRequest("a", 128, pods=4))
    chips = list(d.placement.chips)
    free_other = next(c for c in range(256) if c not in chips and c // 64 == 2)
    chips[0] = free_other  # a rank moved to another pod by recovery
    s.hold("a", chips)
    s.finish("a")
    assert all((p.owner == -1).all() for p in s.cluster.pods)


def test_auto_parallelism_plans_the_placement_with_tp_inside_pods() -> None:
    s = _sched(pods=8, per_block=8, planner=PlannerAdapter())
    d = _bind(s, JobRequest("a", 512, parallelism="auto", model="llama3-70b"))
    plan = d.placement.plan.best.plan
    assert plan.tp * plan.pp * plan.dp == 512 and 64 % plan.tp == 0


def test_bad_levels_are_named() -> None:
    with pytest.raises(InvalidInputError, match="topology_required"):
        JobRequest("a", 64, topology_required="rack")
    with pytest.raises(InvalidInputError, match="pods"):
        JobRequest("a", 100, pods=3)


def test_first_fit_baseline_crosses_more_blocks() -> None:
    ours, base = _sched(pods=16, per_block=4), _sched(pods=16, per_block=4, fleet_first_fit=True)
    for s in (ours, base):
        _bind(s, JobRequest("x", 64))  # pod 0 busy
        _bind(s, JobRequest("y", 256))
    assert len(set(ours.allocations()["y"].blocks)) == 1
    assert len(set(base.allocations()["y"].blocks)) == 2
