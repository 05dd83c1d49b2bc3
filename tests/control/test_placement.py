"""The control plane's allocation record, and the scheduler calls only the control plane
makes: ``adopt`` (a job reloaded on its chips after a restart) and ``hold`` (a rank moved)."""

from __future__ import annotations

import pytest

from podfleet.control.placement import Allocation
from podfleet.errors import ConflictError
from podfleet.hardware.catalog import get_topology
from podfleet.scheduler import DecisionKind, JobRequest, Scheduler

POD = get_topology("trn2-ultraserver")


def test_allocation_round_trip() -> None:
    a = Allocation((3, 1, 2), (3,), "why")
    assert Allocation.from_dict(a.to_dict()) == a and set(a.to_dict()) == {"chips", "shape", "reason"}
    placed = Allocation((0, 1), (2,), "placed", pod=0, offset=(0,), cores=((0, 1), (2, 3)), score=0.5)
    assert Allocation.from_dict(placed.to_dict()) == placed
    assert placed.to_dict() == {"pod": 0, "chips": [0, 1], "shape": [2], "offset": [0],
                                "cores": [[0, 1], [2, 3]], "score": 0.5, "reason": "placed"}


def test_adopted_chips_are_never_given_away() -> None:
    s = Scheduler(POD)
    s.submit(JobRequest("old", 32))
    s.adopt("old", list(range(32)))
    assert s.describe("old")["phase"] == "running"
    s.submit(JobRequest("new", 48))
    assert s.schedule() == [] and "no free" in s.reason("new")
    s.submit(JobRequest("fits", 32))
    (d,) = s.schedule()
    assert d.kind is DecisionKind.BIND and not set(d.placement.chips) & set(range(32))
    with pytest.raises(ConflictError):
        s.adopt("old", [0])  # already running


@pytest.mark.parametrize("chips,ok", [
    ((0, 1, 2, 63), True),  # a rank moved to a free chip
    ((0, 1, 2, 40), False),  # chip 40 belongs to another job
])
def test_hold_follows_rank_moves(chips: tuple[int, ...], ok: bool) -> None:
    s = Scheduler(POD)
    s.submit(JobRequest("a", 4))
    s.adopt("a", [0, 1, 2, 3])
    s.submit(JobRequest("b", 1))
    s.adopt("b", [40])
    if not ok:
        with pytest.raises(ConflictError):
            s.hold("a", chips)
        return
    s.hold("a", chips)
    pod = s.cluster.pods[0]
    slot = s.jobs["a"].slot
    assert sorted(int(c) for c in (pod.owner == slot).nonzero()[0]) == sorted(chips)
    s.finish("a")
    assert not (pod.owner == slot).any()
