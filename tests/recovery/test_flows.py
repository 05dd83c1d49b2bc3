"""Scenario tests in virtual time: every fault kind, every recovery path."""

from __future__ import annotations

import pytest

from podfleet.fabric.base import ChipState, LinkState
from podfleet.recovery.model import JobPolicy, RecoveryState, Timings
from podfleet.recovery.orchestrator import RecoveryOrchestrator
from podfleet.rehearsal.harness import check_invariants, make_pod


def steps(rec) -> list[str]:
    return [s.name for s in rec.steps]


def started(**kw):
    pod = make_pod(0, **kw)
    pod.tl.run(until=200.0)
    return pod


def last(pod, job="job-0"):
    return [r for r in pod.orch.done if r.job_id == job][-1]


def test_chip_failure_moves_rank_to_nearby_spare_and_restores_from_replica() -> None:
    pod = started()
    fab = pod.fab
    before = fab.job("job-0").step
    pod.tl.emit("test", note="inject")
    fab.inject_fault("chip-failure", chip=5)
    seen = []
    pod.tl.log.subscribe(lambda r: seen.append(r) if r["kind"] == "recovery-step" else None)
    t0 = pod.tl.now
    pod.tl.run(until=pod.tl.now + 6.0)
    rec = last(pod)
    assert steps(rec) == ["detect", "isolate", "select-spare", "move-rank", "restore", "resume"]
    assert all(s.reason for s in rec.steps) and [r["step"] for r in seen] == steps(rec)
    assert rec.restored_from == "replica" and rec.state == RecoveryState.DONE
    run = fab.job("job-0")
    assert run.chips[5] in fab.spares and str(run.state) == "running" and run.step >= before
    assert fab.chip_state(5) == ChipState.ISOLATED
    tm = Timings()
    # Noticed by the heartbeat hang timeout: last beat U(0, 0.2 s) before, next poll U(0, 0.1 s)
    # after, then the hung worker killed and seen gone (a measured kill -> detection).
    exits = tm.costs.kill_to_detect_s.samples
    assert rec.t_start == t0 and rec.steps[0].t_end == rec.detected_t
    assert tm.hang_timeout_s - tm.heartbeat_interval_s + min(exits) <= rec.detected_t - t0 \
        <= tm.hang_timeout_s + tm.monitor_poll_s + max(exits)
    # After detection: the measured fixed cost plus the rank's state over the copy path.
    restore = next(s for s in rec.steps if s.name == "restore")
    nbytes, bw = restore.detail["nbytes"], restore.detail["bw_bytes_per_s"]
    assert nbytes == pod.orch.state_bytes("job-0") > 1e9
    assert bw == 25e9  # the spare is in the other pod: the network tier
    # The move is a draw of the measured rank moves (recovery/data/measured_costs.json).
    move = rec.t_end - rec.detected_t - (tm.isolate_s + tm.select_s + nbytes / bw + tm.resume_s)
    assert any(move == pytest.approx(x) for x in tm.costs.replica_fixed_s.samples)
    assert check_invariants(pod) == []


def test_without_replica_restores_from_checkpoint_and_rolls_back() -> None:
    tm = Timings(move_s=0.5, restart_s=1.5)  # pinned, to check the flow's sum of steps
    pod = started(policy=JobPolicy(peer_replica=False), timings=tm)
    pod.tl.run(until=3000.0)
    run = pod.fab.job("job-0")
    ckpt = run.last_checkpoint
    pod.fab.inject_fault("chip-failure", chip=9)
    pod.tl.run(until=pod.tl.now + 120.0)
    rec = last(pod)
    assert rec.restored_from == "checkpoint"
    expect = tm.isolate_s + tm.select_s + 0.5 + 1.5 + pod.orch.state_bytes("job-0") / tm.checkpoint_bw_bytes_per_s \
        + tm.resume_s
    assert rec.t_end - rec.detected_t == pytest.approx(expect) and 5.0 <= expect <= 60.0
    assert any(r["kind"] == "job-resumed" and r["step"] == ckpt for r in pod.tl.log.filter("job-resumed"))


@pytest.mark.parametrize(("hbm", "stays"), [(0.85, False), (0.5, True)])
def test_uncorrectable_hbm_fences_degrades_and_migrates_only_if_it_no_longer_fits(hbm: float, stays: bool) -> None:
    pod = started(hbm_fraction=hbm)
    pod.fab.inject_fault("hbm-uncorrectable", chip=12)
    pod.tl.run(until=pod.tl.now + 6.0)
    rec = last(pod)
    assert rec.kind == "ecc" and steps(rec)[:4] == ["detect", "isolate", "fence", "degrade"]
    run = pod.fab.job("job-0")
    if stays:
        assert run.chips[12] == 12 and pod.fab.chip_state(12) == ChipState.DEGRADED
        assert "move-rank" not in steps(rec)
    else:
        assert run.chips[12] != 12 and "move-rank" in steps(rec)
    assert str(run.state) == "running"


def test_sram_uncorrectable_fences_and_migrates() -> None:
    pod = started()
    pod.fab.inject_fault("sram-uncorrectable", chip=3)
    pod.tl.run(until=pod.tl.now + 6.0)
    assert "fence" in steps(last(pod)) and pod.fab.job("job-0").chips[3] != 3


def test_thermal_runaway_throttles_then_migrates_before_the_chip_dies() -> None:
    pod = started()
    pod.fab.inject_fault("thermal-runaway", chip=20)
    pod.tl.run(until=pod.tl.now + 120.0)
    rec = last(pod)
    assert rec.kind == "thermal" and steps(rec)[:2] == ["detect", "throttle"] and "move-rank" in steps(rec)
    # A degradation is noticed by the next telemetry sample and the health scan after it.
    tm = Timings()
    assert 0.0 < rec.detected_t - rec.t_start <= tm.telemetry_interval_s + tm.scan_interval_s
    assert pod.fab.chip_state(20) == ChipState.ISOLATED  # never reached the critical temperature
    assert not pod.tl.log.filter("chip-failed", chip=20)


def test_firmware_fault_recovers_and_the_chip_returns_after_a_reset() -> None:
    pod = started()
    pod.fab.inject_fault("firmware-fault", chip=30)
    pod.tl.run(until=pod.tl.now + Timings().reset_s + 5)
    assert str(pod.fab.job("job-0").state) == "running"
    assert pod.fab.chip_state(30) == ChipState.HEALTHY


def test_corrected_burst_does_not_interrupt() -> None:
    pod = started()
    pod.fab.inject_fault("hbm-corrected-burst", chip=7)
    pod.tl.run(until=pod.tl.now + 10.0)
    assert not pod.orch.done and str(pod.fab.job("job-0").state) == "running"


@pytest.mark.parametrize("kind", ["link-down", "link-flap"])
def test_link_faults_reroute_mark_degraded_and_tell_the_scheduler(kind: str) -> None:
    pod = started()
    pod.fab.inject_fault(kind, link=0)
    pod.tl.run(until=pod.tl.now + 120.0)
    rec = next(r for r in pod.orch.done if r.kind == "link")
    assert steps(rec) == ["reroute", "mark-degraded", "notify-scheduler"]
    assert rec.steps[0].detail["detour"]  # the router found a path around it
    assert pod.journal.links[0] == "degraded"
    assert pod.fab.link_state(0) in (LinkState.DOWN, LinkState.DEGRADED)
    assert str(pod.fab.job("job-0").state) == "running"


def test_second_fault_during_recovery_joins_the_flow() -> None:
    pod = started(policy=JobPolicy(peer_replica=False))
    pod.fab.inject_fault("chip-failure", chip=1)
    pod.tl.run(until=pod.tl.now + 5.0)  # in the checkpoint restore
    assert "job-0" in pod.orch.active
    pod.fab.inject_fault("chip-failure", chip=2)
    pod.tl.run(until=pod.tl.now + 200.0)
    rec = last(pod)
    assert "fault-joined" in steps(rec) and steps(rec).count("move-rank") == 2
    run = pod.fab.job("job-0")
    assert 1 not in run.chips and 2 not in run.chips and str(run.state) == "running"
    assert check_invariants(pod) == []


def test_spare_failing_during_the_move_is_replaced() -> None:
    pod = started()
    pod.fab.inject_fault("chip-failure", chip=4)
    t0 = pod.tl.now
    pod.tl.run(until=t0 + 1e-6)
    rec = pod.orch.active["job-0"]
    detect = rec.steps[0].detail["delay_s"]
    pod.tl.run(until=t0 + detect + 0.0025)  # isolate done, spare being selected
    pod.tl.run(until=pod.tl.now + 0.002)
    spare = rec.steps[-1].detail.get("to_chip")
    if spare is not None:
        pod.fab.inject_fault("chip-failure", chip=spare)
    pod.tl.run(until=pod.tl.now + 120.0)
    assert str(pod.fab.job("job-0").state) == "running" and check_invariants(pod) == []


def test_no_spare_left_shrinks_data_parallelism() -> None:
    pod = make_pod(0, topology="trn2-ultraserver", jobs=(64,), spares=0, policy=JobPolicy(dp=2))
    pod.tl.run(until=200.0)
    pod.fab.inject_fault("chip-failure", chip=40)
    pod.tl.run(until=pod.tl.now + 5.0)
    rec = last(pod)
    assert "shrink" in steps(rec)
    run = pod.fab.job("job-0")
    assert len(run.chips) == 32 and 40 not in run.chips and str(run.state) == "running"
    assert pod.orch.policies["job-0"].dp == 1
    assert check_invariants(pod) == []


def test_no_spare_left_waits_when_policy_says_so_then_continues_after_repair() -> None:
    pod = make_pod(0, topology="trn2-ultraserver", jobs=(64,), spares=0, policy=JobPolicy(on_no_spare="wait"),
                   timings=Timings(repair_s=600.0))
    pod.tl.run(until=200.0)
    pod.fab.inject_fault("chip-failure", chip=40)
    pod.tl.run(until=pod.tl.now + 60.0)
    rec = pod.orch.active["job-0"]
    assert rec.state == RecoveryState.WAITING and str(pod.fab.job("job-0").state) == "paused"
    pod.tl.run(until=pod.tl.now + 700.0)  # the chip is replaced
    assert str(pod.fab.job("job-0").state) == "running" and len(pod.fab.job("job-0").chips) == 64


def test_control_plane_restart_mid_recovery_finishes_from_the_journal() -> None:
    pod = started(policy=JobPolicy(peer_replica=False))
    pod.fab.inject_fault("chip-failure", chip=6)
    pod.tl.run(until=pod.tl.now + 10.0)  # mid checkpoint restore
    journal = pod.journal.records[pod.orch.active["job-0"].id]
    policies = dict(pod.orch.policies)
    pod.orch.close()  # the old control plane is gone
    new = RecoveryOrchestrator(pod.fab, pod.tl, timings=Timings(), spares=pod.fab.spares)
    rec = new.adopt(journal, policies["job-0"])
    pod.tl.run(until=pod.tl.now + 200.0)
    assert rec.state == RecoveryState.DONE and "adopted" in steps(rec)
    assert str(pod.fab.job("job-0").state) == "running"


def test_drain_moves_work_off_a_chip_that_still_works() -> None:
    pod = started()
    before = pod.fab.job("job-0").step
    pod.orch.drain(11, "failure predicted")
    pod.tl.run(until=pod.tl.now + 200.0)
    rec = last(pod)
    # Its own action: nothing to detect; the running step finishes before the live copy.
    assert rec.kind == "drain" and steps(rec)[:2] == ["step-boundary", "select-spare"]
    assert rec.detected_t == rec.t_start
    paused = pod.tl.log.filter("job-paused")[-1]
    assert paused["step"] == before + 1  # paused at the step boundary: no partial step lost
    assert pod.fab.chip_state(11) == ChipState.ISOLATED and pod.fab.job("job-0").chips[11] != 11


def test_job_stopped_during_recovery_ends_the_flow_cleanly() -> None:
    pod = started(policy=JobPolicy(peer_replica=False))
    pod.fab.inject_fault("chip-failure", chip=8)
    pod.tl.run(until=pod.tl.now + 5.0)  # in the checkpoint restore
    pod.fab.stop("job-0")
    pod.tl.run(until=pod.tl.now + 100.0)
    assert "job-0" not in pod.orch.active and str(pod.fab.job("job-0").state) == "stopped"
    assert last(pod).state in (RecoveryState.DONE, RecoveryState.FAILED)


def test_spare_in_the_jobs_pod_beats_one_in_another_pod() -> None:
    from podfleet.hardware.catalog import get_topology
    from podfleet.recovery.spares import choose_spare

    topo = get_topology("trn2-ultraserver:2")
    chips = list(range(64, 128))
    # Chip 0 is 2 "hops" away (another pod); chip 127 of the job's pod is several hops away.
    assert topo.hops(64, 0) < topo.hops(64, 127)
    assert choose_spare(topo, chips, 0, [0, 127], spares={0}) == 127
    assert choose_spare(topo, chips, 0, [0, 4], spares={0}) == 0  # only other-pod chips: spares first


def test_rank_moved_to_another_pod_comes_home_when_its_chip_is_repaired() -> None:
    pod = started(timings=Timings(repair_s=1800.0))
    fab = pod.fab
    fab.inject_fault("chip-failure", chip=5)
    pod.tl.run(until=pod.tl.now + 10.0)
    run = fab.job("job-0")
    assert run.chips[5] >= 64  # the job's pod is full: the rank went to a spare in pod 1
    pod.tl.run(until=pod.tl.now + 1800.0 + 200.0)  # repaired, then the next step boundary
    run = fab.job("job-0")
    assert fab.chip_state(5) == ChipState.HEALTHY and run.chips[5] == 5 and str(run.state) == "running"
    home = last(pod)
    assert home.kind == "rehome" and home.state == RecoveryState.DONE
    assert steps(home) == ["step-boundary", "select-spare", "move-rank", "restore", "resume"]
    assert check_invariants(pod) == []


def test_no_rehome_while_a_firmware_rollout_frees_chips() -> None:
    pod = started()
    pod.orch.hold_rehome = True
    fab = pod.fab
    fab.inject_fault("chip-failure", chip=5)
    pod.tl.run(until=pod.tl.now + 10.0)
    fab.repair_chip(5)
    pod.tl.run(until=pod.tl.now + 300.0)
    assert fab.job("job-0").chips[5] >= 64 and last(pod).kind == "chip-failure"
    pod.orch.hold_rehome = False
    assert pod.orch.rehome_all()
    pod.tl.run(until=pod.tl.now + 300.0)
    assert fab.job("job-0").chips[5] == 5


def test_fault_during_a_move_home_gets_its_own_flow_first() -> None:
    pod = started()
    fab = pod.fab
    fab.inject_fault("chip-failure", chip=5)
    pod.tl.run(until=pod.tl.now + 10.0)
    fab.repair_chip(5)
    pod.tl.run(until=pod.tl.now + 1.0)
    home = pod.orch.active["job-0"]
    assert home.kind == "rehome" and home.step == "step-boundary"  # the job still trains
    fab.inject_fault("chip-failure", chip=7)
    pod.tl.run(until=pod.tl.now + 10.0)
    assert home.state == RecoveryState.DONE and home.step == "cancelled"
    rec = last(pod)
    assert rec.kind == "chip-failure" and steps(rec)[0] == "detect" and rec.state == RecoveryState.DONE
    run = fab.job("job-0")
    assert run.chips[7] == 5  # the free chip of the job's own pod, before any spare in the other
    assert check_invariants(pod) == []


def test_a_rank_stays_in_the_pod_of_its_tensor_parallel_group() -> None:
    from podfleet.hardware.catalog import get_topology
    from podfleet.recovery.spares import choose_spare

    topo = get_topology("trn2-ultraserver:2")
    # Ranks 0-7 (one tensor-parallel group) sit in pod 0; the rest of the job in pod 1.
    chips = [0, 1, 2, 3, 4, 5, 6, 7, *range(72, 128)]
    mates = chips[:8]
    # Chip 64 (pod 1, free) is nearest to the job's other ranks, chip 8 to the group.
    assert choose_spare(topo, chips, 3, [64, 8], mates=mates) == 8
    assert choose_spare(topo, chips, 3, [64, 8]) == 64  # without its group: the job's pod
    # A rank of a group at home still prefers home.
    assert choose_spare(topo, chips, 20, [64, 8], mates=chips[16:24]) == 64
