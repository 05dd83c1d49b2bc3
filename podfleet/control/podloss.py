"""A fleet's pod lost as a whole (power, switch): each job spanning it acts on its
``on_pod_loss`` policy before the pod's chips go down (engine thread, inside InjectFault).

* ``requeue`` (the default): workers stopped, chips released, back to the queue from its
  last checkpoint; the scheduler places it again where a gang of its size fits.
* ``wait``: workers stopped (the lost pod's ranks are gone); the job keeps its other pods'
  chips and stays RECOVERING with the reason shown until the pod's chips are back (a
  repair) or another pod has the same block free; then it runs again from its checkpoint
  (``relaunch_waiting``, from the job manager's cycle). The pod it waits for is persisted
  with the job (``JobStatus.pod_wait``), so a restarted plane keeps waiting for it, with
  the same reason and the same kept pods.
* ``shrink``: the job goes on on its other pods, with the planner re-planning TP/PP/DP for
  that smaller placement; its state comes from a data-parallel replica that lost no rank
  (none with ZeRO's sharded optimizer state), else from its checkpoint. A job it cannot
  shrink (every pod lost, or fixed ``parallelism``) is requeued, and says why.

Only RUNNING jobs act on a policy: a job being placed, checkpointed or recovered when the
pod goes is left to the chip-failure path (``drivers.twin``), as for any chip it loses.
Whole pods are the unit: the per-chip recovery (a rank moves within its pod first) cannot
help when the whole pod is gone, so the orchestrator lets go of the job first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from podfleet.control import dispatch, scheduling
from podfleet.control.faults import POD_LOSS, pod_target
from podfleet.control.jobtable import Job
from podfleet.control.lifecycle import JobState
from podfleet.control.placement import Allocation
from podfleet.control.planning import Plan, plan_for_job
from podfleet.control.presets import check_model
from podfleet.errors import ConflictError, PodfleetError
from podfleet.fabric.base import ChipState, Introspection
from podfleet.hardware.topology import FleetTopology
from podfleet.scheduler.fleet import job_fleet
from podfleet.scheduler.jobs import JobPhase
from podfleet.wire import JsonObject

if TYPE_CHECKING:
    from podfleet.control.drivers import JobDriver, RecoveryPort
    from podfleet.control.jobtable import JobTable
    from podfleet.control.runtime import ClusterRuntime

_DOWN = (ChipState.FAILED, ChipState.ISOLATED)


class JobManagerOps(Protocol):
    """What pod loss asks of the job manager (``control.jobs``), so it need not import it."""

    @property
    def table(self) -> JobTable: ...

    def driver(self, rt: ClusterRuntime) -> JobDriver: ...

    @property
    def recovery(self) -> RecoveryPort | None:
        """The recovery service, told to let go of a job a policy moves as a whole."""

    def save_health(self, rt: ClusterRuntime) -> None: ...

    def schedule(self, rt: ClusterRuntime) -> None: ...


def lose_pod(jm: JobManagerOps, rt: ClusterRuntime, pod: int | None, now: float) -> tuple[JsonObject, str]:
    """Take ``pod`` down: each running job on it acts on its policy, then every chip of the
    pod fails at once. The result and the audit target."""
    _, topo, pod = pod_target(rt, pod)  # the twin (FaultInjection), a fleet, the pod in range
    per = topo.group.n_chips
    chips = range(pod * per, (pod + 1) * per)
    states = rt.chip_states()
    up = [c for c in chips if states[c] not in _DOWN]
    if not up:
        raise ConflictError(f"pod {pod} of {rt.rec.name} is down already (every chip failed or isolated)",
                            field="pod")
    why = f"pod {pod} lost ({POD_LOSS}: power or its switch)"
    acted: dict[str, str] = {}
    for job_id in sorted({j for c in chips if (j := rt.owners.get(c)) is not None}):
        job = jm.table.find(job_id)
        if job is None or job.ended or job.state != JobState.RUNNING:
            continue
        acted[job_id] = _act(jm, rt, job, topo, pod, why)
    for c in up:
        rt.fabric.set_chip_state(c, ChipState.FAILED, why)
    rt.logs.append(now, f"fault injected: {POD_LOSS} at pod {pod} ({len(up)} chips down)")
    jm.save_health(rt)
    jm.schedule(rt)
    return {"cluster_id": rt.id, "kind": POD_LOSS, "pod": pod, "chips": len(up), "jobs": acted,
            "injected_at": now}, f"{rt.id}/pod/{pod}"


def _act(jm: JobManagerOps, rt: ClusterRuntime, job: Job, topo: FleetTopology, pod: int, why: str) -> str:
    policy = job.spec.on_pod_loss or "requeue"
    if jm.recovery is not None:  # the orchestrator's per-chip moves cannot bring a whole pod back
        jm.recovery.let_go(rt, job.id)
    if policy == "wait":
        _wait(jm, rt, job, topo, pod, why)
    elif policy == "shrink":
        refused = _shrink(jm, rt, job, topo, pod, why)
        if refused is not None:
            _requeue(jm, rt, job, f"{why}; cannot shrink ({refused})")
            return "requeue"
    else:
        _requeue(jm, rt, job, why)
    return policy


def _requeue(jm: JobManagerOps, rt: ClusterRuntime, job: Job, why: str) -> None:
    jm.driver(rt).stop(job.id)
    rt.owners.release(job.id)
    step = job.status.checkpoint_step
    if job.state == JobState.RUNNING:
        jm.table.transition(job, JobState.RECOVERING, f"{why}; requeueing (on-pod-loss requeue)")
    srec = rt.scheduler.jobs.get(job.id)
    if srec is not None and srec.phase is JobPhase.RUNNING:
        rt.scheduler.requeue(job.id, resume_step=step)
    reason = f"{why}; requeued, resumes from checkpoint step {step}"
    jm.table.transition(job, JobState.PENDING, reason, allocation=scheduling.pending_allocation(reason))


def _wait(jm: JobManagerOps, rt: ClusterRuntime, job: Job, topo: FleetTopology, pod: int, why: str) -> None:
    jm.driver(rt).stop(job.id)
    alloc = job.status.allocation
    assert alloc is not None  # a running job has its chips
    for c in alloc.chips:
        if topo.split_pod(c) == pod:
            rt.owners.release_chip(c, job.id)  # its other pods' chips stay its own
    # Persisted with the transition (``JobStatus.pod_wait``): a restart keeps the wait.
    jm.table.amend(job, pod_wait=pod, view=False)
    jm.table.transition(job, JobState.RECOVERING, waiting_reason(why, pod, job.status.checkpoint_step))


def waiting_reason(why: str, pod: int, step: int) -> str:
    return (f"{why}; waiting for pod {pod} to return or the same block free on another pod (on-pod-loss wait); "
            f"resumes from checkpoint step {step}")


def relaunch_waiting(jm: JobManagerOps, rt: ClusterRuntime, job: Job) -> None:
    """A job waiting for its lost pod: run it again from its checkpoint once the pod's chips
    are back, or on another pod that has the same block free (fewest blocks crossed first)."""
    topo = rt.topology
    pod = job.status.pod_wait
    alloc = job.status.allocation
    if pod is None or alloc is None or not isinstance(topo, FleetTopology):
        return
    per = topo.group.n_chips
    gone = [c for c in alloc.chips if rt.owners.get(c) != job.id]
    free = set(rt.replacement_chips())
    target: list[int] | None = gone if all(c in free for c in gone) else None
    if target is None:
        mine = {topo.split_pod(c) for c in alloc.chips}
        blocks = {topo.block_of(p) for p in mine}
        for q in sorted(set(range(topo.count)) - mine, key=lambda q: (topo.block_of(q) not in blocks, q)):
            cand = [q * per + c % per for c in gone]
            if all(c in free for c in cand):
                target = cand
                break
    if target is None:
        return  # the reason set at the loss says what it waits for
    swap = dict(zip(gone, target, strict=True))
    chips = tuple(swap.get(c, c) for c in alloc.chips)
    pods = tuple(dict.fromkeys(topo.split_pod(c) for c in chips))
    where = f"pod {pod} is back" if target == gone else f"pod {topo.split_pod(target[0])} took pod {pod}'s ranks"
    new = Allocation(chips, alloc.shape, f"after the loss of pod {pod}: {where}", pods=pods,
                     blocks=tuple(topo.block_of(p) for p in pods))
    jm.table.amend(job, pod_wait=None, view=False)  # persisted with the launch's transitions
    jm.table.log(job, f"on-pod-loss wait: {where}; resuming from checkpoint step {job.status.checkpoint_step}")
    dispatch.launch(jm.table, jm.driver(rt), rt, job, new)


def _shrink(jm: JobManagerOps, rt: ClusterRuntime, job: Job, topo: FleetTopology, pod: int, why: str) -> str | None:
    """Go on without ``pod``; None when done, else why it cannot."""
    spec, st = job.spec, job.status
    alloc = st.allocation
    assert alloc is not None
    if spec.parallelism != "auto":
        return "shrinking re-plans the job: it needs parallelism auto, and this job fixed its degrees"
    keep = tuple(c for c in alloc.chips if topo.split_pod(c) != pod)
    if not keep:
        return "every chip it ran on was on that pod"
    pods = tuple(dict.fromkeys(topo.split_pod(c) for c in keep))
    blocks = tuple(topo.block_of(p) for p in pods)
    per_pod = len(keep) // len(pods)
    shape = tuple(alloc.shape) if _prod(alloc.shape) == per_pod else (
        st.plan.block_shape if st.plan is not None and st.plan.block_shape else None)
    if shape is None or _prod(shape) != per_pod:
        shape = topo.group.dims if per_pod == topo.group.n_chips else (per_pod,)
    level = topo.level("block" if len(set(blocks)) == 1 else "fleet")
    try:
        gang = job_fleet(topo, len(pods), tuple(shape), level)
        plan = plan_for_job(gang, check_model(spec.model, spec.model_dims), len(keep), "auto")
    except (PodfleetError, ValueError) as exc:
        return f"no plan for {len(keep)} chips on {len(pods)} pods: {exc}"
    start, source = _resume_point(rt, job, alloc.chips, topo, pod)
    jm.table.transition(job, JobState.RECOVERING, f"{why}; shrinking to {len(pods)} pods (on-pod-loss shrink)")
    rt.owners.release(job.id)
    jm.table.amend(job, plan=plan.on_block(shape), view=False)
    was = st.plan
    new = Allocation(keep, tuple(shape), f"shrunk after the loss of pod {pod}", pods=pods, blocks=blocks)
    drv = jm.driver(rt)
    rt.owners.assign(job.id, keep)
    try:
        drv.start(job, keep, start)
    except PodfleetError as exc:
        jm.table.end(job, JobState.FAILED, f"fabric refused the shrunk launch: {exc.message}")
        return None
    jm.table.progress(job, step=start, view=False)
    degrees = f"tp {plan.tp}, pp {plan.pp}, dp {plan.dp}"
    if was is not None:
        degrees = f"tp {was.tp}, pp {was.pp}, dp {was.dp} -> {degrees}"
    jm.table.transition(job, JobState.RUNNING, f"{why}; shrunk to {len(keep)} chips on {len(pods)} pods "
                        f"({degrees}), resumed from step {start} ({source})", allocation=new)
    return None


def _resume_point(rt: ClusterRuntime, job: Job, chips: tuple[int, ...], topo: FleetTopology,
                  pod: int) -> tuple[int, str]:
    """The step a shrunk job resumes from: the run's own step when a data-parallel replica
    lost no rank and holds the whole state (no ZeRO sharding), else its checkpoint."""
    st = job.status
    plan: Plan | None = st.plan
    fab = rt.fabric
    run = fab.run_status(job.id) if isinstance(fab, Introspection) else None
    ckpt = (st.checkpoint_step, "its checkpoint")
    if run is None or plan is None or plan.dp < 2 or (plan.zero_stage or 0) > 0:
        return ckpt
    # Megatron's rank order (tp fastest, then dp, then pp): rank r is in replica (r // tp) % dp.
    hit = {(r // plan.tp) % plan.dp for r, c in enumerate(chips) if topo.split_pod(c) == pod}
    if len(hit) == plan.dp:
        return ckpt
    return run.step, "a data-parallel replica that lost no rank"


def _prod(xs: tuple[int, ...] | None) -> int:
    out = 1
    for x in xs or ():
        out *= int(x)
    return out
