"""Jobs on the twin: one SimPy process per job, advancing step by step.

To keep a day of virtual time cheap, a job advances in batches of whole steps that
last at most one telemetry interval and never cross a checkpoint, so conditions
(throttling, link state) are re-read at least once per tick. An interrupt (a chip of
the job failed, pause, stop) keeps the steps completed so far and loses the partial
one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from podfleet.errors import ConflictError, InvalidInputError, NotFoundError
from podfleet.fabric.base import ChipState, WorkerGroupSpec
from podfleet.fabric.sim.workload import (
    JobRun,
    JobState,
    default_step_time,
    loss_at,
    step_breakdown,
    tokens_per_step,
)

if TYPE_CHECKING:
    from podfleet.fabric.sim.fabric import SimFabric

_UTIL = 0.95  # busy share of a compute phase, as neuron-monitor would show it
MIN_COMM_SHARE = 0.1  # overlapped gradient traffic: links busy even when comm is hidden
DEFAULT_COMPUTE_SHARE = 0.8  # share of a step spent computing when the model does not say
_STOP = "stop"


class JobsMixin:
    def _init_jobs(self: SimFabric) -> None:
        self.jobs: dict[str, JobRun] = {}
        self._chip_job: dict[int, str] = {}

    # --- public ----------------------------------------------------------------------
    def launch(self: SimFabric, group: WorkerGroupSpec) -> JobRun:
        """Start a job on ``group.chips`` (rank r on chips[r]), from ``options["start_step"]``
        (default 0; a restart from a checkpoint)."""
        assert self.tl is not None
        if group.job_id in self.jobs and self.jobs[group.job_id].state in (JobState.RUNNING, JobState.PAUSED):
            raise ConflictError(f"job {group.job_id} is already running", field="job_id")
        if not group.chips:
            raise InvalidInputError("a job needs at least one chip", field="chips")
        if group.steps < 1:
            raise InvalidInputError(f"steps must be >= 1, got {group.steps}", field="steps")
        self._check_gang(group)
        start_step = int(group.options.get("start_step", 0))
        if not 0 <= start_step < group.steps:
            raise InvalidInputError(f"start_step must be 0-{group.steps - 1}, got {start_step}", field="start_step")
        run = JobRun(spec=group, started_t=self.now, step=start_step, last_checkpoint=start_step)
        self.jobs[group.job_id] = run
        for c in group.chips:
            self._chip_job[int(c)] = group.job_id
        self._event("job-started", job_id=group.job_id, chips=len(group.chips), model=group.model,
                    steps=group.steps)
        run.process = self.tl.process(self._job_loop(run))
        return run

    def job(self: SimFabric, job_id: str) -> JobRun:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise NotFoundError(f"job {job_id} does not exist on this fabric", field="job_id") from None

    def stop(self: SimFabric, job_id: str) -> None:
        run = self.job(job_id)
        if run.state in (JobState.STOPPED, JobState.FINISHED):
            return
        run.state = JobState.STOPPED
        self._release(run)
        if run.process is not None and run.process.is_alive:
            run.process.interrupt(_STOP)
        self._event("job-stopped", job_id=job_id, step=run.step)

    def pause(self: SimFabric, job_id: str, reason: str = "paused by command") -> None:
        run = self.job(job_id)
        if run.state != JobState.RUNNING:
            raise ConflictError(f"job {job_id} is {run.state.value}, not running", field="job_id")
        self._pause_job(job_id, reason)

    def resume(self: SimFabric, job_id: str, *, from_step: int | None = None) -> None:
        """Resume a paused job, optionally rolled back to ``from_step`` (a checkpoint)."""
        run = self.job(job_id)
        if run.state != JobState.PAUSED:
            raise ConflictError(f"job {job_id} is {run.state.value}, not paused", field="job_id")
        for c in run.chips:
            st = self.chip_state(c)
            if st not in (ChipState.HEALTHY, ChipState.DEGRADED):
                raise ConflictError(f"chip {c} of job {job_id} is {st.value}; move its rank first", field="chips")
        if from_step is not None:
            if not 0 <= from_step <= run.step:
                raise InvalidInputError(f"from_step must be 0-{run.step}, got {from_step}", field="from_step")
            run.step = from_step
        run.state = JobState.RUNNING
        run.pause_reason = None
        self._event("job-resumed", job_id=job_id, step=run.step)
        if run.resume_evt is not None and not run.resume_evt.triggered:
            run.resume_evt.succeed()

    def move_rank(self: SimFabric, job_id: str, rank: int, new_chip: int) -> None:
        """Run rank ``rank`` of the job on ``new_chip`` from now on."""
        run = self.job(job_id)
        if run.state in (JobState.STOPPED, JobState.FINISHED):
            raise ConflictError(f"job {job_id} is {run.state.value}", field="job_id")
        if not 0 <= rank < len(run.chips):
            raise InvalidInputError(f"rank must be 0-{len(run.chips) - 1}, got {rank}", field="rank")
        new_chip = self.check_chip(new_chip)
        if new_chip in run.chips:
            raise ConflictError(f"chip {new_chip} is in use by job {job_id} (rank {run.chips.index(new_chip)})",
                                field="new_chip")
        self._check_free(new_chip, job_id)
        old = run.chips[rank]
        chips = list(run.chips)
        chips[rank] = new_chip
        self._set_load(run, 0.0, 0.0, 0.0)
        self._chip_job.pop(old, None)
        self._chip_job[new_chip] = job_id
        run.spec = dataclasses.replace(run.spec, chips=tuple(chips))
        self._event("rank-moved", job_id=job_id, rank=rank, from_chip=old, to_chip=new_chip)

    # --- internals ---------------------------------------------------------------------
    def _check_gang(self: SimFabric, group: WorkerGroupSpec) -> None:
        """All chips exist, are distinct, usable and free (vectorized: gangs can be 4,096)."""
        arr = np.asarray(group.chips)
        if arr.dtype.kind not in "iu" or arr.ndim != 1:
            raise InvalidInputError(f"chips must be integers, got {list(group.chips)[:8]}", field="chips")
        if arr.min() < 0 or arr.max() >= self.n_chips:
            bad = int(arr[(arr < 0) | (arr >= self.n_chips)][0])
            self.check_chip(bad)
        if np.unique(arr).size != arr.size:
            raise InvalidInputError("a chip appears twice in the job's chips", field="chips")
        bad_state = ~self.usable_mask()[arr]
        taken = [c for c in group.chips if self._chip_job.get(int(c), group.job_id) != group.job_id]
        if bad_state.any() or taken:
            chip = int(arr[bad_state][0]) if bad_state.any() else int(taken[0])
            self._check_free(chip, group.job_id)

    def _check_free(self: SimFabric, chip: int, job_id: str) -> None:
        other = self._chip_job.get(chip)
        if other is not None and other != job_id:
            raise ConflictError(f"chip {chip} is in use by job {other}", field="chips")
        st = self.chip_state(chip)
        if st not in (ChipState.HEALTHY, ChipState.DEGRADED):
            raise ConflictError(f"chip {chip} is {st.value}; jobs need healthy or degraded chips", field="chips")

    def _release(self: SimFabric, run: JobRun) -> None:
        self._set_load(run, 0.0, 0.0, 0.0)
        for c in run.chips:
            if self._chip_job.get(c) == run.job_id:
                del self._chip_job[c]

    def _set_load(self: SimFabric, run: JobRun, load: float, comm: float, hbm: float) -> None:
        key = (load, comm, hbm, run.chips)
        if run.extra.get("load") == key:
            return  # unchanged: keep the telemetry's derived arrays
        run.extra["load"] = key
        idx = list(run.chips)
        t = self.telemetry
        t.load[idx] = load
        t.comm_load[idx] = comm
        t.hbm_fraction[idx] = hbm
        t.dirty = True

    def _pause_job(self: SimFabric, job_id: str, reason: str) -> None:
        run = self.jobs.get(job_id)
        if run is None or run.state != JobState.RUNNING:
            return
        run.state = JobState.PAUSED
        run.pause_reason = reason
        self._set_load(run, 0.0, 0.0, float(run.spec.options.get("hbm_fraction", 0.85)))
        if run.process is not None and run.process.is_alive:
            run.process.interrupt("pause")
        self._event("job-paused", job_id=job_id, step=run.step, reason=reason)

    def _job_loop(self: SimFabric, run: JobRun):  # type: ignore[no-untyped-def]
        assert self.tl is not None
        env, rng, spec0 = self.tl.env, self.tl.rng, run.spec
        hbm = float(spec0.options.get("hbm_fraction", 0.85))
        tokens = tokens_per_step(spec0, self)
        window = self.telemetry_interval_s
        while run.step < run.spec.steps:
            if run.state == JobState.PAUSED:
                run.resume_evt = env.event()
                try:
                    yield run.resume_evt
                except simpy.Interrupt as irq:
                    if irq.cause == _STOP:
                        return
                continue
            if self.step_time_fn is default_step_time:
                compute_s, _, st = step_breakdown(run.spec, self)
                compute_frac = compute_s / st
            else:  # a pluggable model gives only the step time
                st = float(self.step_time_fn(run.spec, self))
                compute_frac = DEFAULT_COMPUTE_SHARE
            if not st > 0 or math.isinf(st):
                raise ValueError(f"step_time_fn returned {st} for job {run.job_id}")
            ci = run.spec.checkpoint_interval
            left = run.spec.steps - run.step
            if ci:
                left = min(left, ci - run.step % ci)
            k = max(1, min(left, int(window // st)))
            # Communication hidden behind compute still moves bytes: keep the links loaded.
            self._set_load(run, _UTIL * compute_frac, max(1.0 - compute_frac, MIN_COMM_SHARE), hbm)
            start = env.now
            try:
                yield env.timeout(k * st)
            except simpy.Interrupt as irq:
                run.step += int((env.now - start) // st)
                if irq.cause == _STOP:
                    return
                continue
            run.step += k
            run.step_time_s = st
            run.tokens_per_s = tokens / st
            run.loss = loss_at(run.step, float(rng.standard_normal()))
            self._after_steps(run)
        run.state = JobState.FINISHED
        self._release(run)
        self._event("job-finished", job_id=run.job_id, step=run.step, loss=round(run.loss, 5),
                    duration_s=env.now - run.started_t)

    def _after_steps(self: SimFabric, run: JobRun) -> None:
        ci = run.spec.checkpoint_interval
        if ci and run.step % ci == 0:
            run.last_checkpoint = run.step
            self._event("checkpoint", job_id=run.job_id, step=run.step)
        due_steps = run.step - run.last_progress_step >= self.progress_every_steps
        due_time = self.now - run.last_progress_t >= self.telemetry_interval_s
        if (due_steps and due_time) or run.step >= run.spec.steps:
            run.last_progress_step, run.last_progress_t = run.step, self.now
            self._event("progress", job_id=run.job_id, **self._progress(run))

    @staticmethod
    def _progress(run: JobRun) -> dict[str, Any]:
        return {
            "step": run.step,
            "loss": round(run.loss, 5),
            "tokens_per_s": round(run.tokens_per_s, 3),
            "step_time_s": round(run.step_time_s, 6),
        }
