"""The framework's fleet-wide summaries (issue 28's placement speed): filters asked for
many pods at once agree with the pod-by-pod answer, summaries kept by usable-chip pattern
and the per-size pod counts match a fresh computation after churn, and a gang that no
single block holds spans the fewest blocks (preferred level)."""

from __future__ import annotations

import numpy as np

from podfleet.fabric.base import ChipState
from podfleet.hardware.catalog import fleet_topology
from podfleet.scheduler import DecisionKind, JobRequest, Scheduler
from podfleet.scheduler.extension import PodsFilterPlugin
from podfleet.scheduler.reservations import Reservation
from podfleet.scheduler.state import FREE


def _sched(pods: int = 16, per_block: int = 8, spares: int = 0) -> Scheduler:
    return Scheduler(fleet_topology("trn2-ultraserver", pods, per_block), spares=spares)


def _churn(s: Scheduler, rounds: int, seed: int = 3) -> None:
    rng = np.random.default_rng(seed)
    running: list[str] = []
    for i in range(rounds):
        if running and rng.random() < 0.4:
            s.finish(running.pop(int(rng.integers(len(running)))))
        if i % 5 == 0:
            s.set_chip_state(int(rng.integers(s.cluster.n_chips)),
                             ChipState.FAILED if rng.random() < 0.7 else ChipState.HEALTHY)
        size = int(rng.choice([8, 16, 32, 64, 128, 256]))
        s.submit(JobRequest(f"j{i}", size, tp=min(8, size), hbm_bytes_per_chip=int(rng.integers(0, 2)) * 2**30))
        running += [d.job_id for d in s.schedule() if d.kind is DecisionKind.BIND]


def test_filters_answer_for_many_pods_as_they_do_pod_by_pod() -> None:
    s = _sched(pods=8, spares=8)
    _churn(s, 30)
    # Reserved chips the probe may not take (another queue's window, open now).
    s.set_reservation(Reservation("r", s.choose_reservation_chips(16, start_s=0.0, end_s=1e9), 0.0, 1e9, "other"))
    fw, cl = s.framework, s.cluster
    pods = np.arange(len(cl.pods))
    job = JobRequest("probe", 16, hbm_bytes_per_chip=2**30)
    batch = [f for f in fw.filters if isinstance(f, PodsFilterPlugin)]
    assert {f.name for f in batch} == {"health_gate", "spare_guard", "hbm_fit", "reservation_window"}
    for f in batch:
        for j in (None, job):
            s_many, many = f.filter_pods({}, j, cl, pods)
            for p in pods.tolist():
                s_one, one = f.filter({}, j, cl.pods[p])
                assert s_one.code is s_many.code and (many[p] == one).all(), (f.name, p)


def test_summaries_kept_by_pattern_match_a_fresh_computation_after_churn() -> None:
    s = _sched(pods=16, spares=16)
    _churn(s, 120)
    fw, cl = s.framework, s.cluster
    free, shape_free, free_count = fw.summaries()
    size_free, size_count = fw.size_summary()
    idx = cl.blocks
    a = cl.arrays
    usable = (a.owner == FREE) & (a.nominated == FREE) & a.healthy & ~a.spare
    fresh = idx.free_many(usable)
    assert (free == fresh).all()
    assert (shape_free == idx.shape_free(fresh)).all()
    assert (free_count == usable.sum(axis=1)).all()
    assert (size_free == idx.size_free(idx.shape_free(fresh))).all()
    assert (size_count == size_free.sum(axis=0)).all()
    assert fw.pods_with_free() == int((usable.sum(axis=1) > 0).sum())


def test_a_gang_no_block_holds_spans_the_fewest_blocks() -> None:
    s = _sched(pods=12, per_block=4)
    # Block 0 keeps 1 pod free, block 1 keeps 3, block 2 keeps 2 (whole-pod jobs elsewhere).
    for i, p in enumerate([0, 1, 2, 4, 8, 9]):
        assert s.submit(JobRequest(f"x{i}", 64)).kind is DecisionKind.PENDING
        d = next(d for d in s.schedule() if d.job_id == f"x{i}")
        s.hold(f"x{i}", [p * 64 + c for c in range(64)])
        del d
    s.submit(JobRequest("gang", 320))  # 5 pods: no block has 5 free
    d = next(d for d in s.schedule() if d.job_id == "gang")
    # Fewest blocks: block 1's three pods and block 2's two, not block 0's one.
    assert sorted(set(d.placement.blocks)) == [1, 2], d.placement
    assert d.placement.reason.endswith("2 spine crossings"), d.placement.reason
