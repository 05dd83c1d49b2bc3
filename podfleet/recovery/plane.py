"""The recovery orchestrator inside the control plane: one per cluster, sharing the
cluster's owner map (chip -> job) with the ``JobManager``, which hands it chip faults
(``JobManager.recovery``) and lets it own the jobs it is recovering. Each step is shown
on the job: state ``RECOVERING``, ``recovery`` (the journal with its sub-steps) and a
reason naming the current step; the journal is saved with the job, so a restarted
control plane can see (and close) what was in flight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from podfleet.control.lifecycle import JobState
from podfleet.fabric.base import FabricEvent
from podfleet.recovery.model import JobPolicy, Recovery, RecoveryState, Step
from podfleet.recovery.orchestrator import RecoveryOrchestrator

if TYPE_CHECKING:
    from podfleet.control.plane import ControlPlane
    from podfleet.control.runtime import ClusterRuntime

_OURS = (JobState.RUNNING, JobState.CHECKPOINTING)


def policy_for(spec: dict[str, Any]) -> JobPolicy:
    """A job's recovery policy from its spec: data-parallel degree from ``parallelism``."""
    par = spec.get("parallelism")
    dp = int(par.get("dp", 1)) if isinstance(par, dict) else 1
    return JobPolicy(dp=max(dp, 1), on_no_spare="shrink" if dp > 1 else "wait")


class PlaneListener:
    def __init__(self, plane: ControlPlane, rt: ClusterRuntime) -> None:
        self.plane, self.rt = plane, rt
        self.degraded_links: dict[int, str] = {}

    def recovery_changed(self, rec: Recovery) -> None:
        jm = self.plane.jobs
        r = jm.records.get(rec.job_id or "")
        if r is None or JobState(r.state) not in (*_OURS, JobState.RECOVERING):
            return
        step = rec.steps[-1] if rec.steps else None
        reason = f"recovering ({rec.kind}): {step.name}: {step.reason}" if step else rec.reason
        if JobState(r.state) in _OURS:
            if rec.state in (RecoveryState.RUNNING, RecoveryState.WAITING):
                jm._set_state(r, JobState.RECOVERING, reason, recovery=rec.to_dict())
            else:  # the closing journal of a recovery that already handed the job back
                r.status["recovery"] = rec.to_dict()
                self.plane.store.save_job(r)
                jm._refresh(r)
            return
        r.status["recovery"] = rec.to_dict()
        r.status["reason"] = reason
        self.plane.store.save_job(r)
        jm._refresh(r)
        if step is not None:
            jm._log(r, f"recovery {rec.id}: {step.name}: {step.reason}")

    def job_recovered(self, job_id: str, chips: tuple[int, ...], rec: Recovery) -> None:
        jm = self.plane.jobs
        r = jm.records.get(job_id)
        if r is None or r.state != JobState.RECOVERING:
            return
        took = (rec.t_end or rec.t_start) - (rec.detected_t or rec.t_start)
        alloc = {"chips": list(chips), "shape": [len(chips)], "reason": f"recovered by {rec.id}"}
        jm._set_state(r, JobState.RUNNING, f"recovered from {rec.reason} in {took:.3f} s "
                      f"(state from {rec.restored_from or 'the chip itself'})", allocation=alloc,
                      recovery=rec.to_dict())
        self.rt.render_hardware(self.plane.now())

    def link_changed(self, link: int, state: str, rec: Recovery) -> None:
        # What the scheduler reads to keep new placements off the link.
        if state == "up":
            self.degraded_links.pop(link, None)
        else:
            self.degraded_links[link] = state
        self.plane.tl.emit("scheduler-link-notice", cluster_id=self.rt.id, link=link, state=state)


class PlaneRecovery:
    """What ``JobManager.recovery`` points at: routes faults to per-cluster orchestrators."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.orch: dict[str, RecoveryOrchestrator] = {}
        self.listeners: dict[str, PlaneListener] = {}

    def for_cluster(self, rt: ClusterRuntime) -> RecoveryOrchestrator:
        o = self.orch.get(rt.id)
        if o is None:
            lis = PlaneListener(self.plane, rt)
            o = RecoveryOrchestrator(rt.fabric, self.plane.tl, owner=rt.owner, listener=lis, subscribe=False,
                                     spares=tuple(rt.spares))
            self.orch[rt.id], self.listeners[rt.id] = o, lis
        return o

    def owns(self, job_id: str) -> bool:
        return any(job_id in o.active for o in self.orch.values())

    def manage_running(self, rt: ClusterRuntime) -> RecoveryOrchestrator:
        """Put every job the fabric runs for this cluster under the orchestrator."""
        o = self.for_cluster(rt)
        jobs = getattr(rt.fabric, "jobs", {})
        for job_id, r in self.plane.jobs.records.items():
            if r.cluster_id == rt.id and JobState(r.state) in _OURS and job_id in jobs and job_id not in o.policies \
                    and str(jobs[job_id].state) in ("running", "paused"):
                o.manage(job_id, policy_for(r.spec))
        return o

    def on_event(self, rt: ClusterRuntime, ev: FabricEvent) -> bool:
        """Handle a fabric event; True when the orchestrator took the fault over."""
        if not hasattr(rt.fabric, "move_rank"):
            return False  # fabrics without rank moves keep the JobManager's restart path
        if not (ev.kind.startswith(("link-", "chip-")) or ev.kind in ("job-finished", "job-stopped")):
            return False  # progress, checkpoints: the JobManager's
        o = self.manage_running(rt)
        if ev.kind.startswith("link-") or ev.kind in ("chip-healthy", "job-finished", "job-stopped"):
            o.handle(ev)
            return False
        chip = ev.chip
        if chip is None:
            return False
        job_id = rt.owner.get(chip)
        thermal = ev.kind == "chip-degraded" and str(ev.detail.get("reason", "")).startswith("thermal-runaway")
        if ev.kind != "chip-failed" and not thermal:
            return False
        if job_id is None or job_id not in o.policies:
            return False  # the JobManager isolates free chips and undoes placements
        o.handle(ev)
        return True

    def close_stale(self) -> None:
        """Journals left open by a previous control plane whose job runs again: closed."""
        jm = self.plane.jobs
        for r in list(jm.records.values()):
            j = r.status.get("recovery")
            if not j or r.state != JobState.RUNNING or j.get("state") not in ("running", "waiting") or self.owns(r.id):
                continue
            rec = Recovery.from_dict(j)
            now = self.plane.tl.now
            rec.steps.append(Step("finished-after-restart", "the control plane restarted during the recovery; "
                                  "the job was relaunched from its checkpoint", now, now))
            rec.state = RecoveryState.DONE
            rec.t_end = now
            r.status["recovery"] = rec.to_dict()
            self.plane.store.save_job(r)
            jm._refresh(r)
