"""Queue, quotas, aging, preemption contract, pending reasons, plugins in the framework."""

from __future__ import annotations

import numpy as np
import pytest

from podfleet.errors import ConflictError, InvalidInputError, UnknownNameError
from podfleet.fabric.base import ChipState
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.specs import GiB
from podfleet.scheduler import (
    Code,
    DecisionKind,
    JobPhase,
    JobRequest,
    QueuePolicy,
    Scheduler,
    cluster_metrics,
    place,
)

POD = get_topology("trn2-ultraserver")


def bound(ds: list) -> dict[str, object]:
    return {d.job_id: d.placement for d in ds if d.kind is DecisionKind.BIND}


def test_gang_all_or_nothing_and_pending_reason() -> None:
    s = Scheduler(POD)
    s.submit(JobRequest("a", 32, tp=4))
    s.submit(JobRequest("b", 16, tp=4))
    got = bound(s.schedule())
    assert got["a"].shape == (4, 4, 2) and got["b"].shape == (4, 4, 1)
    s.submit(JobRequest("c", 32, tp=4))
    assert s.schedule() == []
    assert s.reason("c").startswith("Unschedulable: no free 4x4x2 block")
    assert "largest free block 4x4x1" in s.reason("c")
    d = s.describe("c")
    assert d["phase"] == "pending" and d["allocation"]["chips"] == [] and "4x4x2" in d["allocation"]["reason"]
    assert (s.cluster.pods[0].owner >= 0).sum() == 48  # nothing of c was held


@pytest.mark.parametrize(
    ("job", "spares", "quotas", "phrase"),
    [
        (JobRequest("x", 128), 0, {}, "a pod has 64"),
        (JobRequest("x", 64), 4, {}, "spare"),
        (JobRequest("x", 7), 0, {}, "no contiguous block of 7 chips"),
        (JobRequest("x", 8, shape=(8, 1, 1)), 0, {}, "does not fit"),
        (JobRequest("x", 4, hbm_bytes_per_chip=200 * GiB), 0, {}, "HBM"),
        (JobRequest("x", 32, team="t"), 0, {"t": 16}, "quota is 16"),
    ],
)
def test_unresolvable_is_rejected_at_submit(job: JobRequest, spares: int, quotas: dict, phrase: str) -> None:
    s = Scheduler(POD, spares=spares, quotas=quotas)
    d = s.submit(job)
    assert d.kind is DecisionKind.REJECTED
    assert d.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert phrase in d.status.reason
    assert s.jobs["x"].phase is JobPhase.REJECTED


def test_a_job_that_holds_its_chips_skips_the_fit_check() -> None:
    """A job reloaded after a restart resumes on the chips it holds: the check whether a
    fresh block of its size could ever be found (here none avoids the spares) is skipped."""
    s = Scheduler(POD, spares=4)
    d = s.submit(JobRequest("held", 64), check=False)
    assert d.kind is DecisionKind.PENDING and s.jobs["held"].phase is not JobPhase.REJECTED
    assert s.submit(JobRequest("fresh", 64)).kind is DecisionKind.REJECTED


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"chips": 0}, "chips"), ({"chips": 8, "tp": 3}, "tp"), ({"chips": 8, "comm": "tree"}, "comm"),
     ({"chips": 8, "shape": (2, 2, 1)}, "shape"), ({"chips": 8, "parallelism": "auto"}, "model")],
)
def test_bad_requests_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as e:
        JobRequest("j", **kwargs)
    assert e.value.field == field


def test_unhealthy_and_spare_chips_are_never_used() -> None:
    s = Scheduler(POD, spares=4)
    s.set_chip_state(20, ChipState.DEGRADED)
    for i in range(15):
        s.submit(JobRequest(f"j{i}", 4))
    s.schedule()
    used = {c for p in s.allocations().values() for c in p.chips}
    assert 20 not in used and not used & set(s.spares)
    assert len(used) == 56  # 59 usable chips hold 14 four-chip blocks; the 15th job waits
    [waiting] = [j for j, r in s.jobs.items() if r.phase is JobPhase.PENDING]
    assert s.reason(waiting).startswith("Unschedulable: no free")
    assert "4 spare" in s.reason(waiting) and "1 unhealthy" in s.reason(waiting)


def test_hbm_filter_drops_chips_with_retired_memory() -> None:
    s = Scheduler(POD)
    s.cluster.pods[0].hbm_bytes[:32] = 40 * GiB
    s.cluster.touch(s.cluster.pods[0])
    s.submit(JobRequest("big-mem", 16, hbm_bytes_per_chip=80 * GiB))
    p = bound(s.schedule())["big-mem"]
    assert min(p.chips) >= 32


def test_quota_waits_with_numbers() -> None:
    s = Scheduler(POD, quotas={"ml": 16})
    s.submit(JobRequest("a", 16, team="ml"))
    s.submit(JobRequest("b", 8, team="ml"))
    assert set(bound(s.schedule())) == {"a"}
    assert "over quota: 16 of 16 chips in use, job asks 8" in s.reason("b")
    s.finish("a")
    assert set(bound(s.schedule())) == {"b"}


def test_priority_order_and_aging() -> None:
    s = Scheduler(POD, policy=QueuePolicy(aging_interval_s=10.0, starvation_s=1e9))
    s.submit(JobRequest("fill", 64), now_s=0)
    s.schedule(now_s=0)
    s.submit(JobRequest("old-low", 64, priority=0, preemptible=False), now_s=0)
    s.submit(JobRequest("new-high", 64, priority=2, preemptible=False), now_s=15)
    s.finish("fill", now_s=16)
    # at t=16: old-low has aged 1.6 levels (< 2): new-high goes first
    assert set(bound(s.schedule(now_s=16))) == {"new-high"}
    s2 = Scheduler(POD, policy=QueuePolicy(aging_interval_s=10.0, starvation_s=1e9))
    s2.submit(JobRequest("fill", 64), now_s=0)
    s2.schedule(now_s=0)
    s2.submit(JobRequest("old-low", 64, priority=0), now_s=0)
    s2.submit(JobRequest("new-high", 64, priority=2), now_s=29)
    s2.finish("fill", now_s=30)
    # at t=30: old-low aged 3 levels > new-high's 2.1
    assert set(bound(s2.schedule(now_s=30))) == {"old-low"}


def test_starving_job_holds_its_block_while_others_backfill_elsewhere() -> None:
    s = Scheduler(get_topology("trn2-ultraserver:2"), policy=QueuePolicy(aging_interval_s=1e9, starvation_s=100.0))
    s.submit(JobRequest("half", 32), now_s=0)
    s.submit(JobRequest("quarter", 16), now_s=0)
    s.schedule(now_s=0)
    pods = {j: p.pod for j, p in s.allocations().items()}
    assert pods["half"] == pods["quarter"]  # best fit packs one pod
    s.submit(JobRequest("other", 32), now_s=0)  # does not fit the 16 left: the other pod
    s.schedule(now_s=0)
    held_pod = 1 - pods["half"]
    s.submit(JobRequest("big", 64), now_s=0)
    s.submit(JobRequest("small", 4), now_s=1)
    assert set(bound(s.schedule(now_s=1))) == {"small"}  # big is young: plain backfill
    assert s.allocations()["small"].pod == pods["half"]  # best fit: the fuller pod
    s.finish("small", now_s=2)
    s.submit(JobRequest("small2", 8), now_s=150)
    s.submit(JobRequest("small3", 16), now_s=150)
    got = bound(s.schedule(now_s=150))  # big has starved: it holds the emptier pod's free half
    assert "holding 32 of 64 chips" in s.reason("big")
    assert (s.cluster.pods[held_pod].nominated == s.jobs["big"].slot).sum() == 32
    assert set(got) == {"small2"} and got["small2"].pod == pods["half"]  # backfill elsewhere
    assert s.jobs["small3"].phase is JobPhase.PENDING  # 16 chips only exist in big's hold
    s.finish("other", now_s=200)
    got = bound(s.schedule(now_s=200))
    assert set(got) == {"big"} and got["big"].pod == held_pod
    assert (s.cluster.pods[held_pod].nominated == -1).all()


def test_preemption_contract_checkpoint_then_bind() -> None:
    s = Scheduler(POD)
    s.submit(JobRequest("low", 64, priority=0), now_s=0)
    s.schedule(now_s=0)
    s.report_checkpoint("low", 40)
    s.submit(JobRequest("high", 16, priority=5), now_s=10)
    assert s.schedule(now_s=10) == []  # low started 10 s ago: protected for min_run_s
    assert "no lower-priority job to preempt" in s.reason("high")
    [d] = s.schedule(now_s=1000)
    assert d.kind is DecisionKind.PREEMPT and d.victims == ("low",)
    assert s.jobs["low"].phase is JobPhase.CHECKPOINTING
    # The victim still holds its chips until its checkpoint is reported.
    assert (s.cluster.pods[0].owner == s.jobs["low"].slot).sum() == 64
    with pytest.raises(ConflictError):
        s.victims_checkpointed("high", {"someone-else": 1})
    with pytest.raises(ConflictError):
        s.victims_checkpointed("high", {"low": 10})  # older than its last checkpoint
    d2 = s.victims_checkpointed("high", {"low": 50})
    assert d2.kind is DecisionKind.BIND and len(d2.placement.chips) == 16
    low = s.describe("low")
    assert low["phase"] == "pending" and low["resume_step"] == 50 and low["preemptions"] == 1
    s.finish("high")
    [d3] = s.schedule()
    assert d3.job_id == "low" and d3.kind is DecisionKind.BIND and d3.resume_step == 50


def test_no_preemption_of_equal_priority_or_unpreemptible() -> None:
    s = Scheduler(POD)
    s.submit(JobRequest("a", 64, priority=1))
    s.submit(JobRequest("b", 64, priority=3, preemptible=False))
    s.schedule()
    s.submit(JobRequest("c", 8, priority=1))
    assert s.schedule() == []
    assert "no lower-priority job to preempt" in s.reason("c")


def test_requeue_resumes_from_last_checkpoint() -> None:
    s = Scheduler(POD)
    s.submit(JobRequest("a", 8))
    s.schedule()
    s.report_checkpoint("a", 300)
    s.requeue("a")
    [d] = s.schedule()
    assert d.resume_step == 300


def test_plugin_config_and_unknown_plugin() -> None:
    cfg = {"plugins": ["health_gate", "spare_guard", {"name": "fragmentation", "weight": 3}, "reservation", "default_binder"]}
    s = Scheduler(POD, config=cfg)
    assert [p.name for p in s.framework.points["score"]] == ["fragmentation"]
    with pytest.raises(UnknownNameError) as e:
        Scheduler(POD, config={"plugins": ["nope"]})
    assert "topology_block" in str(e.value)


def test_fleet_places_in_best_fit_pod_and_metrics() -> None:
    s = Scheduler(get_topology("trn2-ultraserver:4"))
    s.submit(JobRequest("a", 32))
    s.schedule()
    s.submit(JobRequest("b", 32))
    got = bound(s.schedule())
    assert got["b"].pod == s.allocations()["a"].pod  # fills the partly used pod first
    util = np.full(256, 0.5)
    util[s.allocations()["a"].chips[0]] = 1.0
    m = cluster_metrics(s, utilization=util)
    assert m["pods"][got["b"].pod]["utilization"] == 1.0
    assert m["balance_degree"]["b"] == 1.0 and m["balance_degree"]["a"] == pytest.approx((31 * 0.5 + 1) / 32, abs=1e-4)
    assert m["fragmentation"] == 0.0
    assert len(got["b"].cores) == 32 and len(got["b"].cores[0]) == 4  # trn2 at LNC=2


def test_thermal_headroom_steers_placement() -> None:
    s = Scheduler(POD)
    temp = np.full(64, 40.0)
    temp[:32] = 90.0  # the lower half runs hot
    s.set_telemetry(temperature_c=temp)
    s.submit(JobRequest("a", 16, tp=4))
    p = bound(s.schedule())["a"]
    assert min(p.chips) >= 32


def test_compat_place_matches_first_fit_signature() -> None:
    usable = np.ones(64, bool)
    usable[:16] = False
    a = place(POD, usable, 16)
    assert a is not None and not set(a.chips) & set(range(16)) and a.shape == (4, 4, 1)
    assert a.to_dict()["chips"] == list(a.chips)
    assert place(POD, usable, 64) is None


def test_victim_that_finishes_while_checkpointing_frees_its_chips() -> None:
    s = Scheduler(POD)
    s.submit(JobRequest("a", 32, priority=0), now_s=0)
    s.submit(JobRequest("b", 32, priority=0), now_s=0)
    s.schedule(now_s=0)
    s.submit(JobRequest("high", 64, priority=9), now_s=2000)
    [d] = s.schedule(now_s=2000)
    assert set(d.victims) == {"a", "b"}
    s.finish("a")  # completed on its own during the checkpoint window
    assert s.jobs["a"].phase is JobPhase.FINISHED
    still = s.victims_checkpointed("high", {})
    assert still.kind is DecisionKind.PREEMPT and still.victims == ("b",)
    done = s.victims_checkpointed("high", {"b": 7})
    assert done.kind is DecisionKind.BIND and len(done.placement.chips) == 64
