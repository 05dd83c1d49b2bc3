"""A fleet cluster on the twin: a gang across pods through the control plane, its plan,
and recovery that moves a lost rank within its own pod (issue 28)."""

from __future__ import annotations

from podfleet.control import ControlPlane
from tests.control.conftest import active_cluster, advance


def _job(plane: ControlPlane, cluster: str, **spec: object) -> dict:
    job = plane.jobs.submit(cluster, {"model": "llama3-8b", "steps": 100000, "checkpoint_interval": 50, **spec},
                            actor="test")
    advance(plane, 5)
    return plane.jobs.describe(job["id"])


def test_a_512_chip_gang_takes_8_pods_of_one_block_and_keeps_tp_inside_pods(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=16, pods_per_block=8)
    assert cl["chips"] == 1024
    job = _job(plane, cl["id"], chips=512, model="llama3-70b")
    assert job["state"] == "RUNNING", job
    alloc = job["allocation"]
    assert len(alloc["pods"]) == 8 and len({p // 8 for p in alloc["pods"]}) == 1, alloc
    assert len(alloc["chips"]) == 512 and len(set(alloc["chips"])) == 512
    tp = job["plan"]["tp"]
    # Megatron order (tp fastest): every TP group's ranks sit on one pod.
    for r in range(0, 512, tp):
        assert len({c // 64 for c in alloc["chips"][r:r + tp]}) == 1


def test_a_lost_chip_moves_its_rank_within_its_pod(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=8, pods_per_block=8)
    job = _job(plane, cl["id"], chips=256, pods=8)  # a 32-chip block on each pod: the rest is free
    assert job["state"] == "RUNNING", job
    chips = job["allocation"]["chips"]
    victim = next(c for c in chips if c // 64 == 3)
    rank = chips.index(victim)
    plane.inject_fault(cl["id"], "chip-failure", chip=victim, actor="test")
    advance(plane, 120)
    after = plane.jobs.describe(job["id"])
    assert after["state"] == "RUNNING", after
    moved = after["allocation"]["chips"]
    assert moved[rank] != victim and moved[rank] // 64 == 3, (victim, moved[rank])
    assert [c for i, c in enumerate(moved) if i != rank] == [c for i, c in enumerate(chips) if i != rank]


def test_required_block_waits_with_the_level_in_its_reason(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=8, pods_per_block=4)
    first = _job(plane, cl["id"], chips=256, pods=8)  # half of every pod: no whole pod is free
    assert first["state"] == "RUNNING"
    job = _job(plane, cl["id"], chips=256, topology_required="block")
    assert job["state"] == "PENDING", job
    assert "topology_required block" in job["reason"] and "best block" in job["reason"], job["reason"]
    # Preferred (the default) crosses the spine rather than wait.
    other = _job(plane, cl["id"], chips=256)
    assert other["state"] == "RUNNING", other


def test_a_higher_priority_gang_preempts_a_gang_across_pods_and_the_victim_resumes(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=8, pods_per_block=4)
    low = _job(plane, cl["id"], chips=512, model="tiny", priority=10, steps=200_000, checkpoint_interval=20_000)
    assert low["state"] == "RUNNING" and len(low["allocation"]["pods"]) == 8, low
    advance(plane, 1000)  # past the scheduler's minimum run time before preemption
    high = plane.jobs.submit(cl["id"], {"model": "debug", "chips": 256, "priority": 90, "steps": 2000}, actor="test")
    # The victim writes its on-demand checkpoint first: until then the preemptor waits.
    assert plane.jobs.describe(high["id"])["state"] == "PENDING"
    assert plane.jobs.describe(low["id"])["state"] in ("RUNNING", "CHECKPOINTING")
    for _ in range(120):  # the checkpoint's write time, then the cycle that binds the preemptor
        advance(plane, 1)
        if plane.jobs.describe(high["id"])["state"] != "PENDING":
            break
    high = plane.jobs.describe(high["id"])
    assert high["state"] == "RUNNING", high
    assert len(high["allocation"]["pods"]) == 4 and len({p // 4 for p in high["allocation"]["pods"]}) == 1, high
    victim = plane.jobs.describe(low["id"])
    assert victim["state"] == "PENDING" and victim["scheduling"]["preemptions"] == 1, victim
    saved = victim["checkpoint_step"]
    assert saved > 0 and plane.store.latest_checkpoint(low["id"]).step == saved
    advance(plane, 600)
    assert plane.jobs.describe(high["id"])["state"] == "SUCCEEDED"
    resumed = plane.jobs.describe(low["id"])
    assert resumed["state"] == "RUNNING" and resumed["progress"]["step"] >= saved, resumed
