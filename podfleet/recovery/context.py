"""What every part of the recovery orchestrator shares: the fabric (through the
capabilities it declares), the timeline, the chip owners, the journal, and the state of
the flows in progress. The job flows, the link flows and the moves home each get this
explicit context (and each other's public methods), never a back-reference to the
``RecoveryOrchestrator`` that composes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import simpy

from podfleet.control.owners import ChipOwners
from podfleet.engine.timeline import Timeline
from podfleet.errors import NotFoundError
from podfleet.fabric.base import ChipState, Fabric, RankMoves, RunStatus, WorkerGroupSpec
from podfleet.recovery.journal import RecoveryListener
from podfleet.recovery.model import JobPolicy, Recovery, RecoveryState, Step, Timings

USABLE = (ChipState.HEALTHY, ChipState.DEGRADED)


@runtime_checkable
class RecoveryFabric(Fabric, RankMoves, Protocol):
    """A fabric recovery can drive: chip and link states (``Fabric``) and rank moves."""


@dataclass(eq=False)
class RecoveryContext:
    fab: RecoveryFabric
    tl: Timeline
    owner: ChipOwners  # the cluster's chip owners (shared with the job manager; written through its methods)
    timings: Timings
    listener: RecoveryListener
    # True when the fabric's moves take no time of their own (the twin, ``ResumableRuns``):
    # the flows then wait each step's modelled cost (``Timings``). A process fabric's
    # detection, moves and restores take real time, which the flows wait on its run state.
    modelled: bool
    spares: frozenset[int] = frozenset()  # the chips ranks move to first
    policies: dict[str, JobPolicy] = field(default_factory=dict)
    active: dict[str, Recovery] = field(default_factory=dict)  # job id -> its open recovery
    link_active: dict[int, Recovery] = field(default_factory=dict)  # link -> its open recovery
    done: list[Recovery] = field(default_factory=list)
    fenced: dict[int, float] = field(default_factory=dict)  # chip -> share of HBM fenced
    reserved: set[int] = field(default_factory=set)  # chips no rank may move to (e.g. being updated)
    cordoned: set[int] = field(default_factory=set)  # chips the operator cordoned: never a target
    hold_rehome: bool = False  # a firmware rollout is freeing the pod's chips one by one
    procs: list[simpy.Process] = field(default_factory=list)
    # Recovery ids whose current pause already paid a planned rank move: the planned
    # moves asked for together (a firmware batch, a drained node) run concurrently, one
    # worker restart per chip, so the pause pays the move once.
    moved_in_pause: set[str] = field(default_factory=set)
    # Recovery id -> (the pod a tensor-parallel group is moving to, the group's chips).
    follow_to: dict[str, tuple[int, frozenset[int]]] = field(default_factory=dict)
    # (job id, rank) -> the home-pod chip a rank left for another pod.
    origin: dict[tuple[str, int], int] = field(default_factory=dict)
    seq: int = 0

    # --- reads through the fabric's capabilities ----------------------------------------
    def run(self, job_id: str) -> RunStatus:
        got = self.fab.run_status(job_id)
        if got is None:
            raise NotFoundError(f"job {job_id} does not exist on this fabric", field="job_id")
        return got

    def spec(self, job_id: str) -> WorkerGroupSpec:
        got = self.fab.run_spec(job_id)
        if got is None:
            raise NotFoundError(f"job {job_id} does not exist on this fabric", field="job_id")
        return got

    def chip_state(self, chip: int) -> ChipState:
        return self.fab.chip_states()[chip]

    def usable(self, chip: int) -> bool:
        return self.chip_state(chip) in USABLE

    def cost(self, seconds: float) -> simpy.Event:
        """A step's modelled cost on the timeline (none on a fabric whose steps take real time)."""
        return self.tl.env.timeout(seconds if self.modelled else 0.0)

    # --- the journal ------------------------------------------------------------------------
    def new(self, kind: str, target: str, reason: str, job_id: str | None) -> Recovery:
        self.seq += 1
        rec = Recovery(f"rc-{self.tl.seed}-{self.seq:06d}", kind, target, reason, self.tl.now, job_id=job_id,
                       detected_t=self.tl.now)
        self.tl.emit("recovery-start", recovery=rec.id, recovery_kind=kind, target=target, reason=reason,
                     job_id=job_id)
        return rec

    def step(self, rec: Recovery, name: str, reason: str, **detail: Any) -> Step:
        now = self.tl.now
        if rec.steps and rec.steps[-1].t_end is None:
            rec.steps[-1].t_end = now
        st = Step(name, reason, now, detail={k: v for k, v in detail.items() if v is not None})
        rec.steps.append(st)
        self.tl.emit("recovery-step", recovery=rec.id, job_id=rec.job_id, step=name, reason=reason, **st.detail)
        self.listener.recovery_changed(rec)
        return st

    def close(self, rec: Recovery, state: RecoveryState, before_journal: Callable[[], None] | None = None) -> bool:
        """End a flow's record (``before_journal`` runs once it is ended, before the
        journal is written); False when it had ended already."""
        if rec.state in (RecoveryState.DONE, RecoveryState.FAILED):
            return False
        if rec.steps and rec.steps[-1].t_end is None:
            rec.steps[-1].t_end = self.tl.now
        rec.set_state(state)
        rec.t_end = self.tl.now
        if before_journal is not None:
            before_journal()
        self.listener.recovery_changed(rec)
        self.done.append(rec)
        self.tl.emit("recovery-end", recovery=rec.id, job_id=rec.job_id, state=state.value,
                     duration_s=rec.t_end - rec.t_start, detect_s=(rec.detected_t or rec.t_end) - rec.t_start,
                     restored_from=rec.restored_from)
        return True
