"""The scheduler inside the control plane, on the twin in virtual time: submit-time
rejection, pending reasons, allocation shapes, spares, preemption by checkpoint and
requeue, plans passed to the fabric, and the scheduler figures in DescribeCluster."""

from __future__ import annotations

import json

import pytest

from podfleet.control import ControlPlane
from podfleet.control.lifecycle import JobState, check_job_transition
from podfleet.control.planning import Plan
from podfleet.control.scheduling import job_request, plan_fields, worker_options
from podfleet.control.specs import JobSpec
from podfleet.errors import InfeasibleError, InvalidInputError, InvalidTransitionError
from podfleet.hardware.catalog import get_topology
from podfleet.scheduler import choose_spares
from tests.control.conftest import active_cluster, advance

# "tiny": steps slow enough (ms) that long jobs are still running when the test looks.
DEBUG = {"model": "tiny", "steps": 10**6}


@pytest.mark.parametrize("chips,spares,why", [
    (30, 0, "no contiguous block of 30 chips"),  # 2*3*5: no block of a 4x4x4 torus
    (64, 4, "spare"),  # the whole pod, but 4 chips are spares
    (63, 0, "63"),
])
def test_unsatisfiable_job_rejected_at_submit(plane: ControlPlane, chips: int, spares: int, why: str) -> None:
    active_cluster(plane, spares=spares)
    with pytest.raises(InfeasibleError) as exc:
        plane.jobs.submit("pod", {**DEBUG, "chips": chips}, actor="t")
    assert exc.value.field == "chips" and why in exc.value.message
    assert plane.jobs.list()[0] == []  # nothing persisted or queued
    assert plane.store.list_jobs(after=None, limit=10) == []


def test_pending_reason_and_allocation_shape(plane: ControlPlane) -> None:
    active_cluster(plane)
    a = plane.jobs.submit("pod", {**DEBUG, "chips": 32, "parallelism": {"tp": 4, "pp": 1, "dp": 8}}, actor="t")
    b = plane.jobs.submit("pod", {**DEBUG, "chips": 16, "parallelism": {"tp": 4, "pp": 1, "dp": 4}}, actor="t")
    assert a["state"] == "RUNNING" and sorted(a["allocation"]["shape"]) == [2, 4, 4]
    assert len(a["allocation"]["chips"]) == 32 == len(set(a["allocation"]["chips"]))
    assert b["state"] == "RUNNING" and sorted(b["allocation"]["shape"]) == [1, 4, 4]
    c = plane.jobs.submit("pod", {**DEBUG, "chips": 32}, actor="t")
    assert c["state"] == "PENDING"
    assert c["allocation"]["chips"] == [] and c["allocation"]["shape"] == []
    assert c["allocation"]["reason"] == c["reason"]
    assert c["reason"].startswith("Unschedulable: no free 4x4x2 block") and "largest free block 4x4x1" in c["reason"]
    advance(plane, 30)
    # Refreshed by each queue pass (every schedule_interval_s = 10 s while jobs wait).
    assert plane.jobs.describe(c["id"])["scheduling"]["queue_wait_s"] >= 20
    plane.jobs.stop(a["id"], actor="t")
    placed = plane.jobs.describe(c["id"])
    assert placed["state"] == "RUNNING" and sorted(placed["allocation"]["shape"]) == [2, 4, 4]


def test_spares_chosen_by_choose_spares_are_never_allocated(plane: ControlPlane) -> None:
    view = active_cluster(plane, spares=4)
    want = list(choose_spares(get_topology("trn2-ultraserver"), 4))
    assert view["spares"] == want != [60, 61, 62, 63]
    rt = plane.clusters[view["id"]]
    assert list(rt.fabric.spares) == want  # the twin is told the same chips
    assert plane.store.get_cluster(view["id"]).status.spares == want
    hw = json.loads(plane.hardware("pod"))
    assert [c["index"] for c in hw["chips"] if c["spare"]] == want
    held: set[int] = set()
    for _ in range(60):
        j = plane.jobs.submit("pod", {**DEBUG, "chips": 1}, actor="t")
        if j["state"] == "RUNNING":
            held |= set(j["allocation"]["chips"])
    assert len(held) == 60 and not held & set(want)


def test_named_spare_chips(plane: ControlPlane) -> None:
    view = active_cluster(plane, spare_chips=[60, 61, 62, 63])
    assert view["spares"] == [60, 61, 62, 63] and view["spec"]["spares"] == 4
    with pytest.raises(InvalidInputError):
        plane.create_cluster({"name": "bad", "spare_chips": [64]}, actor="t")


def test_priority_preemption_checkpoint_requeue_resume(plane: ControlPlane) -> None:
    active_cluster(plane)
    # ~24 ms a step on the twin (Trainium's fixed per-micro-batch cost, perf ``microbatch_s``).
    low = plane.jobs.submit("pod", {"model": "tiny", "chips": 64, "steps": 200_000, "priority": 10,
                                    "checkpoint_interval": 20_000}, actor="t")
    advance(plane, 1000)  # past the scheduler's minimum run time before preemption
    before = plane.jobs.describe(low["id"])
    assert before["state"] == "RUNNING" and before["checkpoint_step"] >= 20_000
    high = plane.jobs.submit("pod", {"model": "debug", "chips": 32, "steps": 2000, "priority": 90}, actor="t")
    # The victim's on-demand checkpoint takes time to write: until it is written the chips
    # are still the victim's, and the preemptor waits (no chip is used twice).
    rt = next(iter(plane.clusters.values()))
    write_s = plane.jobs.driver(rt).checkpoint_write_s(low["id"])
    assert write_s > 0
    assert high["state"] == "PENDING" and plane.jobs.describe(low["id"])["state"] == "RUNNING"
    assert set(rt.owners.chips_of(low["id"])) == set(range(64))
    advance(plane, write_s / 2)
    assert plane.jobs.describe(high["id"])["state"] == "PENDING"
    advance(plane, write_s)  # written: the job manager's wake-up ran the cycle that binds it
    assert plane.jobs.describe(high["id"])["state"] == "RUNNING"
    victim = plane.jobs.describe(low["id"])
    assert victim["state"] == "PENDING" and victim["scheduling"]["preemptions"] == 1
    saved = victim["checkpoint_step"]
    # Checkpointed at its current step, not at its last periodic checkpoint: nothing lost.
    assert saved > before["checkpoint_step"] and saved >= before["progress"]["step"]
    assert plane.store.latest_checkpoint(low["id"]).step == saved
    assert plane.store.get_job(low["id"]).state == "PENDING"
    log = [ln["message"] for ln in plane.jobs.job_logs(low["id"]).since(0)]
    assert any(m.startswith(f"preempted by {high['id']}: writing an on-demand checkpoint at step {saved}")
               for m in log)
    i = next(k for k, m in enumerate(log) if m.startswith("CHECKPOINTING: preempted by " + high["id"]))
    assert log[i + 1].startswith(f"PENDING: preempted by {high['id']} (priority {high['priority']} > "
                                 f"{low['priority']}); requeued, resumes from checkpoint step {saved}")
    advance(plane, 600)
    assert plane.jobs.describe(high["id"])["state"] == "SUCCEEDED"
    resumed = plane.jobs.describe(low["id"])
    assert resumed["state"] == "RUNNING" and resumed["progress"]["step"] >= saved
    assert any(m == f"RUNNING: running on 64 chips from step {saved}" for m in
               (ln["message"] for ln in plane.jobs.job_logs(low["id"]).since(0)))
    advance(plane, 10_000)
    done = plane.jobs.describe(low["id"])
    assert done["state"] == "SUCCEEDED" and done["progress"]["step"] == 200_000


def test_preemption_transition_is_enforced() -> None:
    check_job_transition(JobState.CHECKPOINTING, JobState.PENDING)  # preempted: saved, then requeued
    with pytest.raises(InvalidTransitionError):
        check_job_transition(JobState.RUNNING, JobState.PENDING)  # never without the checkpoint step


def test_team_quota_keeps_a_job_pending(plane: ControlPlane) -> None:
    active_cluster(plane, quotas={"ml": 16})
    a = plane.jobs.submit("pod", {**DEBUG, "chips": 16, "team": "ml"}, actor="t")
    b = plane.jobs.submit("pod", {**DEBUG, "chips": 8, "team": "ml"}, actor="t")
    assert a["state"] == "RUNNING" and b["state"] == "PENDING" and "over quota" in b["reason"]
    with pytest.raises(InfeasibleError, match="quota is 16"):
        plane.jobs.submit("pod", {**DEBUG, "chips": 32, "team": "ml"}, actor="t")
    with pytest.raises(InvalidInputError):
        plane.jobs.submit("pod", {**DEBUG, "chips": 8, "team": "Bad Team"}, actor="t")


def test_plan_and_parallelism_reach_the_fabric(plane: ControlPlane) -> None:
    view = active_cluster(plane)
    fab = plane.clusters[view["id"]].fabric
    manual = plane.jobs.submit("pod", {**DEBUG, "chips": 16, "parallelism": {"tp": 4, "pp": 1, "dp": 4}}, actor="t")
    opts = fab.jobs[manual["id"]].spec.options
    assert opts["parallelism"] == {"tp": 4, "pp": 1, "dp": 4}
    assert {opts["plan"][k] for k in ("tp", "pp", "dp")} == {4, 1} and opts["plan"]["tp"] == 4
    auto = plane.jobs.submit("pod", {**DEBUG, "chips": 16}, actor="t")
    got = plane.jobs.describe(auto["id"])
    plan = fab.jobs[auto["id"]].spec.options["plan"]
    assert plan["tp"] * plan["pp"] * plan["dp"] == 16
    # Co-optimised: the plan was chosen for the block the job got.
    assert got["plan"]["block_shape"] == got["allocation"]["shape"]


def test_describe_cluster_has_scheduler_figures(plane: ControlPlane) -> None:
    active_cluster(plane, spares=4)
    plane.jobs.submit("pod", {**DEBUG, "chips": 32}, actor="t")
    advance(plane, 10)
    m = plane.describe_cluster("pod")["scheduler"]
    assert m["pods"][0]["utilization"] == pytest.approx(32 / 60, abs=1e-3)
    assert m["utilization"] == m["pods"][0]["utilization"]
    assert 0 <= m["fragmentation"] < 1 and m["running_jobs"] == 1 and m["pending_jobs"] == 0
    (degree,) = m["balance_degree"].values()
    assert 0.9 < degree <= 1.0
    assert m["spares"] == list(choose_spares(get_topology("trn2-ultraserver"), 4))


@pytest.mark.parametrize("spec,plan,want", [
    ({"chips": 16, "model": "debug", "parallelism": {"tp": 4, "pp": 2, "dp": 2}}, None, ("manual", 4, "debug")),
    ({"chips": 16, "model": "debug", "parallelism": "auto"}, {"tp": 2, "pp": 1, "dp": 8}, ("auto", 2, "debug")),
    ({"chips": 6, "model": "debug", "parallelism": "auto"}, {"tp": 4}, ("auto", 1, "debug")),  # tp must divide
    ({"chips": 8, "model": "debug", "parallelism": "auto", "team": "ml", "priority": 7}, None, ("auto", 1, "debug")),
])
def test_job_request_table(spec: dict, plan: dict | None, want: tuple) -> None:
    typed, layout = JobSpec.from_dict(spec), Plan(**{"pp": 1, "dp": 1, **plan}) if plan else None
    req = job_request("job-x", typed, layout)
    assert (req.parallelism, req.tp, req.model if req.parallelism == "auto" else "debug") == want
    assert req.team == spec.get("team", "default") and req.priority == spec.get("priority", 50)
    assert job_request("job-x", typed, layout, auto_plan=False).parallelism == "manual"


@pytest.mark.parametrize("spec,plan,want", [
    ({"parallelism": {"tp": 2, "pp": 1, "dp": 4}}, None, {"parallelism": {"tp": 2, "pp": 1, "dp": 4}}),
    ({"parallelism": "auto"}, {"tp": 2, "pp": 1, "dp": 4, "micro_batch": 1, "num_micro_batches": 8, "mfu": 0.4},
     {"parallelism": "auto", "plan": {"tp": 2, "pp": 1, "dp": 4, "micro_batch": 1, "num_micro_batches": 8}}),
    ({"parallelism": "auto"}, {"tp": 1, "pp": 1, "dp": 30, "note": "no planner prediction"}, {"parallelism": "auto"}),
])
def test_worker_options_table(spec: dict, plan: dict | None, want: dict) -> None:
    par = spec["parallelism"]
    fixed = par if isinstance(par, str) else (par["tp"], par["pp"], par["dp"])
    assert worker_options(fixed, Plan.from_dict(plan) if plan else None) == want


def test_plan_fields_from_planner() -> None:
    from podfleet.planner import plan

    out = plan_fields(plan("debug", 16, topology="trn2-ultraserver"))
    assert out is not None and out.tp * out.pp * out.dp == 16 and (out.step_time_s or 0) > 0
    assert isinstance(out.recompute, str)
    assert plan_fields(None) is None and plan_fields({"note": "x"}) is None


def test_straggler_rebalanced_and_recorded_on_the_job(plane: ControlPlane) -> None:
    active_cluster(plane)
    job = plane.jobs.submit("pod", {**DEBUG, "chips": 16, "parallelism": {"tp": 1, "pp": 1, "dp": 16}}, actor="t")
    advance(plane, 60)
    assert "rebalances" not in plane.jobs.describe(job["id"])["scheduling"]  # even load: nothing to do
    hot = job["allocation"]["chips"][3]
    plane.inject_fault("pod", "thermal-runaway", chip=hot, actor="t")  # the chip throttles its clock
    advance(plane, 200)
    st = plane.jobs.describe(job["id"])["scheduling"]
    assert st["rebalances"] >= 1 and st["last_rebalance"]["action"] == "move-microbatches"
    lines = [ln["message"] for ln in plane.jobs.job_logs(job["id"]).since(0) if ln["message"].startswith("rebalance")]
    assert any(f"rank 3 (chip {hot})" in m and "median speed" in m for m in lines)
    assert plane.tl.log.filter("rebalance", job_id=job["id"])


def test_checkpoint_write_bandwidth_is_recoverys_assumption() -> None:
    from podfleet.control.drivers.twin import CHECKPOINT_WRITE_BW_BYTES_PER_S
    from podfleet.recovery.model import Timings

    assert Timings().checkpoint_bw_bytes_per_s == CHECKPOINT_WRITE_BW_BYTES_PER_S
