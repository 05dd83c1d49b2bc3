"""The twin driver: jobs on a fabric with ``ResumableRuns`` (the digital twin), whose
state lives on their chips, on the engine thread.

A relaunch after a rank's chip failed moves just that rank and resumes the paused run
from its checkpoint step; preemption checkpoints a victim on demand. Chip faults of
running jobs go to the recovery orchestrator first (``JobOps.recovery``): it
isolates, moves ranks to spares, restores and resumes, step by step. What it does not
take (a free chip, a job being placed) is handled here.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from podfleet.control import scheduling
from podfleet.control.jobtable import Job
from podfleet.control.lifecycle import JobState
from podfleet.control.planning import Plan, plan_for_job
from podfleet.control.presets import check_model
from podfleet.errors import InfeasibleError, NotFoundError, PodfleetError
from podfleet.fabric.base import (
    ChipState,
    Fabric,
    FabricEvent,
    ResumableRuns,
    RunState,
    WorkerGroupSpec,
)
from podfleet.perf.memory import memory_per_chip
from podfleet.perf.models import MODELS
from podfleet.perf.options import plan_from_options
from podfleet.wire import JsonObject

if TYPE_CHECKING:
    from podfleet.control.drivers.base import JobOps
    from podfleet.control.runtime import ClusterRuntime
    from podfleet.control.specs import JobSpec

_FINISHED = ("job-finished", "job-succeeded")
# Per-chip write bandwidth to shared storage of an on-demand checkpoint: the same
# assumption as recovery's restore (``recovery.model.Timings.checkpoint_bw_bytes_per_s``;
# a test keeps them equal). Control may not import recovery (recovery imports control).
CHECKPOINT_WRITE_BW_BYTES_PER_S = 2.5e9
_JOB_FAILED = ("job-failed", "worker-exited")


@runtime_checkable
class TwinFabric(Fabric, ResumableRuns, Protocol):
    """A fabric this driver can run: resumable runs (introspection included)."""


class TwinDriver:
    on_demand_checkpoints = True
    plans_models = True
    checkpoint_reported = False  # the write takes its modelled time (``checkpoint_write_s``)
    checkpoint_scheme = "twin"

    def __init__(self, jobs: JobOps, rt: ClusterRuntime, fabric: TwinFabric) -> None:
        self.jobs, self.rt = jobs, rt
        self.table = jobs.table
        self.fabric = fabric

    # --- JobDriver ----------------------------------------------------------------------------
    def owns(self, job_id: str) -> bool:
        rec = self.jobs.recovery
        return rec is not None and rec.owns(job_id)

    def holds_recovering(self, job_id: str) -> bool:
        return False  # the twin's relaunch runs at once

    def check_submit(self, spec: JobSpec) -> tuple[Plan | None, float | None]:
        if spec.options:
            raise InfeasibleError("options apply to clusters of worker processes (local, ray, neuron); "
                                    "the twin models the job", field="options")
        model = check_model(spec.model, spec.model_dims)
        return plan_for_job(self.rt.topology, model, spec.chips, spec.parallelism), model.params

    def launch_options(self, job: Job, start_step: int) -> JsonObject:
        spec, st = job.spec, job.status
        # ``params`` makes the twin use its simple step model; a model the performance
        # model knows (a preset or custom dims) must get its step time from the plan the
        # job runs with, its compression and the links it crosses, so it is not passed.
        simple = st.params and spec.model not in MODELS and not spec.model_dims
        return {"start_step": start_step, **scheduling.worker_options(spec.parallelism, st.plan),
                **({"params": st.params} if simple else {}), "model_dims": spec.model_dims,
                **({"grad_compression": spec.grad_compression} if spec.grad_compression != "none" else {})}

    def start(self, job: Job, chips: tuple[int, ...], start_step: int) -> None:
        fab = self.fabric
        run = fab.run_status(job.id)
        if run is not None and run.state is RunState.PAUSED and len(run.chips) == len(chips):
            # The run's state is still on its chips: move only the ranks that changed chip.
            for rank, (a, b) in enumerate(zip(run.chips, chips, strict=True)):
                if a != b:
                    fab.move_rank(job.id, rank, b)
            fab.resume(job.id, from_step=min(start_step, run.step))
            return
        if run is not None and run.live:
            self.stop(job.id)
        spec = job.spec
        fab.launch(WorkerGroupSpec(
            job_id=job.id, chips=chips, model=spec.model, steps=spec.steps,
            checkpoint_interval=spec.checkpoint_interval, entrypoint=spec.entrypoint,
            options=self.launch_options(job, start_step),
        ))

    def stop(self, job_id: str) -> None:
        with contextlib.suppress(NotFoundError):
            self.fabric.stop(job_id)

    def preemptible(self, spec: JobSpec) -> bool:
        return True  # a twin job's state is its step counter: saved on demand

    def checkpoint_now(self, job_id: str) -> int | None:
        return self.fabric.checkpoint_now(job_id)

    def checkpoint_saved(self, job_id: str, step: int) -> int | None:
        return step  # the snapshot taken by ``checkpoint_now``, once its write time has passed

    def checkpoint_write_s(self, job_id: str) -> float:
        """Every rank writes its parameters and optimizer state (perf's memory model for
        the job's model and plan; else 16 bytes a parameter over the ranks) to shared
        storage at ``CHECKPOINT_WRITE_BW_BYTES_PER_S`` a chip, all ranks at once."""
        job = self.table.find(job_id)
        if job is None:
            return 0.0
        spec = job.spec
        nbytes: float | None = None
        m = MODELS.get(spec.model)
        if m is not None:
            with contextlib.suppress(PodfleetError, ValueError, TypeError, ZeroDivisionError):
                mem = memory_per_chip(m, plan_from_options(m, spec.chips, self.launch_options(job, 0),
                                                           self.rt.topology))
                nbytes = float(mem.params_bytes + mem.optimizer_bytes)
        if nbytes is None:
            nbytes = 16.0 * float(job.status.params or 0) / max(spec.chips, 1)
        return nbytes / CHECKPOINT_WRITE_BW_BYTES_PER_S

    # --- fabric events --------------------------------------------------------------------------
    def on_event(self, ev: FabricEvent) -> None:
        # A recovery flow had the event first (``control.events``) and did not take it over.
        rt, table = self.rt, self.table
        if ev.kind == "chip-failed" and ev.chip is not None:
            self._chip_failed(ev.chip, ev.kind)
            return
        job = table.find(ev.job_id)
        if job is None or job.ended or job.state == JobState.RECOVERING:
            return
        d = dict(ev.detail)
        if ev.kind == "progress":
            # The step time too: a slowdown (a link detour, a rank in another pod) is read
            # from it against the time before (``recovery.service.LinkImpact``).
            table.progress(job, step=d.get("step"), loss=d.get("loss"), tokens_per_s=d.get("tokens_per_s"),
                           step_time_s=d.get("step_time_s"))
        elif ev.kind == "checkpoint":
            step = int(d.get("step", job.status.progress.step))
            self.jobs.checkpointed(job, step, str(d.get("path", f"twin://{job.id}/step-{step}")), d)
        elif ev.kind in _FINISHED:
            table.progress(job, step=job.spec.steps)
            table.end(job, JobState.SUCCEEDED, "all steps done")
            self.jobs.schedule(rt)
        elif ev.kind in _JOB_FAILED:
            table.end(job, JobState.FAILED, str(d.get("reason", ev.kind)))
            self.jobs.schedule(rt)

    def _chip_failed(self, chip: int, why: str) -> None:
        rt, table = self.rt, self.table
        if rt.chip_states()[chip] == ChipState.FAILED:  # keep it out of every allocation until repaired
            rt.fabric.set_chip_state(chip, ChipState.ISOLATED, f"isolated after {why}")
        self.jobs.save_health(rt)
        job = table.find(rt.owners.release_chip(chip))
        if job is None or job.ended:
            self.jobs.render(rt)
            return
        if job.state == JobState.PLACING:
            rt.owners.release(job.id)
            if job.id in rt.scheduler.jobs:
                rt.scheduler.requeue(job.id)
            table.transition(job, JobState.PENDING, f"chip {chip} failed before launch", allocation=None)
        else:
            table.amend(job, failed_chip=chip)
            if job.state == JobState.RECOVERING:  # already waiting for chips (e.g. reloaded after a restart)
                table.set_reason(job, f"chip {chip} failed ({why}) while recovering; moving its rank")
            else:
                table.transition(job, JobState.RECOVERING, f"chip {chip} failed ({why}); moving its rank")
            self.jobs.relaunch(rt, job)
        self.jobs.render(rt)
