"""Recovery on the real control plane in virtual time (the recovery benchmarks' path)."""

from __future__ import annotations

import pytest

from podfleet.recovery.model import Timings
from podfleet.rehearsal.recovery_rehearsal import CLUSTER, rehearse

JOB = {"model": "llama3-70b", "chips": 64, "steps": 10**7, "checkpoint_interval": 10,
       "parallelism": {"tp": 8, "pp": 4, "dp": 2}}


def test_recovery_durations_come_from_detection_and_the_copy_path() -> None:
    r = rehearse(3)
    job = r.submit(dict(JOB))
    chip = r.chips(job)[7]
    t0 = r.tl.now
    r.plane.inject_fault(CLUSTER, "chip-failure", chip=chip, actor="t")
    r.tl.run(t0 + 30.0)
    rec = [x for x in r.recoveries() if x["job_id"] == job][-1]
    tm = Timings()
    assert rec["state"] == "done" and rec["restored_from"] == "replica"
    assert [s["name"] for s in rec["steps"]][:2] == ["detect", "isolate"]
    detect = rec["detected_t"] - rec["t_start"]
    exit_s = tm.costs.kill_to_detect_s.samples  # the hung worker is killed; the fabric sees it gone
    assert tm.hang_timeout_s - tm.heartbeat_interval_s + min(exit_s) <= detect \
        <= tm.hang_timeout_s + tm.monitor_poll_s + max(exit_s)
    restore = next(s for s in rec["steps"] if s["name"] == "restore")
    # The job fills one pod; the free chips are in the other: the copy crosses the network tier.
    assert restore["detail"]["bw_bytes_per_s"] == r.fabric.topology.net_bw_per_chip_bytes_per_s
    took = restore["t_end"] - restore["t_start"]
    assert took == pytest.approx(restore["detail"]["nbytes"] / restore["detail"]["bw_bytes_per_s"])
    view = r.plane.jobs.describe(job)
    assert view["state"] == "RUNNING" and chip not in view["allocation"]["chips"]


def test_firmware_rollout_moves_ranks_at_step_boundaries() -> None:
    r = rehearse(4)
    job = r.submit(dict(JOB))
    r.tl.run(r.tl.now + 300.0)
    fw = r.parts.firmware.start_firmware(CLUSTER, "2.22.0", unit="chip", chips=r.chips(job)[:2], actor="t")
    view = fw
    for _ in range(12):  # the cross-pod rank slows the steps the moves wait for: run until it ends
        r.tl.run(r.tl.now + 600.0)
        view = r.parts.firmware.firmware_rollout(CLUSTER, fw["id"])
        if view["state"] != "running":
            break
    # The two chips hold ranks of one tensor-parallel group: they go as one batch, and as
    # the pod is full they leave it, their six group mates with them, in one pause (the
    # later moves run alongside the first); the group comes home together at the end:
    # two pauses, each one move plus one copy.
    assert view["state"] == "succeeded" and len(view["interruptions_s"]) == 2
    assert max(view["interruptions_s"]) < 2.0
    recs = [x for x in r.recoveries() if x["job_id"] == job]
    assert [x["kind"] for x in recs] == ["firmware", "rehome"]
    for x in recs:
        moves = [st["detail"] for st in x["steps"] if st["name"] == "move-rank"]
        assert [m["concurrent"] for m in moves] == [False] + [True] * 7
    pods = {c // 64 for c in r.chips(job)}
    assert len(pods) == 1
    # (the batch's second chip joins the flow before it starts: a ``fault-joined`` step)
    firsts = [next(st for st in x["steps"] if st["name"] != "fault-joined") for x in recs]
    assert recs and all(st["name"] == "step-boundary" for st in firsts)
    for x, first in zip(recs, firsts, strict=True):  # the pause began when the waited-for step had finished
        waited = first["detail"]["at_step"]
        paused = next(e for e in r.tl.log.filter("job-paused") if e["t"] >= x["t_start"])
        assert paused["step"] == waited + 1
    assert r.plane.jobs.describe(job)["state"] == "RUNNING"


def test_firmware_batches_follow_tensor_parallel_groups() -> None:
    """A rank moved out of its full pod alone would put its group's all-reduces on the
    network tier; moved with its whole tensor-parallel group only pipeline and gradient
    traffic cross, so the job barely slows while the group is away."""
    r = rehearse(6)
    job = r.submit(dict(JOB))
    r.tl.run(r.tl.now + 600.0)
    healthy = r.fabric.job(job).step_time_s
    fw = r.parts.firmware.start_firmware(CLUSTER, "2.22.0", unit="chip", chips=r.chips(job)[:24], actor="t")
    steps: list[float] = []
    r.fabric.subscribe(lambda ev: steps.append(float(ev.detail["step_time_s"]))
                       if ev.job_id == job and ev.kind == "progress" else None)
    view = fw
    for _ in range(12):
        r.tl.run(r.tl.now + 600.0)
        view = r.parts.firmware.firmware_rollout(CLUSTER, fw["id"])
        if view["state"] != "running":
            break
    assert view["state"] == "succeeded" and len(view["done"]) == 24
    assert len(view["interruptions_s"]) == 4  # three groups of eight, then home
    assert steps and max(steps) < 1.05 * healthy
    assert r.plane.jobs.describe(job)["state"] == "RUNNING"


def test_the_plane_runs_its_flows_on_the_timings_it_was_built_with() -> None:
    """The recovery-time benchmark's sensitivities vary a ``Timings`` field through
    ``compose.build``: a doubled hang timeout must reach the flows' detection."""
    tm = Timings(hang_timeout_s=2 * Timings().hang_timeout_s)
    r = rehearse(3, timings=tm)
    job = r.submit(dict(JOB))
    t0 = r.tl.now
    r.plane.inject_fault(CLUSTER, "chip-failure", chip=r.chips(job)[7], actor="t")
    r.tl.run(t0 + 30.0)
    rec = [x for x in r.recoveries() if x["job_id"] == job][-1]
    detect = rec["detected_t"] - rec["t_start"]
    exit_s = tm.costs.kill_to_detect_s.samples  # the hung worker is killed; the fabric sees it gone
    assert tm.hang_timeout_s - tm.heartbeat_interval_s + min(exit_s) <= detect \
        <= tm.hang_timeout_s + tm.monitor_poll_s + max(exit_s)


def test_a_rank_of_a_group_away_stays_beside_its_group() -> None:
    """A tensor-parallel group that left its full pod whole sits in the other pod; when one
    of its ranks fails there, the free chips its group left at home are the nearest to
    the job's other ranks, but a rank back home alone would split the group between pods
    and put its all-reduces on the network tier (the job's steps ~2.4x slower, until the
    group came home hours later): the rank takes a free chip beside its mates."""
    r = rehearse(3, repair_s=None)  # the failed chips stay out: the group cannot come home
    job = r.submit(dict(JOB))
    r.tl.run(r.tl.now + 400.0)
    healthy = float(r.fabric.job(job).step_time_s)
    home = r.chips(job)[0] // 64
    r.plane.inject_fault(CLUSTER, "chip-failure", chip=r.chips(job)[7], actor="t")
    r.tl.run(r.tl.now + 30.0)
    group = r.chips(job)[:8]
    assert {c // 64 for c in group} == {1 - home}  # the whole group left the full pod
    assert len([c for c in range(64 * home, 64 * home + 64) if c not in r.chips(job)]) == 8  # 7 free + 1 failed
    r.plane.inject_fault(CLUSTER, "chip-failure", chip=group[3], actor="t")
    r.tl.run(r.tl.now + 30.0)
    group = r.chips(job)[:8]
    assert {c // 64 for c in group} == {1 - home}, group
    steps: list[float] = []
    r.fabric.subscribe(lambda ev: steps.append(float(ev.detail["step_time_s"]))
                       if ev.job_id == job and ev.kind == "progress" else None)
    r.tl.run(r.tl.now + 3 * healthy)
    assert steps and max(steps) < 1.05 * healthy
    recs = [x for x in r.recoveries() if x["job_id"] == job]
    assert [x["kind"] for x in recs] == ["chip-failure", "chip-failure"]
    assert all(x["state"] == "done" for x in recs)
