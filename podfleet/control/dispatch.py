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
* MOVE (a reclaim's ``Nomination.moves``): once the victims are saved, a job within its
  queue's nominal quota that sits in the reclaimed block is checkpointed on demand (the
  write charged as a victim's), stopped and relaunched at once on the chips the
  victims freed, from that step: ``RUNNING -> CHECKPOINTING -> RUNNING``, never
  requeued, no preemption counted; then ``Scheduler.moved`` gives the preemptor its BIND.

It is given the job table and the cluster's driver, and calls nothing back in the job
manager that runs the cycle: a decision goes from here to the driver and the fabric.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from podfleet.control import scheduling
from podfleet.control.drivers.base import JobDriver
from podfleet.control.jobtable import Job, JobTable
from podfleet.control.lifecycle import JobState
from podfleet.control.placement import Allocation
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import PodfleetError
from podfleet.scheduler import Decision, DecisionKind
from podfleet.scheduler.jobs import JobPhase
from podfleet.scheduler.types import fmt_shape

WAIT_REFRESH_S = 5.0  # how far a pending job's shown queue wait may drift before it is re-rendered


def cycle(table: JobTable, drv: JobDriver, rt: ClusterRuntime, only: Collection[str] | None = None) -> bool:
    """One scheduling cycle for a cluster: settle preemptions, place, show reasons.

    ``only``: re-render the shown reason and wait of just these pending jobs (the ones
    queued since the last sweep), unless the cycle bound or preempted something; None:
    of every pending job. Returns True when every pending job's view was brought up to
    date (the caller then knows when the last whole sweep was)."""
    sched = rt.scheduler
    scheduling.sync(rt)
    preempting = bool(rt.preempting)
    for pid in list(rt.preempting):
        settle(table, drv, rt, pid)
    decided = False
    if sched.pending:
        for d in sched.schedule():
            apply(table, drv, rt, d)
            decided = True
    # What was placed, preempted or settled changed the cluster, so other jobs' reasons
    # may have changed too: every pending job then, else only the new ones.
    if only is None or decided or preempting:
        show_pending(table, rt, sched.pending)
        return True
    show_pending(table, rt, [j for j in only if j in sched.pending])
    return False


def show_pending(table: JobTable, rt: ClusterRuntime, job_ids: Iterable[str]) -> None:
    """Bring the shown reason and queue wait of these pending jobs up to date (memory
    only: a reason or a wait is not a transition; persisted with the next one)."""
    sched = rt.scheduler
    find, records = table.find, sched.jobs
    now = sched.clock()
    for jid in list(job_ids):
        rec = records.get(jid)
        job = find(jid)
        if rec is None or job is None or job.state != JobState.PENDING:
            continue
        reason = rec.reason
        wait = round(scheduling.record_wait(rec, now), 1)
        # Re-render a pending job's view when its reason changes or its wait moved by
        # 5 s: re-rendering every pending job on every cycle made a cycle O(queue) in
        # dict copies, which dominated submit latency with a long queue.
        if job.status.reason != reason or abs(wait - float(job.status.scheduling.queue_wait_s or 0.0)) >= WAIT_REFRESH_S:
            table.scheduled(job, queue_wait_s=wait, view="none")
            table.amend(job, reason=reason, allocation=scheduling.pending_allocation(reason))


def apply(table: JobTable, drv: JobDriver, rt: ClusterRuntime, d: Decision) -> None:
    if d.kind is DecisionKind.BIND:
        bind(table, drv, rt, d)
    elif d.kind is DecisionKind.PREEMPT:
        job = table.find(d.job_id)
        if job is not None:
            table.log(job, f"preempting {', '.join(d.victims)}: {d.status}")
        rt.preempting[d.job_id] = None
        settle(table, drv, rt, d.job_id)
    elif d.kind is DecisionKind.REJECTED:
        job = table.find(d.job_id)
        if job is not None and not job.ended:
            table.end(job, JobState.FAILED, f"unschedulable: {d.status}")


def bind(table: JobTable, drv: JobDriver, rt: ClusterRuntime, d: Decision) -> None:
    job = table.find(d.job_id)
    p = d.placement
    if job is None or job.state != JobState.PENDING or p is None:
        rt.scheduler.finish(d.job_id)  # nothing to run any more: give the chips back
        return
    plan = scheduling.plan_fields(p.plan)
    # parallelism auto: the plan chosen together with the shape (the transition saves it)
    if plan is not None:
        table.amend(job, plan=plan.on_block(p.shape), view=False)
    table.amend(job, checkpoint_step=d.resume_step, view=False)
    table.scheduled(job, queue_wait_s=round(scheduling.queue_wait(rt.scheduler, job.id), 3),
                    team=job.spec.team or "default", view="none")
    table.transition(job, JobState.PLACING,
                        f"bound to a {fmt_shape(p.shape)} block ({len(p.chips)} chips): {p.reason}",
                        allocation=scheduling.allocation_view(p))
    launch(table, drv, rt, job, Allocation(p.chips, p.shape, p.reason, pods=p.pods, blocks=p.blocks))


def launch(table: JobTable, drv: JobDriver, rt: ClusterRuntime, job: Job, alloc: Allocation) -> None:
    """Start a PLACING or RECOVERING job on ``alloc``'s chips from its checkpoint step."""
    rt.owners.assign(job.id, alloc.chips)
    start = job.status.checkpoint_step
    try:
        drv.start(job, alloc.chips, start)
    except PodfleetError as exc:  # the fabric refused: the job cannot run as placed
        table.end(job, JobState.FAILED, f"fabric refused the launch: {exc.message}")
        return
    table.progress(job, step=start, view=False)
    if job.state == JobState.RECOVERING and drv.holds_recovering(job.id):
        # A relaunch whose gang starts in the background: RECOVERING until it runs (the
        # driver moves it on at the fabric's job-started), so the state is true meanwhile.
        table.amend(job, allocation=alloc, persist=True)
        table.set_reason(job, f"relaunching on {len(alloc.chips)} chips from step {start}; waiting for the gang "
                              "to start")
        return
    table.transition(job, JobState.RUNNING, f"running on {len(alloc.chips)} chips from step {start}",
                     allocation=alloc)
    # No re-render here: the next tick shows the new owner (one render per tick at most).


def settle(table: JobTable, drv: JobDriver, rt: ClusterRuntime, preemptor: str) -> None:
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
            step = _checkpoint_victim(table, drv, rt, v, preemptor)
            if step is not None:
                saved[v] = step
    d = sched.victims_checkpointed(preemptor, saved)
    for mover, chips in d.detail.get("moves", ()):
        if _move(table, drv, rt, mover, tuple(chips), preemptor):
            d = sched.moved(preemptor, mover)
            if d.kind is not DecisionKind.PREEMPT:
                break
    if d.kind is DecisionKind.PREEMPT:
        return  # some victims (or moves) could not be saved yet: retried on the next cycle
    rt.preempting.pop(preemptor, None)
    if d.kind is DecisionKind.BIND:
        bind(table, drv, rt, d)


def _checkpoint_victim(table: JobTable, drv: JobDriver, rt: ClusterRuntime, job_id: str, by: str) -> int | None:
    job = table.find(job_id)
    if job is None or job.ended:
        rt.checkpoint_writes.pop(job_id, None)
        return None  # it ended: ``finish`` already released it
    if job.state != JobState.RUNNING or drv.owns(job_id):
        return None  # recovering or being placed: its state is not on chips now
    if drv.on_demand_checkpoints:
        got = _on_demand(table, drv, rt, job, by)
        if got is None:
            return None  # being written (the chips stay the victim's), or finished on the fabric
        saved, how = got, "saved now"
    else:  # no on-demand checkpoint: the last saved one (work since it is redone)
        saved, how = 0, "its last checkpoint"
    step = max(saved, job.status.checkpoint_step)
    pre = table.find(by)
    srec = rt.scheduler.jobs.get(job_id)
    if srec is not None and srec.preempt_reason:  # e.g. a queue reclaiming the chips it lent
        prio = srec.preempt_reason
    else:
        prio = f"priority {pre.spec.priority} > {job.spec.priority}" if pre is not None else ""
    table.transition(job, JobState.CHECKPOINTING, f"preempted by {by} ({prio}): checkpoint at step {step} ({how})")
    table.record_checkpoint(job, step, f"{drv.checkpoint_scheme}://{job.id}/step-{step}",
                            {"reason": "preemption", "preempted_by": by})
    drv.stop(job.id)
    rt.owners.release(job.id)
    table.scheduled(job, preempted=True, view="none")
    reason = f"preempted by {by} ({prio}); requeued, resumes from checkpoint step {step}"
    table.transition(job, JobState.PENDING, reason, allocation=scheduling.pending_allocation(reason))
    return step


def _move(table: JobTable, drv: JobDriver, rt: ClusterRuntime, job_id: str, chips: tuple[int, ...],
          by: str) -> bool:
    """Move a running job out of the block ``by`` reclaims onto ``chips`` (free now): its
    on-demand checkpoint (the write charged: it keeps its old chips meanwhile), then a
    relaunch there from that step. True once it runs on ``chips``; False while the write
    is under way, or when it cannot be moved now (retried on the next cycle)."""
    job = table.find(job_id)
    if job is None or job.ended:
        rt.checkpoint_writes.pop(job_id, None)
        return False  # it ended: ``finish`` released its chips, the block frees itself
    if job.state != JobState.RUNNING or drv.owns(job_id) or not drv.on_demand_checkpoints:
        return False
    got = _on_demand(table, drv, rt, job, by, f"moving out of the block {by} reclaims (not a preemption)")
    if got is None:
        return False
    step = max(got, job.status.checkpoint_step)
    srec = rt.scheduler.jobs.get(job_id)
    shape = srec.placement.shape if srec is not None and srec.placement is not None else (len(chips),)
    why = f"moved by {by}: within its queue's nominal quota, so not preempted"
    table.transition(job, JobState.CHECKPOINTING, f"{why}: checkpoint at step {step} (saved now)")
    table.record_checkpoint(job, step, f"{drv.checkpoint_scheme}://{job.id}/step-{step}",
                            {"reason": "move", "moved_by": by})
    drv.stop(job.id)
    rt.owners.release(job.id)
    table.log(job, f"{why}; relaunching on {len(chips)} chips from step {step}")
    launch(table, drv, rt, job, Allocation(chips, shape, f"{why}; relaunched from step {step}"))
    return job.state == JobState.RUNNING


def _on_demand(table: JobTable, drv: JobDriver, rt: ClusterRuntime, job: Job, by: str,
               what: str = "") -> int | None:
    """The step of the victim's on-demand checkpoint once it is written, None until then.

    It is asked for at the first call; the victim keeps its chips until it is written
    (the preemptor must not start on chips whose state is still being saved), and the
    job manager runs a cycle when it is due (``next_checkpoint_due``). The twin's write
    takes ``drv.checkpoint_write_s`` (steps made meanwhile are not in it: redone). A
    process fabric's gang saves at its next step boundary and holds there until stopped;
    the fabric's report ends the wait (its ``checkpoint`` event runs a cycle), and past
    ``drv.checkpoint_write_s`` without one the victim is preempted from its last
    checkpoint (0 here), said in its log."""
    now = rt.scheduler.clock()
    writing = rt.checkpoint_writes.get(job.id)
    if writing is None:
        step = drv.checkpoint_now(job.id)
        if step is None:
            return None  # finished on the fabric: its own event will release it
        write_s = drv.checkpoint_write_s(job.id)
        if write_s <= 0:
            return step
        rt.checkpoint_writes[job.id] = (step, now + write_s)
        if drv.checkpoint_reported:
            table.log(job, f"{what or 'preempted by ' + by}: asked for an on-demand checkpoint at the step "
                           f"boundary after step {step} (waiting up to {write_s:.3g} s); its chips stay its own "
                           "until it is written")
        else:
            table.log(job, f"{what or 'preempted by ' + by}: writing an on-demand checkpoint at step {step} "
                           f"({write_s:.3g} s); its chips stay its own until it is written")
        return None
    step, due = writing
    saved = drv.checkpoint_saved(job.id, step) if drv.checkpoint_reported else None
    if saved is None and now < due:
        return None
    del rt.checkpoint_writes[job.id]
    if not drv.checkpoint_reported:
        return step
    if saved is None:
        table.log(job, f"the on-demand checkpoint was not reported within {drv.checkpoint_write_s(job.id):.3g} s: "
                       f"preempted from its last checkpoint (the work since is redone)")
        return 0
    return saved


def next_checkpoint_due(rt: ClusterRuntime) -> float | None:
    """When the next on-demand checkpoint being written is done, if later than now (None:
    none is). Writes of jobs no longer waiting to be released are dropped; one already
    due is settled by the cycle running now or the next one, never woken for again (a
    wake-up at once would loop while its victim cannot be released yet)."""
    sched = rt.scheduler
    moving = {m.job_id for pid in rt.preempting if (p := sched.jobs.get(pid)) is not None
              and p.nomination is not None for m in p.nomination.moves}
    for jid in [j for j in rt.checkpoint_writes
                if ((r := sched.jobs.get(j)) is None or r.phase is not JobPhase.CHECKPOINTING) and j not in moving]:
        del rt.checkpoint_writes[jid]
    now = sched.clock()
    return min((due for _, due in rt.checkpoint_writes.values() if due > now), default=None)
