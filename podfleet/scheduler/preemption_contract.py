"""The preemption contract: a nominated job's victims checkpoint, its moves relaunch,
and it binds on the block they freed.

``Scheduler`` inherits these methods; they run on the engine thread like the rest of it.
The control plane answers a PREEMPT decision by checkpointing each victim and calling
``victims_checkpointed`` (and ``moved`` for each job a reclaim moves out of the block,
within its queue's quota and so not preempted); the answer is PREEMPT until the block
is free, then BIND.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from podfleet.errors import ConflictError
from podfleet.scheduler import starvation
from podfleet.scheduler import status as st
from podfleet.scheduler.jobs import JobPhase, SchedulerJob
from podfleet.scheduler.state import FREE, SchedulerView
from podfleet.scheduler.types import Decision, DecisionKind, Placement

if TYPE_CHECKING:
    from collections.abc import Sequence

    from podfleet.scheduler.extension import Handle

# Phases in which a job's chips count against its team and queue (held or nominated).
HOLDING = (JobPhase.RUNNING, JobPhase.NOMINATED, JobPhase.CHECKPOINTING)


class PreemptionContract:
    """The preemption contract's half of ``Scheduler`` (what it reads of the rest is declared here)."""

    jobs: dict[str, SchedulerJob]
    cluster: SchedulerView
    handle: Handle
    pending: dict[str, None]

    if TYPE_CHECKING:  # defined by ``Scheduler``
        def time(self, now_s: float | None = None) -> float: ...
        def hold(self, job_id: str, chips: Sequence[int], *, _rec: SchedulerJob | None = None) -> None: ...
        def _get(self, job_id: str) -> SchedulerJob: ...
        def _to(self, rec: SchedulerJob, phase: JobPhase, now: float) -> None: ...
        def _free_chips(self, rec: SchedulerJob) -> None: ...
        def _complete(self, rec: SchedulerJob, state: dict[str, Any], placement: Placement,
                      now: float) -> Decision | None: ...

    def victims_checkpointed(self, job_id: str, steps: Mapping[str, int], now_s: float | None = None) -> Decision:
        """The control plane saved these victims' checkpoints (victim -> step).

        Each victim named is released and requeued to resume from its step. Once every
        victim of ``job_id`` has checkpointed, the preemptor is bound on the nominated
        block (BIND); until then the answer is PREEMPT (still waiting). Naming a job
        that is not one of the preemptor's checkpointing victims is a ConflictError.
        """
        now = self.time(now_s)
        rec = self._get(job_id)
        if rec.phase is not JobPhase.NOMINATED:
            raise ConflictError(f"job {job_id} is {rec.phase.value}, not waiting for victims", field="job_id")
        for victim, step in steps.items():
            vr = self.jobs.get(victim)
            if vr is None or victim not in rec.victims:
                raise ConflictError(f"{victim} is not a victim of {job_id} (victims: {', '.join(rec.victims)})", field="steps")
            if vr.phase is JobPhase.CHECKPOINTING:
                self._release_victim(vr, int(step), now)
        waiting = [v for v in rec.victims if self.jobs[v].phase is JobPhase.CHECKPOINTING]
        if waiting:
            return Decision(job_id, DecisionKind.PREEMPT, st.wait(f"waiting for {', '.join(waiting)} to checkpoint"), victims=tuple(waiting))
        nom = rec.nomination
        assert nom is not None  # a NOMINATED job always carries its nomination (_nominate)
        if nom.placement is not None:
            return self._bind_across_pods(rec, nom.placement, now)
        pod = self.cluster.pods[nom.pod]
        local = tuple(nom.local_chips)
        held = {int(o) for o in pod.owner[list(local)] if o != FREE}
        awaited = {self.jobs[j].slot for j in nom.awaited if self.jobs[j].phase in HOLDING}
        moving = self._moves_ready(rec, held)
        if pod.healthy[list(local)].all() and held and held <= awaited | {self.jobs[j].slot for j in moving}:
            if moving:
                # Every victim is saved: the jobs within quota in the block go next, onto
                # the chips the victims freed (the control plane checkpoints, relaunches
                # and calls ``moved``); they are not preempted and keep their work.
                status = st.wait(f"moving {', '.join(moving)} (within its queue's nominal quota, not preempted) "
                                 "out of the block")
                rec.reason = str(status)
                return Decision(job_id, DecisionKind.PREEMPT, status, victims=(),
                                detail={"moves": [(j, c) for j, c in moving.items()]})
            # A reclaim's reservation: jobs within their queue's quota still in the block
            # are not preempted; the job starts when they end (``finish`` runs a cycle).
            left = ", ".join(sorted(self.handle.slots[o] for o in held))
            status = st.wait(f"holding the block; waiting for {left} (within its queue's nominal quota, "
                             "not preempted) to end")
            rec.reason = str(status)
            return Decision(job_id, DecisionKind.PREEMPT, status, victims=())
        # The nominated block may have lost a chip meanwhile: then the job goes back to the queue.
        if not (pod.healthy[list(local)].all() and (pod.owner[list(local)] == FREE).all()):
            pod.nominated[pod.nominated == rec.slot] = FREE
            self.cluster.touch(pod)
            self._to(rec, JobPhase.PENDING, now)
            rec.reason = "Unschedulable: the nominated block changed while victims checkpointed; requeued"
            return Decision(job_id, DecisionKind.PENDING, st.unschedulable(rec.reason))
        idx = self.cluster.blocks
        shape = idx.shapes[int(idx.block_shape[nom.block])].shape
        from podfleet.scheduler.cores import cores_per_chip

        chips = self.cluster.global_chips(nom.pod, local)
        placement = Placement(
            job_id, nom.pod, chips, local, shape,
            tuple(int(v) for v in idx.block_offset[nom.block]),
            cores_per_chip(pod.grid.chip_type), reason=f"block {'x'.join(map(str, shape))} on pod {nom.pod} (after preemption)",
        )
        # NOMINATED -> RUNNING keeps the quota count; _complete moves the phase.
        d = self._complete(rec, {}, placement, now)
        if d is None:
            pod.nominated[pod.nominated == rec.slot] = FREE
            self.cluster.touch(pod)
            self._to(rec, JobPhase.PENDING, now)
            self.pending[job_id] = None
            return Decision(job_id, DecisionKind.PENDING, st.unschedulable(rec.reason))
        return d

    def _bind_across_pods(self, rec: SchedulerJob, placement: Placement, now: float) -> Decision:
        """Every victim of a gang across pods is saved: bind it on its nominated chips, or
        requeue it when one of them failed or was taken meanwhile."""
        chips = list(placement.chips)
        a = self.cluster.arrays
        if a.healthy.reshape(-1)[chips].all() and (a.flat_owner[chips] == FREE).all():
            d = self._complete(rec, {}, placement, now)  # Reserve clears the nominations
            if d is not None:
                return d
            why = rec.reason
        else:
            why = "Unschedulable: a nominated chip failed or was taken while victims checkpointed; requeued"
        starvation.release(self.cluster, rec.slot, list(placement.all_pods))
        self._to(rec, JobPhase.PENDING, now)
        self.pending[rec.job_id] = None
        rec.reason = why
        return Decision(rec.job_id, DecisionKind.PENDING, st.unschedulable(why))

    def _moves_ready(self, rec: SchedulerJob, held: set[int]) -> dict[str, tuple[int, ...]]:
        """The preemptor's moves that can go now: job id -> global target chips, for jobs
        still running in the block whose targets are healthy and free of any holder."""
        nom = rec.nomination
        if nom is None or not nom.moves:
            return {}
        pod = self.cluster.pods[nom.pod]
        out: dict[str, tuple[int, ...]] = {}
        for m in nom.moves:
            mr = self.jobs.get(m.job_id)
            if mr is None or mr.phase is not JobPhase.RUNNING or mr.slot not in held:
                continue
            tgt = list(m.local_chips)
            if pod.healthy[tgt].all() and (pod.owner[tgt] == FREE).all():
                out[m.job_id] = self.cluster.global_chips(nom.pod, m.local_chips)
        return out

    def moved(self, preemptor: str, job_id: str, now_s: float | None = None) -> Decision:
        """The control plane relaunched ``job_id`` (one of ``preemptor``'s moves) on its
        target chips from an on-demand checkpoint: it holds those chips now, stays
        running (no requeue, no preemption counted) and its block chips are free. The
        answer is ``victims_checkpointed``'s: BIND once the block is free."""
        now = self.time(now_s)
        rec = self._get(preemptor)
        nom = rec.nomination
        move = next((m for m in nom.moves if m.job_id == job_id), None) if nom is not None else None
        if rec.phase is not JobPhase.NOMINATED or nom is None or move is None:
            raise ConflictError(f"{job_id} is not being moved for {preemptor}", field="job_id")
        mr = self._get(job_id)
        if mr.phase is not JobPhase.RUNNING:
            raise ConflictError(f"job {job_id} is {mr.phase.value}, not running", field="job_id")
        self.hold(job_id, self.cluster.global_chips(nom.pod, move.local_chips), _rec=mr)
        if move.block >= 0 and mr.placement is not None:  # its new block's shape and offset
            idx = self.cluster.blocks
            mr.placement = replace(mr.placement, shape=idx.shapes[int(idx.block_shape[move.block])].shape,
                                   offset=tuple(int(v) for v in idx.block_offset[move.block]),
                                   reason=f"moved out of the block {preemptor} reclaims")
        pod = self.cluster.pods[nom.pod]
        tgt = list(move.local_chips)
        pod.nominated[tgt] = np.where(pod.nominated[tgt] == rec.slot, FREE, pod.nominated[tgt])
        self.cluster.touch(pod)
        mr.moves += 1
        return self.victims_checkpointed(preemptor, {}, now)

    def _release_victim(self, vr: SchedulerJob, step: int, now: float) -> None:
        if step < vr.last_checkpoint_step:
            raise ConflictError(
                f"checkpoint step {step} of {vr.job_id} is older than its last ({vr.last_checkpoint_step})", field="steps"
            )
        self._free_chips(vr)
        vr.last_checkpoint_step = vr.resume_step = step
        vr.preemptions += 1
        vr.preempted_by = None
        vr.preempt_reason = ""
        self._to(vr, JobPhase.PENDING, now)
        vr.reason = f"Pending: preempted, resumes from checkpoint step {step}"
        self.pending[vr.job_id] = None

