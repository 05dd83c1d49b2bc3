from __future__ import annotations

import pytest

from podfleet.errors import ConflictError, UnknownNameError
from podfleet.recovery.firmware import FirmwareRollouts
from podfleet.twin.harness import make_pod


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
