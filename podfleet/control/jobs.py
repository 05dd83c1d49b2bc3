"""Job commands and placement on the engine thread: submit, stop, schedule, launch,
relaunch after a lost chip, reload after a restart.

Every change to a job goes through the job table (``control.jobtable``); what differs
between fabrics is the cluster's job driver (``control.drivers``), chosen once per
cluster from what its fabric declares. A job's record (state, progress, allocation,
timestamps) is persisted on every state change and checkpoint; progress between
checkpoints lives in memory (a restart resumes from the last checkpoint, as a real job
would).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from podfleet.control import dispatch, podloss, reattach, scheduling
from podfleet.control.dependencies import GateKind, Holds, array_view, parse_array
from podfleet.control.drivers import JobDriver, RecoveryPort, driver_for
from podfleet.control.ids import new_id, resolve_ref
from podfleet.control.jobtable import Job, JobStatus, JobTable, Progress
from podfleet.control.lifecycle import HOLDS_CHIPS, ClusterState, JobState
from podfleet.control.logbuf import LogBuffer, rfc3339
from podfleet.control.ports import PlaneCore
from podfleet.control.relaunch import relaunch_on_replacements
from podfleet.control.runtime import ClusterRuntime
from podfleet.control.specs import JobSpec
from podfleet.control.warm import Warmth
from podfleet.control.workdir import code_root
from podfleet.errors import (
    ConflictError,
    InfeasibleError,
    InvalidInputError,
    NotFoundError,
)
from podfleet.fabric.base import ChipState
from podfleet.scheduler import DecisionKind
from podfleet.scheduler.jobs import JobPhase
from podfleet.security.code import allowed_code_dirs, confine_entrypoint
from podfleet.timespec import fmt_duration
from podfleet.wire import JsonObject

RELAUNCH_RETRY_S = 2.0  # how soon a recovering job waiting for a healthy chip looks again
# How often, at most, a cluster's scheduling cycles re-render the shown reason and wait of
# every pending job (the cycles between show only the jobs queued since): with a long
# queue that sweep was half of every submit's cycle. A sweep is due at most this long
# after a cycle that skipped it.
SWEEP_S = 0.5


class JobManager:
    def __init__(self, plane: PlaneCore, table: JobTable) -> None:
        self.plane = plane
        self.table = table
        self.drivers: dict[str, JobDriver] = {}  # cluster id -> its driver
        self.recovery: RecoveryPort | None = None
        self._relaunch_retry: set[str] = set()  # recovering jobs with a relaunch retry due
        # Per cluster id: jobs queued since its last sweep of the pending views, when that
        # sweep was (timeline time), and whether a deferred one is due (``schedule``).
        self._unshown: dict[str, set[str]] = {}
        self._swept_at: dict[str, float] = {}
        self._sweep_due: set[str] = set()
        self._checkpoint_wake: dict[str, float] = {}  # cluster id -> when its next checkpoint wake-up runs
        table.on_end(self._release)
        table.on_checkpoint(self._report_checkpoint)
        # Dependencies and arrays (``control.dependencies``): jobs held out of the queue,
        # looked at again after any job ends (once the end is done: listeners run first).
        self.holds = Holds(table.find)
        self._recheck_due = False
        self._restoring = False
        table.on_end(self._held_may_move)
        # A follower's parsed specs, for its takeover's reload (``control.warm``); None: none kept.
        self.warmth: Warmth | None = None

    @property
    def hang_restarts(self) -> int:
        """Relaunches of a job whose ranks hang before it fails as its code's fault."""
        return self.plane.hang_restarts

    def use_warmth(self, warmth: Warmth) -> None:
        """A reload takes the specs ``warmth`` parsed while this server followed."""
        self.warmth = warmth

    def use_recovery(self, recovery: RecoveryPort) -> None:
        """Chip faults of running twin jobs go to ``recovery`` first (composition root)."""
        self.recovery = recovery

    def attach(self, rt: ClusterRuntime) -> JobDriver:
        """Choose the cluster's driver from its fabric's capabilities (once per cluster)."""
        drv = self.drivers[rt.id] = driver_for(self, rt)
        return drv

    def detach(self, rt: ClusterRuntime) -> None:
        self.drivers.pop(rt.id, None)
        self._unshown.pop(rt.id, None)
        self._swept_at.pop(rt.id, None)

    def driver(self, rt: ClusterRuntime) -> JobDriver:
        return self.drivers[rt.id]

    # --- helpers the drivers use ------------------------------------------------------------
    def now(self) -> float:
        return self.plane.now()

    def save_health(self, rt: ClusterRuntime) -> None:
        self.plane.save_health(rt)

    def render(self, rt: ClusterRuntime) -> None:
        self.plane.render(rt)

    # --- commands ----------------------------------------------------------------------------
    def submit(self, cluster_ref: str, body: JsonObject, *, actor: str = "system",
               client_token: str | None = None) -> JsonObject:
        plane = self.plane
        created: list[Job] = []

        def do() -> tuple[JsonObject, str]:
            rt = plane.resolve(cluster_ref)
            for fixed in ("priority_class", "priority_preemption"):
                if fixed in body:
                    raise InvalidInputError(f"{fixed} is set from the priority class (submit with priority NAME)",
                                            field=fixed)
            spec = JobSpec.parse(plane.priorities.resolve(dict(body)))
            if spec.entrypoint is not None:  # only pushed artifacts or admin-allowed dirs run
                spec = replace(spec, entrypoint=confine_entrypoint(
                    spec.entrypoint, code_root=code_root(plane.workdir), allowed_dirs=allowed_code_dirs()))
            if rt.state not in (ClusterState.ACTIVE, ClusterState.DEPLOYING):
                raise ConflictError(f"cluster {rt.rec.name} is {rt.state.value}; jobs need an active cluster",
                                    field="cluster")
            # The gang's size first: what the driver checks next (batch splits, worker
            # options) is about a world of that size, and would blame the wrong field.
            capacity = rt.topology.n_chips - len(rt.spares)
            if spec.chips > capacity:
                raise InfeasibleError(
                    f"chips {spec.chips} exceeds what cluster {rt.rec.name} can place "
                    f"({rt.topology.n_chips} chips - {len(rt.spares)} spares = {capacity})",
                    field="chips", allowed=f"1-{capacity}",
                )
            drv = self.driver(rt)
            layout, params = drv.check_submit(spec)
            if spec.queue and rt.scheduler.queues.get(spec.queue) is None:
                raise NotFoundError(f"queue {spec.queue!r} not found on cluster {rt.rec.name} (queues: "
                                    f"{', '.join(sorted(rt.scheduler.queues.specs))})", field="queue")
            for fixed in ("array_id", "array_index", "array_limit"):
                if getattr(spec, fixed) is not None:
                    raise InvalidInputError(f"{fixed} is set by the control plane (submit with array)", field=fixed)
            # An array id stands for all its members.
            spec = replace(
                spec, after_ok=self.holds.expand(spec.after_ok, "after_ok", self.resolve_id) if spec.after_ok else spec.after_ok,
                after_any=self.holds.expand(spec.after_any, "after_any", self.resolve_id) if spec.after_any
                else spec.after_any)
            # A request no pod can ever satisfy is refused here, with the scheduler's reason.
            verdict = rt.scheduler.check(scheduling.job_request("job-check", spec, layout, preemptible=drv.preemptible(spec),
                                                                    auto_plan=drv.plans_models))
            if verdict.rejected:
                raise InfeasibleError(f"no pod of cluster {rt.rec.name} can ever run this job: {verdict.reason}",
                                      field="chips")
            members = [spec]
            if spec.array is not None:
                indices, limit = parse_array(spec.array)
                arr = new_id("arr")
                base = spec.name or "array"
                members = [replace(spec, array=None, array_id=arr, array_index=i, array_limit=limit,
                                               name=f"{base}[{i}]"[:63]) for i in indices]
            now = plane.now()
            for m in members:
                job = Job(new_id("job"), rt.id, JobState.PENDING, m, JobStatus(
                    progress=Progress(step=0, steps=spec.steps), reason="waiting for placement",
                    params=params, plan=layout, timestamps={JobState.PENDING.value: rfc3339(now)},
                    submitted_by=actor,
                ), now, now)
                plane.store.save_job(job.record())
                created.append(job)
            first = created[0]
            view = self.table.view_of(first)
            return view, (first.spec.array_id or first.id)

        out = plane.mutation("SubmitTrainingJob", actor, cluster_ref, do, body={**body, "cluster": cluster_ref},
                             client_token=client_token, replay=self._describe_submitted)
        for job in created:  # after the commit
            self.table.add(job)
            self.holds.note(job.id, job.spec)
            s = job.spec
            self.table.log(job, f"submitted: {s.model} on {s.chips} chips, {s.steps} steps"
                           f", priority {s.priority}" + (f", team {s.team}" if s.team else ""))
            rt = plane.clusters[job.cluster_id]
            self._enqueue(rt, job)
        if created:
            rt = plane.clusters[created[0].cluster_id]
            if rt.state == ClusterState.ACTIVE:
                self.schedule(rt)
            out = self.table.describe(created[0].id)
            arr = created[0].spec.array_id
            if arr:
                out = {**out, "array": self.describe_array(arr)}
        return out

    def _describe_submitted(self, ref: str) -> JsonObject:
        """A replayed submit's answer: the job, or an array's first member with the array."""
        if ref.startswith("arr-"):
            arr = self.describe_array(ref)
            return {**self.table.describe(arr["jobs"][0]["id"]), "array": arr}
        return self.describe(ref)

    # --- arrays ------------------------------------------------------------------------------
    def describe_array(self, array_id: str) -> JsonObject:
        return array_view(array_id, [j for j in (self.table.find(m) for m in self.holds.members(array_id))
                                     if j is not None])

    def stop_array(self, array_id: str, *, actor: str = "system") -> JsonObject:
        def do() -> tuple[JsonObject, str]:
            view = self.describe_array(array_id)
            live = [j for j in (self.table.find(m["id"]) for m in view["jobs"]) if j is not None and not j.ended]
            if not live:
                raise ConflictError(f"job array {array_id} already ended ({view['state']})", field="array")
            for j in live:
                self.table.end(j, JobState.STOPPED, f"stopped by request (array {array_id})")
            return self.describe_array(array_id), array_id

        out = self.plane.mutation("StopJobArray", actor, array_id, do)
        rt = self.plane.clusters.get(out["cluster_id"])
        if rt is not None:
            self.schedule(rt)
        return out

    def stop(self, job_id: str, *, actor: str = "system") -> JsonObject:
        def do() -> tuple[JsonObject, str]:
            job = self.table.get(self.resolve_id(job_id))
            if job.ended:
                raise ConflictError(f"job {job_id} already ended ({job.state.value})", field="job")
            self.table.end(job, JobState.STOPPED, "stopped by request")
            return self.table.describe(job.id), job.id

        out = self.plane.mutation("StopTrainingJob", actor, job_id, do)
        rt = self.plane.clusters.get(out["cluster_id"])
        if rt is not None:
            self.schedule(rt)
        return out

    def enforce_time_limits(self, rt: ClusterRuntime) -> None:
        """End every job of ``rt`` that has run past its time limit (Slurm's TIMEOUT: a
        failure, so its after-ok dependents do not run), then give its chips to others.
        Called on every telemetry tick: the limit holds to within one tick."""
        sched = rt.scheduler
        now = sched.time()
        over = [(jid, rec.request.time_limit_s) for jid, rec in sched.handle.running.items()
                if rec.request.time_limit_s is not None and now - (rec.started_s or now) >= rec.request.time_limit_s]
        if not over:
            return
        with self.plane.store.transaction():
            for jid, limit in over:
                job = self.table.find(jid)
                if job is not None and not job.ended and limit is not None:
                    self.table.end(job, JobState.FAILED, f"time limit reached ({fmt_duration(limit)})")
        self.schedule(rt)

    def stop_all(self, rt: ClusterRuntime, reason: str) -> None:
        for job in self.table.on_cluster(rt.id):
            self.table.end(job, JobState.STOPPED, reason)

    # --- reads (any thread) ------------------------------------------------------------------
    @property
    def views(self) -> Mapping[str, JsonObject]:
        return self.table.views

    def resolve_id(self, ref: str) -> str:
        """A job id from the id itself or a unique prefix (or tail) of one."""
        return resolve_ref(ref, self.table.views, "job")

    def describe(self, job_id: str) -> JsonObject:
        return self.table.describe(self.resolve_id(job_id))

    def list(self, *, cluster_id: str | None = None, state: str | None = None,
             next_token: str | None = None, max_results: int = 100) -> tuple[list[JsonObject], str | None]:
        return self.table.list(cluster_id=cluster_id, state=state, next_token=next_token, max_results=max_results)

    def job_logs(self, job_id: str) -> LogBuffer:
        return self.table.job_logs(self.resolve_id(job_id))

    # --- placement --------------------------------------------------------------------------
    def schedule(self, rt: ClusterRuntime) -> None:
        """Give free chips to waiting jobs: recovering ones first (back onto healthy chips),
        then one cycle of the cluster's scheduler (``dispatch``: bind, preempt, reasons)."""
        if rt.state != ClusterState.ACTIVE or rt.id not in self.drivers:
            return
        waiting = self.table.waiting(rt.id)
        if not waiting and not rt.scheduler.pending and not rt.preempting:
            return
        drv = self.driver(rt)
        recovering = sorted((j for j in waiting if j.state == JobState.RECOVERING),
                            key=lambda j: (-j.spec.priority, j.id))
        now = self.plane.tl.now
        unshown = self._unshown.get(rt.id, set())
        whole = now - self._swept_at.get(rt.id, float("-inf")) >= SWEEP_S
        # One commit for every transition of this pass (each job's PLACING and RUNNING too).
        with self.plane.store.transaction():
            for job in recovering:
                if not drv.owns(job.id):
                    self.relaunch(rt, job)
            swept = dispatch.cycle(self.table, drv, rt, None if whole else unshown)
        self._unshown.pop(rt.id, None)  # shown now (kept if the cycle failed: the next one shows them)
        self._wake_for_checkpoint(rt)
        if swept:
            self._swept_at[rt.id] = now
        elif rt.scheduler.pending:
            self._sweep_later(rt)
        # Scheduler figures (DescribeCluster, /metrics) refresh once per telemetry tick.

    def _wake_for_checkpoint(self, rt: ClusterRuntime) -> None:
        """A cycle when the first victim's on-demand checkpoint is written, so its
        preemptor starts then, not at the next periodic cycle."""
        due = dispatch.next_checkpoint_due(rt)
        if due is None or self._checkpoint_wake.get(rt.id, float("inf")) <= due:
            return
        self._checkpoint_wake[rt.id] = due

        def wake() -> None:
            if self._checkpoint_wake.get(rt.id) == due:
                del self._checkpoint_wake[rt.id]
            if self.plane.clusters.get(rt.id) is rt:
                self.schedule(rt)

        self.plane.tl.call_at(max(0.0, due - self.plane.tl.now), wake)

    def _sweep_later(self, rt: ClusterRuntime) -> None:
        """Show every pending job's reason and wait within ``SWEEP_S`` of a cycle that
        showed only the new ones (memory only: no cycle, no commit)."""
        if rt.id in self._sweep_due:
            return
        self._sweep_due.add(rt.id)

        def sweep() -> None:
            self._sweep_due.discard(rt.id)
            if rt.id not in self.drivers or self.plane.clusters.get(rt.id) is not rt:
                return  # deleted meanwhile
            now = self.plane.tl.now
            if now - self._swept_at.get(rt.id, float("-inf")) >= SWEEP_S:
                dispatch.show_pending(self.table, rt, rt.scheduler.pending)
                self._swept_at[rt.id] = now

        self.plane.tl.call_at(SWEEP_S, sweep)

    def _enqueue(self, rt: ClusterRuntime, job: Job) -> None:
        """Hand a (new or reloaded) job to the cluster's scheduler, unless its
        dependencies or its array hold it back (``control.dependencies``)."""
        if job.state == JobState.PENDING and Holds.gated(job.spec):
            gate = self.holds.check(job.id, job.spec, lambda m: self._active(rt, m))
            if self._restoring:  # every job must be loaded first: looked at by restore_all
                gate = gate if gate.kind is GateKind.WAIT else replace(gate, kind=GateKind.WAIT)
            if gate.kind is GateKind.NEVER:
                self.holds.release(job.id)
                self.table.end(job, JobState.FAILED, gate.reason)
                return
            if gate.kind is GateKind.WAIT:
                self.holds.hold(job.id, rt.id)
                if gate.reason and job.status.reason != gate.reason:
                    self.table.amend(job, reason=gate.reason, allocation=scheduling.pending_allocation(gate.reason))
                return
            self.holds.release(job.id)
        drv = self.driver(rt)
        # Movable: its fabric checkpoints on demand and the write is the twin's (charged,
        # never reported), so a reclaim may move it keeping its work. Process fabrics'
        # on-demand checkpoints serve preemption; a reclaim waits for their jobs instead.
        preemptible = drv.preemptible(job.spec)
        req = scheduling.job_request(job.id, job.spec, job.status.plan, preemptible=preemptible,
                                     auto_plan=drv.plans_models,
                                     movable=preemptible and drv.on_demand_checkpoints and not drv.checkpoint_reported)
        # A reloaded job that holds chips resumes on them (``relaunch``): whether a fresh
        # block of its size could ever be found (spares move as recoveries use them) does
        # not apply to it, and must not end it.
        holds = job.state in (JobState.RECOVERING, JobState.RUNNING) and bool(job.chips)
        d = rt.scheduler.submit(req, check=not holds)
        if d.kind is DecisionKind.REJECTED:  # the cluster changed since the submit check
            self.table.end(job, JobState.FAILED, f"unschedulable: {d.status}")
            return
        if job.state == JobState.PENDING:
            reason = "waiting for placement" if rt.state != ClusterState.ACTIVE else rt.scheduler.reason(job.id)
            self.table.amend(job, reason=reason, allocation=scheduling.pending_allocation(reason))
            self._unshown.setdefault(rt.id, set()).add(job.id)  # its first cycle shows its reason

    @staticmethod
    def _active(rt: ClusterRuntime, job_id: str) -> bool:
        r = rt.scheduler.jobs.get(job_id)
        return r is not None and r.phase not in (JobPhase.FINISHED, JobPhase.REJECTED)

    def _held_may_move(self, job: Job) -> None:
        if not self.holds.held or self._recheck_due:
            return
        self._recheck_due = True
        self.plane.tl.call_at(0, self._recheck_held)

    def _recheck_held(self) -> None:
        """Held jobs whose dependency or array room came: into the queue (or failed,
        for a dependency that can never be met); then a cycle on each cluster touched."""
        self._recheck_due = False
        touched: dict[str, ClusterRuntime] = {}
        with self.plane.store.transaction():
            for jid, cid in self.holds.ordered():
                job, rt = self.table.find(jid), self.plane.clusters.get(cid)
                if job is None or rt is None or job.ended or job.state != JobState.PENDING:
                    self.holds.release(jid)
                    continue
                self._enqueue(rt, job)
                if jid not in self.holds.held:
                    touched[rt.id] = rt
        for rt in touched.values():
            self.schedule(rt)

    def relaunch(self, rt: ClusterRuntime, job: Job) -> None:
        """A RECOVERING job: ranks whose chips are gone (failed, or lost in a restart) move
        to replacement chips, and the gang continues from its checkpoint."""
        if job.status.pod_wait is not None:  # its pod was lost as a whole: back on a whole pod only
            podloss.relaunch_waiting(self, rt, job)
            return
        if relaunch_on_replacements(self.table, self.driver(rt), rt, job):
            self._retry_relaunch(rt, job)

    def _retry_relaunch(self, rt: ClusterRuntime, job: Job) -> None:
        """Look again later: a chip that failed its check may pass it (nothing else wakes a
        recovering job that the scheduler's queue does not hold)."""
        if job.id in self._relaunch_retry:
            return
        self._relaunch_retry.add(job.id)

        def again() -> None:
            self._relaunch_retry.discard(job.id)
            if job.state == JobState.RECOVERING and not job.ended:
                self.schedule(rt)

        self.plane.tl.call_at(RELAUNCH_RETRY_S, again)

    def checkpointed(self, job: Job, step: int, path: str, detail: Mapping[str, Any]) -> None:
        """A fabric saved a checkpoint of a running job: RUNNING -> CHECKPOINTING -> RUNNING."""
        self.table.transition(job, JobState.CHECKPOINTING, f"checkpoint at step {step}")
        self.table.record_checkpoint(job, step, path, detail)
        self.table.transition(job, JobState.RUNNING, f"checkpoint at step {step} saved")

    # --- table listeners ---------------------------------------------------------------------
    def _release(self, job: Job) -> None:
        """Before a job ends: stop its workers, free its chips and its place in the queue."""
        rt = self.plane.clusters.get(job.cluster_id)
        if rt is None:
            return
        drv = self.drivers.get(rt.id)
        if drv is not None and job.state in HOLDS_CHIPS and job.state != JobState.PLACING:
            drv.stop(job.id)
        rt.owners.release(job.id)
        if job.id in rt.scheduler.jobs:
            rt.scheduler.finish(job.id)  # its chips (or its place in the queue) go back

    def _report_checkpoint(self, job: Job, step: int) -> None:
        rt = self.plane.clusters.get(job.cluster_id)
        if rt is not None and job.id in rt.scheduler.jobs:  # a later preemption never goes back before it
            rt.scheduler.report_checkpoint(job.id, step)

    # --- fabric events -------------------------------------------------------------------------
    # --- restart ------------------------------------------------------------------------------
    def restore_all(self) -> None:
        store = self.plane.store
        after = None
        while True:
            page = store.list_jobs(after=after, limit=500)
            if not page:
                break
            after = page[-1].id
            steps = store.latest_checkpoint_steps([rec.id for rec in page])
            self._restoring = True
            try:
                # One commit per page: the jobs that move (RUNNING -> RECOVERING, PLACING ->
                # PENDING) were one transaction each, ~11 ms apiece on PostgreSQL.
                with self.table.views_deferred(), store.transaction():
                    for rec in page:
                        spec = self.warmth.spec_for(rec.id, rec.spec) if self.warmth is not None else None
                        self._restore(Job.from_record(rec, spec), steps.get(rec.id))
            finally:
                self._restoring = False
        if self.holds.held:
            self._recheck_held()
        # Workers a supervisor kept for jobs that are not running now (stopped or ended
        # while the plane was down, or not re-attachable): stopped, before any placement.
        reattach.discard_unadopted(list(self.plane.clusters.values()), self.plane.tl.now)
        for rt in list(self.plane.clusters.values()):
            self.schedule(rt)

    def _restore(self, job: Job, checkpoint_step: int | None) -> None:
        rt = self.plane.clusters.get(job.cluster_id)
        self.table.add(job)
        if checkpoint_step is not None:
            self.table.amend(job, checkpoint_step=checkpoint_step)
        self.holds.note(job.id, job.spec)
        if job.ended:
            self.table.close_log(job)
            return
        pending = self.plane.connecting.get(job.cluster_id) if rt is None else None
        if pending is not None and pending.failed is None:
            # Its cluster's fabric is being reached off the engine thread: the job waits
            # for it (``resume_restored``), as it is.
            pending.held_jobs.append(job.id)
            return
        if rt is None:
            why = f"its cluster has no fabric after a restart: {pending.failed}" if pending is not None else \
                "its cluster no longer exists after a restart"
            self.table.transition(job, JobState.FAILED, why)
            return
        self._reattach(rt, job)

    def resume_restored(self, job_ids: Sequence[str], reason: str | None = None) -> None:
        """Jobs restored while their cluster's fabric was reached off the engine thread:
        re-attached to the cluster now installed, or failed with ``reason`` when its
        fabric could not be reached."""
        for job_id in job_ids:
            job = self.table.find(job_id)
            if job is None or job.ended:
                continue
            rt = self.plane.clusters.get(job.cluster_id)
            if rt is None:
                self.table.transition(job, JobState.FAILED, reason or "its cluster no longer exists after a restart")
                continue
            self._reattach(rt, job)
            self.schedule(rt)

    def _reattach(self, rt: ClusterRuntime, job: Job) -> None:
        state = job.state
        self.table.log(job, f"reloaded after a control-plane restart in state {state.value}")
        if state == JobState.PLACING:
            self.table.transition(job, JobState.PENDING, "placement interrupted by a restart", allocation=None)
        elif state in (JobState.RUNNING, JobState.CHECKPOINTING):
            # A gang the fabric kept running (its supervisor owns the workers) is taken
            # back as it is, at its step (``control.reattach``).
            adoption, why = reattach.adopt(self.table, rt, job)
            if adoption is not None:
                if state == JobState.CHECKPOINTING:
                    self.table.transition(job, JobState.RUNNING, "re-attached after a control-plane restart")
                self._enqueue(rt, job)
                if job.id in rt.scheduler.pending:
                    rt.scheduler.adopt(job.id, [c for c in adoption.chips if not rt.spare_mask[c]])
                return
            # Otherwise the job resumes from its last checkpoint, on its old chips where
            # they are still healthy (``schedule`` -> ``relaunch``).
            self.table.transition(job, JobState.RECOVERING, f"control plane restarted ({why}); resuming from "
                                                            f"checkpoint step {job.status.checkpoint_step}")
        if job.state == JobState.RECOVERING and self.recovery is not None:
            # A recovery flow the old plane was cut off in is this plane's to finish: its
            # faulty chips go out of service before the job is placed again.
            self.recovery.adopt_restored(rt, job.id)
        if job.state == JobState.RECOVERING and job.status.allocation:
            healthy = rt.chip_states()
            rt.owners.assign(job.id, [c for c in job.chips if healthy[c] == ChipState.HEALTHY and c not in rt.owners])
        self._enqueue(rt, job)
        if job.state == JobState.RECOVERING and job.id in rt.scheduler.pending:
            # It still holds its healthy chips: the scheduler must not give them away.
            rt.scheduler.adopt(job.id, [c for c in rt.owners.chips_of(job.id) if not rt.spare_mask[c]])

