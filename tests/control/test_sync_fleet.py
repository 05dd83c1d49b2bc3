"""``control.scheduling.sync`` at fleet size reads what moved only: the fabric's chip
states converted once per change, the owner arrays built in C-level passes, the ring
traffic folded only when it changed. Each is checked against what the per-chip code
gave (the owner arrays, from the owner map by hand) and against a fabric that changes
its own list in place."""

from __future__ import annotations

import numpy as np

from podfleet.control import ControlPlane
from podfleet.control.scheduling import _HOLDING, sync
from podfleet.fabric.base import ChipState
from podfleet.scheduler.state import FREE
from tests.control.conftest import active_cluster, advance

DEBUG = {"model": "tiny", "steps": 10**6}


def _want(rt: object) -> np.ndarray:
    """The owner arrays as sync built them chip by chip before."""
    sched = rt.scheduler  # type: ignore[attr-defined]
    want = np.full(sched.cluster.n_chips, FREE, dtype=np.int64)
    for chip, job_id in rt.owners.copy().items():  # type: ignore[attr-defined]
        r = sched.jobs.get(job_id)
        if r is not None and r.phase in _HOLDING and not rt.spare_mask[chip]:  # type: ignore[attr-defined]
            want[chip] = r.slot
    return want


def test_the_owner_arrays_are_the_held_chips_of_running_jobs_without_spares(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=4, pods_per_block=2, spares=2)
    rt = plane.resolve("fleet")
    jobs = [plane.jobs.submit(cl["id"], {**DEBUG, "chips": n}, actor="test")["id"] for n in (32, 16, 8, 32)]
    advance(plane, 5)
    plane.jobs.stop(jobs[1], actor="test")
    # A spare taken by a rank stays out of the owner arrays though a job holds it.
    spare = int(np.flatnonzero(rt.spare_mask)[0])
    held = rt.owners.chips_of(jobs[0])
    rt.owners.move(jobs[0], held[0], spare)
    sync(rt)
    owner = rt.scheduler.cluster.arrays.owner.reshape(-1)
    assert np.array_equal(owner, _want(rt))
    assert owner[spare] == FREE and (owner != FREE).sum() == 32 - 1 + 8 + 32


class _InPlace:
    """A fabric that hands out the list it keeps changing (as a real fabric may)."""

    def __init__(self, n: int) -> None:
        self.states = [ChipState.HEALTHY.value] * n

    def chip_states(self) -> list[str]:
        return self.states


def test_chip_states_see_a_fabric_that_changes_its_own_list(plane: ControlPlane) -> None:
    active_cluster(plane, "pod")
    rt = plane.resolve("pod")
    fake = _InPlace(rt.topology.n_chips)
    rt.fabric = fake  # type: ignore[assignment]
    assert rt.chip_states()[3] is ChipState.HEALTHY
    for chip in (3, 7):  # each change seen, the second one after a call that converted
        fake.states[chip] = ChipState.FAILED.value
        assert rt.chip_states()[chip] is ChipState.FAILED
    out = rt.chip_states()
    out[5] = ChipState.ISOLATED  # the caller's own list: the next call is not changed by it
    assert rt.chip_states()[5] is ChipState.HEALTHY
