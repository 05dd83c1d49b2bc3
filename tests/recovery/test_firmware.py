from __future__ import annotations

import pytest

from podfleet.errors import ConflictError, UnknownNameError
from podfleet.recovery.firmware import FirmwareRollouts, pod_batches
from podfleet.recovery.spares import whole_groups
from podfleet.rehearsal.harness import make_pod


def rollout_pod(**kw):
    pod = make_pod(2, jobs=(64,))
    fw = FirmwareRollouts(pod.fab, pod.tl, pod.orch, **kw)
    pod.tl.run(until=200.0)
    return pod, fw


def versions(pod) -> list[str]:
    return [str(v) for v in pod.fab.chip_metrics()["firmware_version"]]


def test_rolling_update_moves_work_first_and_finishes() -> None:
    pod, fw = rollout_pod()
    r = fw.start("2.22.0", chips=[0, 1, 2, 3])
    pod.tl.run(until=pod.tl.now + 1200.0)  # each move first lets the running step (~90 s) finish
    assert r.state.value == "succeeded" and r.done == [0, 1, 2, 3]
    assert all(versions(pod)[c] == "2.22.0" for c in range(4)) and versions(pod)[4] == "2.21.0"
    # Each pause: the measured rank-move cost plus the rank's state (~31 GB of llama3-70b
    # on 64 chips) copied to a spare in the other pod over the network tier (25 GB/s).
    assert r.interruptions_s and max(r.interruptions_s) < 3.0
    assert str(pod.fab.job("job-0").state) == "running"
    assert r.to_dict()["progress"] == 1.0


def test_failed_update_rolls_back() -> None:
    pod, fw = rollout_pod(failure_p=1.0)
    r = fw.start("2.22.0", chips=[0, 1])
    pod.tl.run(until=pod.tl.now + 600.0)
    assert r.state.value == "rolled-back" and r.failed_chip == 0
    assert versions(pod)[1] == "2.21.0"  # never touched
    assert str(pod.fab.job("job-0").state) == "running"


def test_bad_requests_change_nothing() -> None:
    pod, fw = rollout_pod()
    before = versions(pod)
    with pytest.raises(UnknownNameError, match=r"2\.21\.0"):
        fw.start("9.9.9")
    assert versions(pod) == before and not fw.rollouts
    r = fw.start("2.22.0", chips=[0])
    with pytest.raises(ConflictError, match=r.id):
        fw.start("2.23.0")
    assert len(fw.rollouts) == 1


def test_node_unit_updates_sixteen_chips_per_batch() -> None:
    pod, fw = rollout_pod()
    r = fw.start("2.22.0", unit="node", chips=list(range(16, 32)))
    assert len(r.batches) == 1
    pod.tl.run(until=pod.tl.now + 600.0)
    assert r.state.value == "succeeded" and len(r.done) == 16


def test_rolling_update_moves_each_rank_once_and_brings_the_job_home() -> None:
    # The job fills pod 0 (64 chips); the only free chips are spares in pod 1. The first
    # rank must leave the pod; every later rank moves to the chip updated just before
    # (same pod, NeuronLink copy), and the rank outside comes back at the end.
    pod, fw = rollout_pod()
    chips = list(pod.fab.job("job-0").chips[:6])
    moves: list[dict] = []
    pod.tl.log.subscribe(lambda r: moves.append(r) if r["kind"] == "recovery-step" and r["step"] == "move-rank"
                         else None)
    r = fw.start("2.22.0", chips=chips)
    pod.tl.run(until=pod.tl.now + 3000.0)
    assert r.state.value == "succeeded" and r.done == chips
    crossing = [m for m in moves if (m["from_chip"] < 64) != (m["to_chip"] < 64)]
    assert len(moves) == len(chips) + 1 and len(crossing) == 2  # out once, home once
    assert [m["to_chip"] for m in moves[1:-1]] == chips[:-1]  # rank i takes chip i-1, freshly updated
    assert sorted({m["rank"] for m in moves}) == list(range(len(chips)))
    run = pod.fab.job("job-0")
    assert all(c < 64 for c in run.chips) and str(run.state) == "running"
    assert len(r.interruptions_s) == len(chips) + 1
    assert sorted(r.interruptions_s)[-3] < 1.0  # only the two pod crossings copy over the network tier


def test_live_move_pauses_at_the_step_end() -> None:
    pod, fw = rollout_pod()
    pod.fab.runner.progress_every_steps = 1  # as the control plane's twin clusters report
    ends: list[float] = []
    paused: list[float] = []

    def on(ev) -> None:
        if ev.job_id == "job-0" and ev.kind == "progress":
            ends.append(ev.t)
        elif ev.job_id == "job-0" and ev.kind == "job-paused":
            paused.append(ev.t)

    pod.fab.subscribe(on)
    fw.start("2.22.0", chips=[0])
    pod.tl.run(until=pod.tl.now + 400.0)
    assert paused and paused[0] in ends  # no partial step thrown away


def test_a_fleet_rollout_goes_pod_by_pod() -> None:
    # The job fills pod 0; pod 1 holds the spares its ranks move to. Chips of both pods,
    # named out of order: pod 0 (named first) is finished, its ranks home again, before
    # any chip of pod 1 is touched.
    pod, fw = rollout_pod()
    started: list[tuple[float, int]] = []
    update = pod.fab.update_firmware

    def record(chip: int, version: str, **kw: object) -> None:
        started.append((pod.tl.now, chip))
        update(chip, version, **kw)  # type: ignore[arg-type]

    pod.fab.update_firmware = record  # type: ignore[method-assign]
    pod_done: list[tuple[float, int, tuple[int, ...]]] = []
    pod.tl.log.subscribe(lambda r: pod_done.append((pod.tl.now, r["pod"], tuple(pod.fab.job("job-0").chips)))
                         if r["kind"] == "firmware-pod-done" else None)
    chips = [1, 64, 0, 65, 2]
    r = fw.start("2.22.0", chips=chips)
    assert r.pods == [0, 1]
    assert all(len({c // 64 for c in b}) == 1 for b in r.batches)
    pod.tl.run(until=pod.tl.now + 4000.0)
    assert r.state.value == "succeeded" and sorted(r.done) == sorted(chips), r.to_dict()
    assert r.pods_done == [0, 1] and r.current_pod is None
    first_pod1 = min(t for t, c in started if c >= 64)
    assert all(t < first_pod1 for t, c in started if c < 64)
    assert [p for _, p, _ in pod_done] == [0]
    t_done, _, job_chips = pod_done[0]
    assert t_done <= first_pod1 and all(c < 64 for c in job_chips)  # pod 0 whole again first
    assert all(versions(pod)[c] == "2.22.0" for c in chips)


def test_a_group_spread_over_two_pods_is_updated_one_part_per_pod() -> None:
    pod, _ = rollout_pod()
    spread = [0, 1, 64, 65]  # one TP group, two of its ranks moved to pod 1 by a recovery
    batches, pods, ends = pod_batches([0, 64, 1, 65], pod.fab.topology,
                                      lambda cs: whole_groups(cs, lambda c: spread))
    assert batches == [[0, 1], [64, 65]] and pods == [0, 1] and ends == [1, 2]
