"""Training jobs on the engine thread: submit, place, run, checkpoint, recover, stop.

A job's record (state, progress, allocation, timestamps) is persisted on every state
change and checkpoint; progress between checkpoints lives in memory (a restart resumes
from the last checkpoint, as a real job would).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from podfleet.control import dispatch, fabric_ops, scheduling
from podfleet.control.ids import new_id
from podfleet.control.lifecycle import TERMINAL, ClusterState, JobState, check_job_transition
from podfleet.control.logbuf import LogBuffer, rfc3339
from podfleet.control.models import check_model
from podfleet.control.placement import Allocation
from podfleet.control.planning import plan_for_job
from podfleet.control.realjobs import RealJobs, check_sim_submit, check_submit, is_real
from podfleet.control.runtime import ClusterRuntime
from podfleet.control.specs import JobSpec
from podfleet.errors import ConflictError, InfeasibleError, NotFoundError, PodfleetError
from podfleet.fabric.base import ChipState, FabricEvent, WorkerGroupSpec
from podfleet.scheduler import DecisionKind
from podfleet.store.records import CheckpointRecord, JobRecord

if TYPE_CHECKING:
    from podfleet.control.plane import ControlPlane

_FAILED_CHIP_EVENTS = ("chip-failed",)
_FINISHED = ("job-finished", "job-succeeded")
_JOB_FAILED = ("job-failed", "worker-exited")


class JobManager:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.records: dict[str, JobRecord] = {}
        self.views: dict[str, dict[str, Any]] = {}  # replaced whole on change: safe to read anywhere
        self.logs: dict[str, LogBuffer] = {}
        self.waiting: dict[str, dict[str, None]] = {}  # cluster id -> ids of PENDING/RECOVERING jobs
        # Set by podfleet.health.service: the recovery orchestrators (they take over chip
        # faults of running jobs and own the jobs they are recovering).
        self.recovery: Any = None
        self.real = RealJobs(self)  # jobs on local / ray fabrics (podfleet.control.realjobs)

    # --- commands ------------------------------------------------------------------------
    def submit(self, cluster_ref: str, body: dict[str, Any], *, actor: str = "system",
               client_token: str | None = None) -> dict[str, Any]:
        plane = self.plane
        created: list[JobRecord] = []

        def do() -> tuple[dict[str, Any], str]:
            rt = plane.resolve(cluster_ref)
            spec = JobSpec.parse(dict(body))
            real = is_real(rt)
            if real:
                layout, params = check_submit(rt, spec), None
            else:
                check_sim_submit(spec)
                model = check_model(spec.model, spec.model_dims)
            if rt.state not in (ClusterState.ACTIVE, ClusterState.DEPLOYING):
                raise ConflictError(f"cluster {rt.rec.name} is {rt.state.value}; jobs need an active cluster",
                                    field="cluster")
            capacity = rt.topology.n_chips - len(rt.spares)
            if spec.chips > capacity:
                raise InfeasibleError(
                    f"chips {spec.chips} exceeds what cluster {rt.rec.name} can place "
                    f"({rt.topology.n_chips} chips - {len(rt.spares)} spares = {capacity})",
                    field="chips", allowed=f"1-{capacity}",
                )
            if not real:
                layout, params = plan_for_job(rt.topology, model, spec.chips, spec.parallelism), model.params
            # A request no pod can ever satisfy is refused here, with the scheduler's reason.
            job_id = new_id("job")
            verdict = rt.scheduler.check(scheduling.job_request(job_id, spec.to_dict(), layout, preemptible=not real))
            if verdict.rejected:
                raise InfeasibleError(f"no pod of cluster {rt.rec.name} can ever run this job: {verdict.reason}",
                                      field="chips")
            now = plane.now()
            rec = JobRecord(job_id, rt.id, JobState.PENDING.value, spec.to_dict(), {
                "progress": {"step": 0, "steps": spec.steps, "loss": None, "tokens_per_s": 0.0},
                "allocation": None, "reason": "waiting for placement", "checkpoint_step": 0,
                "params": params, "plan": layout,
                "timestamps": {JobState.PENDING.value: rfc3339(now)},
            }, now, now)
            plane.store.save_job(rec)
            created.append(rec)
            return self._view(rec), rec.id

        out = plane.mutation("SubmitTrainingJob", actor, cluster_ref, do, body={**body, "cluster": cluster_ref},
                             client_token=client_token, replay=self.describe)
        for rec in created:  # after the commit
            self._add(rec)
            self._log(rec, f"submitted: {rec.spec['model']} on {rec.spec['chips']} chips, {rec.spec['steps']} steps"
                      f", priority {rec.spec.get('priority')}" + (f", team {rec.spec['team']}" if rec.spec.get("team") else ""))
            rt = plane.clusters[rec.cluster_id]
            self._enqueue(rt, rec)
            if rt.state == ClusterState.ACTIVE:
                self.schedule(rt)
            out = self.views[rec.id]
        return out

    def stop(self, job_id: str, *, actor: str = "system") -> dict[str, Any]:
        def do() -> tuple[dict[str, Any], str]:
            rec = self._get(job_id)
            if JobState(rec.state) in TERMINAL:
                raise ConflictError(f"job {job_id} already ended ({rec.state})", field="job")
            self._end(rec, JobState.STOPPED, "stopped by request")
            return self.views[rec.id], rec.id

        out = self.plane.mutation("StopTrainingJob", actor, job_id, do)
        rt = self.plane.clusters.get(out["cluster_id"])
        if rt is not None:
            self.schedule(rt)
        return out

    def stop_all(self, rt: ClusterRuntime, reason: str) -> None:
        for rec in list(self.records.values()):
            if rec.cluster_id == rt.id and JobState(rec.state) not in TERMINAL:
                self._end(rec, JobState.STOPPED, reason)

    # --- reads (any thread) ------------------------------------------------------------------
    def describe(self, job_id: str) -> dict[str, Any]:
        view = self.views.get(job_id)
        if view is None:
            raise NotFoundError(f"job {job_id!r} not found", field="job")
        return view

    def list(self, *, cluster_id: str | None = None, state: str | None = None,
             next_token: str | None = None, max_results: int = 100) -> tuple[list[dict[str, Any]], str | None]:
        views = self.views
        ids = sorted(
            i for i, v in list(views.items())
            if (cluster_id is None or v["cluster_id"] == cluster_id)
            and (state is None or v["state"] == state) and (next_token is None or i > next_token)
        )
        page = ids[:max_results]
        return [views[i] for i in page], (page[-1] if len(ids) > max_results else None)

    def job_logs(self, job_id: str) -> LogBuffer:
        self.describe(job_id)
        return self.logs[job_id]

    # --- placement --------------------------------------------------------------------------
    def schedule(self, rt: ClusterRuntime) -> None:
        """Give free chips to waiting jobs: recovering ones first (back onto healthy chips),
        then one cycle of the cluster's scheduler (``dispatch``: bind, preempt, reasons)."""
        if rt.state != ClusterState.ACTIVE:
            return
        ids = self.waiting.get(rt.id)
        if not ids and not rt.scheduler.pending and not rt.preempting:
            return
        recovering = sorted((self.records[i] for i in ids or () if self.records[i].state == JobState.RECOVERING),
                            key=lambda r: (-int(r.spec.get("priority", 0)), r.id))
        # One commit for every transition of this pass (each job's PLACING and RUNNING too).
        with self.plane.store.transaction():
            for rec in recovering:
                if (self.recovery is None or not self.recovery.owns(rec.id)) and not self.real.owns(rec.id):
                    self._try_recover(rt, rec)
            dispatch.cycle(self, rt)
        # Scheduler figures (DescribeCluster, /metrics) refresh once per telemetry tick.

    def _enqueue(self, rt: ClusterRuntime, rec: JobRecord) -> None:
        """Hand a (new or reloaded) job to the cluster's scheduler."""
        real = is_real(rt)
        req = scheduling.job_request(rec.id, rec.spec, rec.status.get("plan"), preemptible=not real)
        d = rt.scheduler.submit(req)
        if d.kind is DecisionKind.REJECTED:  # the cluster changed since the submit check
            self._end(rec, JobState.FAILED, f"unschedulable: {d.status}")
            return
        if rec.state == JobState.PENDING:
            reason = "waiting for placement" if rt.state != ClusterState.ACTIVE else rt.scheduler.reason(rec.id)
            rec.status["reason"] = reason
            rec.status["allocation"] = scheduling.pending_allocation(reason)
            self._refresh(rec)

    def _launch(self, rt: ClusterRuntime, rec: JobRecord, alloc: Allocation) -> None:
        for c in alloc.chips:
            rt.owner[c] = rec.id
        spec = rec.spec
        start = int(rec.status.get("checkpoint_step", 0))
        options = self.real.launch_options(rt, rec, start) if is_real(rt) else {
            "start_step": start, **scheduling.worker_options(spec, rec.status.get("plan")),
            **({"params": rec.status["params"]} if rec.status.get("params") else {}),
            "model_dims": spec.get("model_dims")}
        try:
            fabric_ops.start(rt.fabric, WorkerGroupSpec(
                job_id=rec.id, chips=alloc.chips, model=spec["model"], steps=int(spec["steps"]),
                checkpoint_interval=int(spec["checkpoint_interval"]), entrypoint=spec.get("entrypoint"),
                options=options,
            ), start)
        except PodfleetError as exc:  # the fabric refused: the job cannot run as placed
            self._end(rec, JobState.FAILED, f"fabric refused the launch: {exc.message}")
            return
        rec.status["progress"] = {**rec.status["progress"], "step": start}
        self._set_state(rec, JobState.RUNNING, f"running on {len(alloc.chips)} chips from step {start}")
        # No re-render here: the next tick shows the new owner (one render per tick at most).

    def _release(self, rec: JobRecord) -> None:
        rt = self.plane.clusters.get(rec.cluster_id)
        if rt is None:
            return
        for c, owner in list(rt.owner.items()):
            if owner == rec.id:
                del rt.owner[c]

    # --- fabric events --------------------------------------------------------------------------
    def on_event(self, rt: ClusterRuntime, ev: FabricEvent) -> None:
        if self.recovery is not None and self.recovery.on_event(rt, ev):
            return  # a recovery orchestrator took the fault over
        if is_real(rt):
            self.real.on_event(rt, ev)  # real fabrics recover (local) or end gangs (ray) themselves
            return
        if ev.kind in _FAILED_CHIP_EVENTS and ev.chip is not None:
            self._chip_failed(rt, ev.chip, ev.kind)
            return
        rec = self.records.get(ev.job_id) if ev.job_id else None
        if rec is None or JobState(rec.state) in TERMINAL or rec.state == JobState.RECOVERING:
            return
        d = dict(ev.detail)
        if ev.kind == "progress":
            prog = rec.status["progress"]
            rec.status["progress"] = {**prog, "step": int(d.get("step", prog["step"])),
                                      "loss": d.get("loss", prog.get("loss")),
                                      "tokens_per_s": d.get("tokens_per_s", prog.get("tokens_per_s"))}
            self._refresh(rec)
        elif ev.kind == "checkpoint":
            step = int(d.get("step", rec.status["progress"]["step"]))
            self._set_state(rec, JobState.CHECKPOINTING, f"checkpoint at step {step}")
            self.plane.store.add_checkpoint(CheckpointRecord(
                new_id("ckpt"), rec.id, step, str(d.get("path", f"twin://{rec.id}/step-{step}")),
                self.plane.now(), {k: v for k, v in d.items() if isinstance(v, int | float | str)}))
            rec.status["checkpoint_step"] = step
            if rec.id in rt.scheduler.jobs:  # a later preemption never goes back before it
                rt.scheduler.report_checkpoint(rec.id, step)
            self._set_state(rec, JobState.RUNNING, f"checkpoint at step {step} saved")
        elif ev.kind in _FINISHED:
            rec.status["progress"] = {**rec.status["progress"], "step": int(rec.spec["steps"])}
            self._end(rec, JobState.SUCCEEDED, "all steps done")
            self.schedule(rt)
        elif ev.kind in _JOB_FAILED:
            self._end(rec, JobState.FAILED, str(d.get("reason", ev.kind)))
            self.schedule(rt)

    def _chip_failed(self, rt: ClusterRuntime, chip: int, why: str) -> None:
        states = rt.chip_states()
        if states[chip] == ChipState.FAILED:  # keep it out of every allocation until repaired
            rt.fabric.set_chip_state(chip, ChipState.ISOLATED, f"isolated after {why}")
        self.plane.save_health(rt)
        job_id = rt.owner.pop(chip, None)
        rec = self.records.get(job_id) if job_id else None
        if rec is None or JobState(rec.state) in TERMINAL:
            self.plane.render(rt)
            return
        if rec.state == JobState.PLACING:
            self._release(rec)
            if rec.id in rt.scheduler.jobs:
                rt.scheduler.requeue(rec.id)
            self._set_state(rec, JobState.PENDING, f"chip {chip} failed before launch", allocation=None)
        else:
            rec.status["failed_chip"] = chip
            self._set_state(rec, JobState.RECOVERING, f"chip {chip} failed ({why}); moving its rank")
            self._try_recover(rt, rec)
        self.plane.render(rt)

    def _try_recover(self, rt: ClusterRuntime, rec: JobRecord) -> None:
        alloc = Allocation.from_dict(rec.status["allocation"])
        bad = [c for c in alloc.chips if rt.owner.get(c) != rec.id]
        # Ranks whose chips are gone (failed, or lost in a restart) need new chips.
        pool = [c for c in rt.replacement_chips() if c not in alloc.chips]
        if len(pool) < len(bad):
            reason = f"waiting for {len(bad)} healthy chip(s) to replace {bad}"
            if rec.status.get("reason") != reason:
                rec.status["reason"] = reason
                self.plane.store.save_job(rec)
                self._refresh(rec)
                self._log(rec, reason)
            return
        swap = dict(zip(bad, pool, strict=False))
        chips = tuple(swap.get(c, c) for c in alloc.chips)
        moved = ", ".join(f"rank {alloc.chips.index(b)}: chip {b} -> {n}" for b, n in swap.items())
        new = Allocation(chips, alloc.shape if not swap else (len(chips),),
                         alloc.reason if not swap else f"recovered: {moved}")
        rec.status["allocation"] = new.to_dict()
        self._log(rec, f"recovery: {moved or 'same chips'}; resuming from checkpoint step {rec.status.get('checkpoint_step', 0)}")
        self._launch(rt, rec, new)

    # --- state --------------------------------------------------------------------------------
    def _end(self, rec: JobRecord, dst: JobState, reason: str) -> None:
        rt = self.plane.clusters.get(rec.cluster_id)
        if rt is not None and rec.state in (JobState.RUNNING, JobState.CHECKPOINTING, JobState.RECOVERING):
            fabric_ops.stop(rt.fabric, rec.id)
        self._release(rec)
        if rt is not None and rec.id in rt.scheduler.jobs:
            rt.scheduler.finish(rec.id)  # its chips (or its place in the queue) go back
        self._set_state(rec, dst, reason)
        self.logs[rec.id].closed = True

    def _set_state(self, rec: JobRecord, dst: JobState, reason: str, **status: Any) -> None:
        check_job_transition(JobState(rec.state), dst)
        now = self.plane.now()
        rec.state = dst.value
        self._index(rec)
        rec.updated_at = now
        rec.status["reason"] = reason
        rec.status["timestamps"] = {**rec.status.get("timestamps", {}), dst.value: rfc3339(now)}
        for k, v in status.items():
            rec.status[k] = v.to_dict() if isinstance(v, Allocation) else v
        self.plane.store.save_job(rec)  # durable before anyone can see it
        self._refresh(rec)
        self._log(rec, f"{dst.value}: {reason}")

    def _get(self, job_id: str) -> JobRecord:
        rec = self.records.get(job_id)
        if rec is None:
            raise NotFoundError(f"job {job_id!r} not found", field="job")
        return rec

    def _index(self, rec: JobRecord) -> None:
        """Keep ``waiting`` (per cluster: PENDING and RECOVERING job ids) in step with states."""
        ids = self.waiting.setdefault(rec.cluster_id, {})
        if rec.state in (JobState.PENDING, JobState.RECOVERING):
            ids[rec.id] = None
        else:
            ids.pop(rec.id, None)

    def _add(self, rec: JobRecord) -> None:
        self.records[rec.id] = rec
        self._index(rec)
        self.logs.setdefault(rec.id, LogBuffer())
        self._refresh(rec)

    def _refresh(self, rec: JobRecord) -> None:
        self.views[rec.id] = self._view(rec)

    def _log(self, rec: JobRecord, message: str) -> None:
        self.logs.setdefault(rec.id, LogBuffer()).append(self.plane.now(), message)

    def _view(self, rec: JobRecord) -> dict[str, Any]:
        st = rec.status
        return {
            "id": rec.id, "cluster_id": rec.cluster_id, "state": rec.state, **rec.spec,
            "progress": dict(st.get("progress", {})), "allocation": st.get("allocation"),
            "reason": st.get("reason", ""), "checkpoint_step": st.get("checkpoint_step", 0),
            "plan": st.get("plan"),
            "recovery": st.get("recovery"),
            "runtime": st.get("runtime"),
            # queue_wait_s, balance_degree, preemptions, rebalances (control.dispatch, .balancing)
            "scheduling": dict(st.get("scheduling") or {}),
            "timestamps": dict(st.get("timestamps", {})),
            "created_at": rfc3339(rec.created_at), "updated_at": rfc3339(rec.updated_at),
        }

    # --- restart ------------------------------------------------------------------------------
    def restore_all(self) -> None:
        store = self.plane.store
        after = None
        while True:
            page = store.list_jobs(after=after, limit=500)
            if not page:
                break
            after = page[-1].id
            for rec in page:
                self._restore(rec)
        for rt in list(self.plane.clusters.values()):
            self.schedule(rt)

    def _restore(self, rec: JobRecord) -> None:
        rt = self.plane.clusters.get(rec.cluster_id)
        ckpt = self.plane.store.latest_checkpoint(rec.id)
        if ckpt is not None:
            rec.status["checkpoint_step"] = max(int(rec.status.get("checkpoint_step", 0)), ckpt.step)
        self._add(rec)
        state = JobState(rec.state)
        if state in TERMINAL:
            self.logs[rec.id].closed = True
            return
        if rt is None:
            self._set_state(rec, JobState.FAILED, "its cluster no longer exists after a restart")
            return
        self._log(rec, f"reloaded after a control-plane restart in state {state.value}")
        if state == JobState.PLACING:
            self._set_state(rec, JobState.PENDING, "placement interrupted by a restart", allocation=None)
        elif state in (JobState.RUNNING, JobState.CHECKPOINTING):
            # The fresh fabric runs nothing: the job resumes from its last checkpoint, on
            # its old chips where they are still healthy (``schedule`` -> ``_try_recover``).
            self._set_state(rec, JobState.RECOVERING,
                            f"control plane restarted; resuming from checkpoint step {rec.status['checkpoint_step']}")
        if rec.state == JobState.RECOVERING and rec.status.get("allocation"):
            healthy = rt.chip_states()
            for c in rec.status["allocation"]["chips"]:
                if healthy[c] == ChipState.HEALTHY and c not in rt.owner:
                    rt.owner[c] = rec.id
        self._enqueue(rt, rec)
        if rec.state == JobState.RECOVERING and rec.id in rt.scheduler.pending:
            # It still holds its healthy chips: the scheduler must not give them away.
            rt.scheduler.adopt(rec.id, [c for c, j in rt.owner.items() if j == rec.id and not rt.spare_mask[c]])
