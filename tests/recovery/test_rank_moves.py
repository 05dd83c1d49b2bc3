"""The recovery orchestrator on a fabric that is not the twin: a small fake declaring
``RankMoves`` the way a process fabric does (pause, moves and resume take time of their
own, shown in ``run_status``), so the flows must use nothing but the capability."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from podfleet.engine.timeline import Timeline
from podfleet.errors import ConflictError, NotFoundError
from podfleet.fabric.base import (
    ChipState,
    FabricEvent,
    FaultInjection,
    LinkState,
    RankMoves,
    ResumableRuns,
    RunState,
    RunStatus,
    WorkerGroupSpec,
    check_chip_transition,
)
from podfleet.hardware.topology import SwitchedTopology
from podfleet.recovery.model import JobPolicy, RecoveryState
from podfleet.recovery.orchestrator import RecoveryOrchestrator

PAUSE_S = 0.4  # the gang reaches its step boundary
REFORM_S = 1.5  # the moved rank restores and the process group re-forms


class FakeProcessFabric:
    """Four slots, one job at a time; every call returns at once and the work finishes
    later on the timeline, as on local or Ray workers."""

    kind = "fake"

    def __init__(self, tl: Timeline, n: int = 4) -> None:
        self.tl = tl
        self.topology = SwitchedTopology(f"fake-{n}", "cpu", n, 10e9, 20e-6)
        self._chips = [ChipState.HEALTHY] * n
        self._subs: list[Callable[[FabricEvent], None]] = []
        self.spec: WorkerGroupSpec | None = None
        self.state = RunState.RUNNING
        self.step = 0
        self.pids: dict[int, int] = {}  # rank -> pid: a survivor keeps its pid through a move
        self.calls: list[str] = []
        self._next_pid = 100

    # --- Fabric ----------------------------------------------------------------------------
    def attach(self, timeline: object) -> None: ...

    def chip_states(self) -> list[ChipState]:
        return list(self._chips)

    def set_chip_state(self, chip: int, state: ChipState, reason: str) -> None:
        check_chip_transition(self._chips[chip], state)
        self._chips[chip] = state
        self._emit("chip-state", chip=chip, state=state.value, reason=reason)

    def link_states(self) -> list[LinkState]:
        return [LinkState.UP] * len(self.topology.links)

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        return {}

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        return {}

    def launch(self, group: WorkerGroupSpec) -> None:
        self.spec, self.state, self.step = group, RunState.RUNNING, 0
        self.pids = {r: self._pid() for r in range(len(group.chips))}
        self.tl.every(0.1, self._train)

    def stop(self, job_id: str) -> None:
        self.state = RunState.STOPPED

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> None:
        self._subs.append(callback)

    # --- RankMoves -------------------------------------------------------------------------
    def run_status(self, job_id: str) -> RunStatus | None:
        if self.spec is None or job_id != self.spec.job_id:
            return None
        return RunStatus(job_id, self.state, tuple(self.spec.chips), self.step, checkpoint_step=0,
                         step_time_s=0.1)

    def run_logs(self, job_id: str) -> list[str]:
        return []

    def run_spec(self, job_id: str) -> WorkerGroupSpec | None:
        return self.spec if self.spec is not None and self.spec.job_id == job_id else None

    def pause(self, job_id: str, reason: str = "paused") -> RunStatus:
        self.calls.append("pause")
        if self.state in (RunState.RUNNING, RunState.RECOVERING):
            self.tl.call_at(PAUSE_S, self._paused)  # the survivors reach a step boundary
        return self._status(job_id)

    def move_rank(self, job_id: str, rank: int, new_chip: int) -> RunStatus:
        self.calls.append(f"move {rank}->{new_chip}")
        assert self.spec is not None
        if self.state is not RunState.PAUSED:
            raise ConflictError(f"job {job_id} is {self.state.value}, not paused")
        if new_chip in self.spec.chips or self._chips[new_chip] not in (ChipState.HEALTHY, ChipState.DEGRADED):
            raise ConflictError(f"chip {new_chip} is not free")
        chips = list(self.spec.chips)
        old, chips[rank] = chips[rank], new_chip
        self.spec = dataclasses.replace(self.spec, chips=tuple(chips))
        self.pids[rank] = self._pid()  # only the moved rank gets a new worker
        self._emit("rank-moved", job_id=job_id, rank=rank, from_chip=old, to_chip=new_chip, source="replica")
        return self._status(job_id)

    def resume(self, job_id: str, *, from_step: int | None = None) -> RunStatus:
        self.calls.append("resume")
        assert self.spec is not None
        if self.state is not RunState.PAUSED:
            return self._status(job_id)
        bad = [c for c in self.spec.chips if self._chips[c] not in (ChipState.HEALTHY, ChipState.DEGRADED)]
        if bad:
            raise ConflictError(f"chip {bad[0]} does not work; move its rank first")
        self.state = RunState.RECOVERING  # the process group re-forms
        self.tl.call_at(REFORM_S, self._reformed)
        return self._status(job_id)

    def checkpoint_now(self, job_id: str) -> int | None:
        return self.step if self.run_status(job_id) is not None else None

    # --- the fake's own ----------------------------------------------------------------------
    def fail_chip(self, chip: int) -> None:
        """The slot dies under its rank: the fabric reports it and leaves it to recovery."""
        self.set_chip_state(chip, ChipState.FAILED, "slot lost")
        self._emit("chip-failed", chip=chip, cause="chip-failure")

    def _status(self, job_id: str) -> RunStatus:
        got = self.run_status(job_id)
        if got is None:
            raise NotFoundError(f"job {job_id} is not here")
        return got

    def _pid(self) -> int:
        self._next_pid += 1
        return self._next_pid

    def _paused(self) -> None:
        self.state = RunState.PAUSED
        self._emit("job-paused", job_id=self.spec.job_id if self.spec else None, step=self.step)

    def _reformed(self) -> None:
        self.state = RunState.RUNNING
        self._emit("job-resumed", job_id=self.spec.job_id if self.spec else None, step=self.step,
                   path="rank-move")

    def _train(self) -> None:
        if self.state is RunState.RUNNING:
            self.step += 1

    def _emit(self, kind: str, *, chip: int | None = None, job_id: str | None = None, **detail: object) -> None:
        ev = FabricEvent(kind, self.tl.now, chip=chip, job_id=job_id, detail=detail)
        for cb in list(self._subs):
            cb(ev)


def _running(spares: tuple[int, ...] = (3,)) -> tuple[Timeline, FakeProcessFabric, RecoveryOrchestrator]:
    tl = Timeline(seed=1)
    fab = FakeProcessFabric(tl)
    fab.launch(WorkerGroupSpec("job-a", (0, 1, 2), "tiny", steps=10_000))
    orch = RecoveryOrchestrator(fab, tl, spares=spares)
    orch.manage("job-a", JobPolicy(dp=3, on_no_spare="wait"))
    tl.run(until=1.0)
    return tl, fab, orch


def test_the_fake_declares_rank_moves_and_is_not_the_twin() -> None:
    fab = FakeProcessFabric(Timeline())
    assert isinstance(fab, RankMoves)
    assert not isinstance(fab, ResumableRuns) and not isinstance(fab, FaultInjection)


def test_chip_failure_moves_the_rank_to_the_spare_and_resumes_through_rank_moves() -> None:
    tl, fab, orch = _running()
    survivors = {r: fab.pids[r] for r in (0, 2)}
    fab.fail_chip(1)
    tl.run(until=tl.now + 0.01)
    rec = orch.active["job-a"]
    assert rec.kind == "chip-failure" and rec.target == "chip:1"
    tl.run(until=tl.now + 10.0)
    assert rec.state is RecoveryState.DONE, rec.steps
    names = [s.name for s in rec.steps]
    # A process fabric's fault event comes after its own detection: no modelled detect step.
    assert names == ["isolate", "select-spare", "move-rank", "restore", "resume"]
    assert fab.calls == ["pause", "move 1->3", "resume"]
    st = fab.run_status("job-a")
    assert st is not None and st.state is RunState.RUNNING and st.chips == (0, 3, 2)
    assert fab.chip_states()[1] is ChipState.ISOLATED  # a failed chip is fenced out
    assert orch.owner.get(3) == "job-a" and orch.owner.get(1) is None
    assert {r: fab.pids[r] for r in (0, 2)} == survivors  # the other ranks kept their processes
    # The recovery lasted as long as the fabric took: the pause, then the re-formed group
    # (the job is RECOVERING for all of it), with no modelled cost added.
    assert rec.t_end - rec.t_start == pytest.approx(PAUSE_S + REFORM_S, abs=0.11)


def test_a_move_waits_for_a_free_chip_and_goes_on_once_one_is_repaired() -> None:
    tl, fab, orch = _running(spares=())
    fab.set_chip_state(3, ChipState.ISOLATED, "out for service")  # no free chip left
    fab.fail_chip(1)
    tl.run(until=tl.now + 5.0)
    rec = orch.active["job-a"]
    assert rec.state is RecoveryState.WAITING and rec.steps[-1].name == "wait"
    fab.set_chip_state(3, ChipState.HEALTHY, "repaired")
    orch.handle(FabricEvent("chip-healthy", tl.now, chip=3))
    tl.run(until=tl.now + 5.0)
    assert rec.state is RecoveryState.DONE
    st = fab.run_status("job-a")
    assert st is not None and st.chips == (0, 3, 2) and st.state is RunState.RUNNING


def test_a_drain_is_a_live_move_at_a_step_boundary_without_isolating_first() -> None:
    tl, fab, orch = _running()
    rec = orch.drain(2, "predicted failure")
    assert rec is not None
    tl.run(until=tl.now + 10.0)
    assert rec.state is RecoveryState.DONE
    assert [s.name for s in rec.steps][:2] == ["step-boundary", "select-spare"]
    st = fab.run_status("job-a")
    assert st is not None and st.chips == (0, 1, 3)
    assert fab.chip_states()[2] is ChipState.ISOLATED  # off for service once its rank left
