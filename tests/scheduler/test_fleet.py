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


def test_the_twin_prices_a_gang_behind_two_spines_at_the_fleet_level() -> None:
    from podfleet.fabric.sim.perfstep import _spanning

    topo = fleet_topology("trn2-ultraserver", 16, 4)
    assert _spanning(tuple(range(256)), topo, 8, 32) == (1.0, 1.0, 1.0)  # pods 0-3: one block
    f_tp, f_pp, f_dp = _spanning(tuple(range(128, 384)), topo, 8, 32)  # pods 2-5: two blocks
    fleet, block = topo.level("fleet"), topo.level("block")
    assert f_tp == 1.0 and f_pp == f_dp == fleet.bw_per_chip_bytes_per_s / block.bw_per_chip_bytes_per_s < 1


def test_the_catalog_gives_each_network_level_with_its_source() -> None:
    topo = fleet_topology("trn2-ultraserver", 64, 16)
    levels = {lv.name: lv for lv in topo.levels}
    assert list(levels) == ["pod", "block", "fleet"]
    assert levels["pod"].bw_per_chip_bytes_per_s > levels["block"].bw_per_chip_bytes_per_s \
        > levels["fleet"].bw_per_chip_bytes_per_s
    assert levels["block"].bw_per_chip_bytes_per_s == 25e9 and levels["block"].latency_s == 15e-6
    assert all(lv.source for lv in topo.levels) and "assumption" in levels["fleet"].source
    assert topo.n_blocks == 4 and list(topo.block_pods(3)) == list(range(48, 64))
    with pytest.raises(InvalidInputError, match="pods_per_block"):
        fleet_topology("trn2-ultraserver", 8, 9)


# --- preemption across pods ----------------------------------------------------------------------


def _full_fleet(s: Scheduler) -> None:
    """Fill 8 pods (two blocks of 4): two 128-chip gangs in block 0 (priority 1 and 5), one
    256-chip gang of priority 1 in block 1; all preemptible, started at t=0."""
    for job in (JobRequest("lo-a", 128, priority=1), JobRequest("mid", 128, priority=5),
                JobRequest("lo-b", 256, priority=1)):
        assert s.submit(job, now_s=0).kind is DecisionKind.PENDING
    assert {d.job_id for d in s.schedule(now_s=0) if d.kind is DecisionKind.BIND} == {"lo-a", "mid", "lo-b"}


def test_a_gang_across_pods_preempts_the_cheapest_block_of_pods_and_binds_after_the_checkpoints() -> None:
    s = _sched(pods=8, per_block=4)
    _full_fleet(s)
    assert s.submit(JobRequest("high", 256, priority=9), now_s=2000).kind is DecisionKind.PENDING
    d = {x.job_id: x for x in s.schedule(now_s=2000)}["high"]
    # Block 1 holds one priority-1 gang; block 0 would cost the priority-5 one too.
    assert d.kind is DecisionKind.PREEMPT and d.victims == ("lo-b",), d
    assert s.describe("lo-b")["phase"] == "checkpointing" and s.describe("mid")["phase"] == "running"
    # Nominated: nobody else takes those pods while the victim saves its state.
    assert s.submit(JobRequest("other", 64, priority=1), now_s=2001).kind is DecisionKind.PENDING
    assert not [x for x in s.schedule(now_s=2001) if x.kind is DecisionKind.BIND]
    bound = s.victims_checkpointed("high", {"lo-b": 700}, now_s=2002)
    assert bound.kind is DecisionKind.BIND and set(bound.placement.blocks) == {1}, bound
    assert set(bound.placement.pods) == {4, 5, 6, 7} and len(set(bound.placement.chips)) == 256
    assert "after preemption" in bound.placement.reason
    lo = s.describe("lo-b")
    assert lo["phase"] == "pending" and lo["resume_step"] == 700 and lo["preemptions"] == 1


def test_gang_preemption_keeps_the_one_pod_victim_rules() -> None:
    s = _sched(pods=8, per_block=4)
    _full_fleet(s)
    # Too soon (min_run_s), not a higher priority, or a class that never preempts: it waits.
    for job, now in ((JobRequest("early", 256, priority=9), 10.0), (JobRequest("peer", 256, priority=1), 2000.0),
                     (JobRequest("meek", 256, priority=9, may_preempt=False), 2000.0)):
        assert s.submit(job, now_s=now).kind is DecisionKind.PENDING
        assert not [x for x in s.schedule(now_s=now) if x.job_id == job.job_id], job
        s.finish(job.job_id, now_s=now)
    assert "never preempts" in s.reason("meek")
    # A job that may not be preempted is never a victim: only the block it is not in is taken.
    s2 = _sched(pods=8, per_block=4)
    for job in (JobRequest("keep", 128, priority=1, preemptible=False), JobRequest("x", 128, priority=1),
                JobRequest("y", 256, priority=1)):
        s2.submit(job, now_s=0)
    s2.schedule(now_s=0)
    s2.submit(JobRequest("big", 512, priority=9), now_s=2000)  # needs both blocks: one holds "keep"
    assert not [x for x in s2.schedule(now_s=2000) if x.job_id == "big"]
    assert "would not free pods enough" in s2.reason("big"), s2.reason("big")
    s2.submit(JobRequest("half", 256, priority=9), now_s=2000)
    d = {x.job_id: x for x in s2.schedule(now_s=2000)}["half"]
    assert d.kind is DecisionKind.PREEMPT and d.victims == ("y",), d


def test_a_nominated_gang_goes_back_to_the_queue_when_a_chip_fails_meanwhile() -> None:
    from podfleet.fabric.base import ChipState

    s = _sched(pods=8, per_block=4)
    _full_fleet(s)
    s.submit(JobRequest("high", 256, priority=9), now_s=2000)
    s.schedule(now_s=2000)
    s.set_chip_state(4 * 64 + 3, ChipState.FAILED)  # on pod 4, one of the nominated pods
    d = s.victims_checkpointed("high", {"lo-b": 700}, now_s=2001)
    assert d.kind is DecisionKind.PENDING and "requeued" in d.status.reason, d
    assert s.describe("high")["phase"] == "pending"
    assert not (s.cluster.arrays.nominated == s.jobs["high"].slot).any()
