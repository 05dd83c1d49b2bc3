"""Applying the scheduler's decisions to jobs: bind, preempt (checkpoint and requeue).

Engine thread, inside the caller's store transaction. Every step is a job state change
or a log line with its reason:

* BIND: ``PENDING -> PLACING -> RUNNING`` on the placement's chips (rank order), from
  the job's checkpoint step, with the plan (``parallelism: auto``: the one chosen with
  the block shape) in ``WorkerGroupSpec.options``.
* PREEMPT: each victim is checkpointed at its current step (the twin: its step counter
  is its whole state; another fabric: its last saved checkpoint), the checkpoint is
  persisted, the victim is stopped and goes ``RUNNING -> CHECKPOINTING -> PENDING`` to
  resume from that step; then ``victims_checkpointed`` gives the preemptor its BIND. A
  victim that cannot be checkpointed now (recovering, finishing) is retried on the next
  cycle: no victim is ever stopped without its checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from podfleet.control import fabric_ops, scheduling
from podfleet.control.ids import new_id
from podfleet.control.lifecycle import TERMINAL, JobState
from podfleet.control.placement import Allocation
from podfleet.scheduler import Decision, DecisionKind
from podfleet.scheduler.jobs import JobPhase
from podfleet.scheduler.types import fmt_shape
from podfleet.store.records import CheckpointRecord

WAIT_REFRESH_S = 5.0  # how stale a pending job's shown queue wait may get

if TYPE_CHECKING:
    from podfleet.control.jobs import JobManager
    from podfleet.control.runtime import ClusterRuntime


def cycle(jm: JobManager, rt: ClusterRuntime) -> None:
    """One scheduling cycle for a cluster: settle preemptions, place, show reasons."""
    sched = rt.scheduler
    scheduling.sync(rt)
    for pid in list(rt.preempting):
        settle(jm, rt, pid)
    if sched.pending:
        for d in sched.schedule():
            apply(jm, rt, d)
    now = sched.clock()
    for jid in list(sched.pending):
        rec = jm.records.get(jid)
        srec = sched.jobs.get(jid)
        if rec is None or srec is None or rec.state != JobState.PENDING:
            continue
        reason = sched.reason(jid)
        st = rec.status.setdefault("scheduling", {})
        wait = round(scheduling.queue_wait(sched, jid, now), 1)
        # Re-render a pending job's view when its reason changes or its wait moved by
        # 5 s: re-rendering every pending job on every cycle made a cycle O(queue) in
        # dict copies, which dominated submit latency with a long queue.
        if rec.status.get("reason") != reason or abs(wait - float(st.get("queue_wait_s") or 0.0)) >= WAIT_REFRESH_S:
            # Memory only: a reason or a wait is not a transition (persisted with the next one).
            rec.status["reason"] = reason
            rec.status["allocation"] = scheduling.pending_allocation(reason)
            st["queue_wait_s"] = wait
            jm._refresh(rec)


def apply(jm: JobManager, rt: ClusterRuntime, d: Decision) -> None:
    if d.kind is DecisionKind.BIND:
        bind(jm, rt, d)
    elif d.kind is DecisionKind.PREEMPT:
        rec = jm.records.get(d.job_id)
        if rec is not None:
            jm._log(rec, f"preempting {', '.join(d.victims)}: {d.status}")
        rt.preempting[d.job_id] = None
        settle(jm, rt, d.job_id)
    elif d.kind is DecisionKind.REJECTED:
        rec = jm.records.get(d.job_id)
        if rec is not None and JobState(rec.state) not in TERMINAL:
            jm._end(rec, JobState.FAILED, f"unschedulable: {d.status}")


def bind(jm: JobManager, rt: ClusterRuntime, d: Decision) -> None:
    rec = jm.records.get(d.job_id)
    p = d.placement
    if rec is None or rec.state != JobState.PENDING or p is None:
        rt.scheduler.finish(d.job_id)  # nothing to run any more: give the chips back
        return
    plan = scheduling.plan_fields(p.plan)
    if plan is not None:  # parallelism auto: the plan chosen together with the shape
        rec.status["plan"] = {**plan, "block_shape": list(p.shape)}
    resume = max(int(rec.status.get("checkpoint_step", 0)), d.resume_step)
    rec.status["checkpoint_step"] = resume
    st = rec.status.setdefault("scheduling", {})
    st["queue_wait_s"] = round(scheduling.queue_wait(rt.scheduler, rec.id), 3)
    st["team"] = rec.spec.get("team") or "default"
    jm._set_state(rec, JobState.PLACING,
                  f"bound to a {fmt_shape(p.shape)} block ({len(p.chips)} chips): {p.reason}",
                  allocation=scheduling.allocation_view(p))
    jm._launch(rt, rec, Allocation(p.chips, p.shape, p.reason))


def settle(jm: JobManager, rt: ClusterRuntime, preemptor: str) -> None:
    """Checkpoint what victims can be now; bind the preemptor once all are saved."""
    sched = rt.scheduler
    srec = sched.jobs.get(preemptor)
    if srec is None or srec.phase is not JobPhase.NOMINATED:
        rt.preempting.pop(preemptor, None)
        return
    saved: dict[str, int] = {}
    for v in srec.victims:
        vr = sched.jobs.get(v)
        if vr is not None and vr.phase is JobPhase.CHECKPOINTING:
            step = _checkpoint_victim(jm, rt, v, preemptor)
            if step is not None:
                saved[v] = step
    d = sched.victims_checkpointed(preemptor, saved)
    if d.kind is DecisionKind.PREEMPT:
        return  # some victims could not be saved yet: retried on the next cycle
    rt.preempting.pop(preemptor, None)
    if d.kind is DecisionKind.BIND:
        bind(jm, rt, d)


def _checkpoint_victim(jm: JobManager, rt: ClusterRuntime, job_id: str, by: str) -> int | None:
    rec = jm.records.get(job_id)
    if rec is None or JobState(rec.state) in TERMINAL:
        return None  # it ended: ``finish`` already released it
    if rec.state != JobState.RUNNING or (jm.recovery is not None and jm.recovery.owns(job_id)):
        return None  # recovering or being placed: its state is not on chips now
    if fabric_ops.can_checkpoint_now(rt.fabric):
        step = fabric_ops.checkpoint_now(rt.fabric, job_id)
        if step is None:
            return None  # finished on the fabric: its own event will release it
        how = "saved now"
    else:  # no on-demand checkpoint: the last saved one (work since it is redone)
        step = int(rec.status.get("checkpoint_step", 0))
        how = "its last checkpoint"
    step = max(step, int(rec.status.get("checkpoint_step", 0)))
    plane = jm.plane
    prio = f"priority {jm.records[by].spec.get('priority')} > {rec.spec.get('priority')}" if by in jm.records else ""
    jm._set_state(rec, JobState.CHECKPOINTING, f"preempted by {by} ({prio}): checkpoint at step {step} ({how})")
    plane.store.add_checkpoint(CheckpointRecord(
        new_id("ckpt"), rec.id, step, f"{_scheme(rt)}://{rec.id}/step-{step}",
        plane.now(), {"reason": "preemption", "preempted_by": by}))
    rec.status["checkpoint_step"] = step
    rt.scheduler.report_checkpoint(job_id, step)
    fabric_ops.stop(rt.fabric, rec.id)
    jm._release(rec)
    st = rec.status.setdefault("scheduling", {})
    st["preemptions"] = int(st.get("preemptions", 0)) + 1
    reason = f"preempted by {by}; requeued, resumes from checkpoint step {step}"
    jm._set_state(rec, JobState.PENDING, reason, allocation=scheduling.pending_allocation(reason))
    return step


def _scheme(rt: ClusterRuntime) -> str:
    kind = str(getattr(rt.fabric, "kind", "fabric"))
    return "twin" if kind == "sim" else kind
