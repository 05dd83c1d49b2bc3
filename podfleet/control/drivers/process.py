"""The process driver: jobs whose state lives in checkpoints, on fabrics of worker
processes (local processes, Ray actors, Neuron hosts), on the engine thread.

Such a fabric reports two styles of rank loss, and the driver follows whichever it
sees (it never asks the fabric's name):

* the fabric recovers the rank itself (spare slot, peer replica or checkpoint, retry
  budget for user-code crashes): ``job-recovering`` -> RECOVERING, ``job-resumed`` ->
  RUNNING on the new chips, ``job-failed`` -> FAILED with the fabric's cause. While it
  does, the scheduler leaves the job alone (``owns``).
* the gang ended with the rank (``worker-exited`` with ``gang_ended``): the driver
  relaunches it from the last committed checkpoint, moving the dead rank to another
  chip when the cause was the infrastructure, and counting user-code crashes against
  the job's ``max_retries``. A fabric that began moving the rank itself and gave up
  (the Ray fabric's rank move, ``fabric/ray/rankmove.py``) ends the gang this way too.

Workers' own log lines (the fabric's job log, and the tail of each worker's output when
a job fails) are copied into the job's log, so ``job logs`` shows them.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from podfleet.control.drivers.relaunches import Relaunches
from podfleet.control.jobtable import Job, RunCounts
from podfleet.control.lifecycle import JobState
from podfleet.control.placement import Allocation
from podfleet.control.planning import Plan
from podfleet.errors import (
    ConflictError,
    InfeasibleError,
    InvalidInputError,
    NotFoundError,
    UnknownNameError,
)
from podfleet.fabric.base import (
    FabricEvent,
    GangPlacement,
    Introspection,
    OnDemandCheckpoints,
    WorkerGroupSpec,
    WorkerKill,
    WorkerSlowdown,
    hang_reason,
)
from podfleet.training.config import PRESET_NAMES, WorkerConfig
from podfleet.wire import JsonObject

if TYPE_CHECKING:
    from podfleet.control.drivers.base import JobOps
    from podfleet.control.runtime import ClusterRuntime
    from podfleet.control.specs import JobSpec

# Job ``options`` a process fabric passes to its workers (``WorkerConfig`` fields).
JOB_OPTIONS = ("seed", "global_batch", "seq_len", "lr", "step_delay_s", "threads", "entrypoint_args",
               "encrypt_checkpoints", "key_file", "checkpoint_dir", "replica_peer", "grad_compression")
# Job options that are the fabric's, not the worker's (asked of the fabric's capabilities).
FABRIC_JOB_OPTIONS = ("placement",)
_LIVE = (JobState.RUNNING, JobState.CHECKPOINTING)


# How long the plane waits for a process fabric's on-demand checkpoint to be written and
# reported before it preempts from the last saved one instead (the gang holds longer:
# ``fabric.base.CHECKPOINT_HOLD_S``).
CHECKPOINT_WAIT_S = 30.0


class ProcessDriver:
    # The plane waits for the fabric's report of an on-demand checkpoint (not a modelled time).
    checkpoint_reported = True
    plans_models = False  # data parallel over worker slots, never the planner's plans
    checkpoint_scheme: str

    def __init__(self, jobs: JobOps, rt: ClusterRuntime) -> None:
        self.jobs, self.rt = jobs, rt
        self.table = jobs.table
        self.fabric = rt.fabric
        # A worker's state is only in its checkpoints: its jobs are preempted only where the
        # fabric saves them on demand (else the work since the last checkpoint would be redone).
        self.on_demand_checkpoints = isinstance(rt.fabric, OnDemandCheckpoints)
        self.checkpoint_scheme = rt.fabric.kind
        self.fabric_recovering: set[str] = set()  # jobs the fabric is recovering itself
        # RECOVERING jobs relaunched whose gang has not started yet: they stay RECOVERING
        # (the whole relaunch, so the state is true) until the fabric's ``job-started``.
        self.relaunching: set[str] = set()
        self.seen: dict[str, tuple[int, str | None]] = {}  # job -> (lines seen, last line)
        # Recoveries of relaunched gangs (and the fabric's own), recorded like the twin's.
        self.relaunches = Relaunches(self.table, self.counts, jobs.now, lambda: tuple(rt.spares))

    # --- JobDriver --------------------------------------------------------------------------
    def owns(self, job_id: str) -> bool:
        return job_id in self.fabric_recovering or job_id in self.relaunching

    def holds_recovering(self, job_id: str) -> bool:
        """A relaunched gang has not started yet: its job stays RECOVERING until it has."""
        return job_id in self.relaunching

    def check_submit(self, spec: JobSpec) -> tuple[Plan | None, float | None]:
        """Refuse what a process fabric cannot run (4xx at submit, not a failed job later)."""
        fabric = self.rt.spec.fabric
        if spec.entrypoint is None and spec.model not in PRESET_NAMES:
            # A preset the API knows, but not one this cluster's trainer runs: 422, not 400.
            raise InfeasibleError(f"model {spec.model!r} is not a preset a {fabric} cluster trains (or give an "
                                  f"entrypoint script); valid: {', '.join(PRESET_NAMES)}", field="model",
                                  allowed=sorted(PRESET_NAMES))
        if spec.model_dims:
            raise InfeasibleError(f"model_dims applies to sim clusters; {fabric} clusters train the presets "
                                    f"{', '.join(PRESET_NAMES)} or an entrypoint script", field="model_dims")
        if not isinstance(spec.parallelism, str) and tuple(spec.parallelism) != (1, 1, spec.chips):
            raise InfeasibleError(f"{fabric} clusters run data parallel: parallelism must be auto or "
                                    f"1,1,{spec.chips}", field="parallelism",
                                    allowed=["auto", f"1,1,{spec.chips}"])
        opts = dict(spec.options or {})
        unknown = sorted(set(opts) - set(JOB_OPTIONS) - set(FABRIC_JOB_OPTIONS))
        if unknown:
            raise UnknownNameError("job option", unknown[0], JOB_OPTIONS + FABRIC_JOB_OPTIONS, field="options")
        if "placement" in opts:
            self._check_placement(opts.pop("placement"))
        if "entrypoint_args" in opts:
            opts["entrypoint_args"] = tuple(str(a) for a in opts["entrypoint_args"])
        try:  # the worker's own validation (batch divisible by ranks, types), at submit time
            WorkerConfig(**{"checkpoint_dir": "check", **opts}, job_id="check", rank=0, world_size=spec.chips,
                         model=spec.model, steps=spec.steps, checkpoint_interval=spec.checkpoint_interval,
                         entrypoint=spec.entrypoint)
        except InvalidInputError as exc:
            raise InvalidInputError(f"options: {exc.message}", field="options") from None
        except TypeError as exc:
            raise InvalidInputError(f"options: {exc}", field="options") from None
        return Plan(1, 1, spec.chips, note=f"data parallel on {spec.chips} {fabric} worker slots"), None

    def _check_placement(self, value: object) -> None:
        fab = self.fabric
        if not isinstance(fab, GangPlacement):
            raise InvalidInputError(f"option placement applies to fabrics that place a gang across machines "
                                    f"(ray); cluster {self.rt.rec.name} runs on {self.rt.spec.fabric}",
                                    field="options")
        strategies = fab.placement_strategies()
        if not isinstance(value, str) or value.lower() not in strategies:
            raise UnknownNameError("placement strategy", str(value), strategies, field="options")

    def launch_options(self, job: Job, start_step: int) -> JsonObject:
        spec = job.spec
        opts = dict(spec.options or {})
        opts["max_retries"] = spec.max_retries
        if spec.grad_compression != "none":
            opts["grad_compression"] = spec.grad_compression
        if spec.array_index is not None:  # a job-array member (control.dependencies)
            opts["array_index"] = spec.array_index
        # A relaunch (restart of the control plane, a gang restarted) continues from the
        # newest committed checkpoint in the job's checkpoint dir, if any.
        if start_step or self.counts(job).launches:
            opts["resume"] = True
        self.table.count_run(job, launches=1)
        return opts

    def start(self, job: Job, chips: tuple[int, ...], start_step: int) -> None:
        spec = job.spec
        self.relaunches.relaunched(job, chips, start_step)
        if job.state == JobState.RECOVERING:
            self.relaunching.add(job.id)  # a fabric that starts the gang inline clears it at once
        try:
            self.fabric.launch(WorkerGroupSpec(
                job_id=job.id, chips=chips, model=spec.model, steps=spec.steps,
                checkpoint_interval=spec.checkpoint_interval, entrypoint=spec.entrypoint,
                options=self.launch_options(job, start_step),
            ))
        except BaseException:
            self.relaunching.discard(job.id)
            raise

    def stop(self, job_id: str) -> None:
        with contextlib.suppress(NotFoundError, ConflictError):
            self.fabric.stop(job_id)

    def preemptible(self, spec: JobSpec) -> bool:
        """Only the built-in loop saves on demand (a user script's state is its own), and
        only a job that keeps checkpoints (``checkpoint_interval`` or a ``checkpoint_dir``):
        one without has nowhere every fabric can save it, so it is never preempted."""
        keeps = bool(spec.checkpoint_interval) or bool((spec.options or {}).get("checkpoint_dir"))
        return self.on_demand_checkpoints and spec.entrypoint is None and keeps

    def checkpoint_now(self, job_id: str) -> int | None:
        fab = self.fabric
        if not isinstance(fab, OnDemandCheckpoints):
            return None
        try:
            return fab.checkpoint_now(job_id)
        except (NotFoundError, ConflictError):
            return None  # it ended, or cannot be saved on demand: the last saved checkpoint

    def checkpoint_write_s(self, job_id: str) -> float:
        """The longest the plane waits for the gang's report of the checkpoint."""
        return CHECKPOINT_WAIT_S if self.on_demand_checkpoints else 0.0

    def checkpoint_saved(self, job_id: str, step: int) -> int | None:
        """The step of the checkpoint the fabric reported once it holds ``step``, else None."""
        fab = self.fabric
        run = fab.run_status(job_id) if isinstance(fab, Introspection) else None
        if run is None or run.checkpoint_step is None or run.checkpoint_step < step:
            return None
        return run.checkpoint_step

    # --- fault injection ------------------------------------------------------------------------
    def kill_worker(self, rank: int | None, job_id: str | None) -> tuple[JsonObject, str]:
        rt, table = self.rt, self.table
        if not isinstance(self.fabric, WorkerKill):
            raise InvalidInputError(f"fabric {rt.spec.fabric} of cluster {rt.rec.name} cannot kill a worker",
                                    field="kind")
        job, rank = self._fault_target("kill-worker", "--kill-worker R", rank, job_id)
        job_id = job.id
        pid = self.fabric.kill_worker(job_id, rank)
        what = f"kill-worker: rank {rank} of {job_id}" + (f" (pid {pid})" if pid else "")
        now = self.jobs.now()
        rt.logs.append(now, f"fault injected: {what}")
        table.log(job, f"fault injected: {what}")
        out = {"cluster_id": rt.id, "kind": "kill-worker", "job_id": job_id, "rank": rank, "pid": pid,
               "injected_at": now}
        return out, f"{rt.id}/job/{job_id}/rank/{rank}"

    def slow_worker(self, rank: int | None, job_id: str | None, factor: float | None) -> tuple[JsonObject, str]:
        rt, table = self.rt, self.table
        if not isinstance(self.fabric, WorkerSlowdown):
            raise InfeasibleError(f"fabric {rt.spec.fabric} of cluster {rt.rec.name} cannot slow a worker down",
                                  field="kind")
        if factor is None:
            raise InfeasibleError("slow-worker needs a factor (--slow-worker RANK:FACTOR)", field="factor")
        job, rank = self._fault_target("slow-worker", "--slow-worker RANK:FACTOR", rank, job_id)
        self.fabric.slow_worker(job.id, rank, float(factor))
        what = f"slow-worker: rank {rank} of {job.id} slowed {factor:g}x"
        now = self.jobs.now()
        rt.logs.append(now, f"fault injected: {what}")
        table.log(job, f"fault injected: {what}")
        out = {"cluster_id": rt.id, "kind": "slow-worker", "job_id": job.id, "rank": rank, "factor": float(factor),
               "injected_at": now}
        return out, f"{rt.id}/job/{job.id}/rank/{rank}"

    def _fault_target(self, kind: str, flag: str, rank: int | None, job_id: str | None) -> tuple[Job, int]:
        """The running job and rank a worker fault names (the only running job when none is given)."""
        rt, table = self.rt, self.table
        if rank is None:
            raise InfeasibleError(f"{kind} needs a rank ({flag})", field="rank")
        running = sorted(j.id for j in table.on_cluster(rt.id) if j.state in _LIVE)
        if job_id is None:
            if len(running) != 1:
                raise InfeasibleError(
                    f"cluster {rt.rec.name} runs {len(running)} jobs; give --job (running: "
                    f"{', '.join(running) or 'none'})", field="job_id", allowed=running)
            job_id = running[0]
        job = table.find(job_id)
        if job is None or job.cluster_id != rt.id:
            raise NotFoundError(f"job {job_id!r} not found on cluster {rt.rec.name}; running: "
                                f"{', '.join(running) or 'none'}", field="job_id")
        if job_id not in running:
            raise ConflictError(f"job {job_id} is {job.state.value}; {kind} needs a running job "
                                f"(running: {', '.join(running) or 'none'})", field="job_id", allowed=running)
        n = len(job.chips)
        if not 0 <= rank < n:
            raise NotFoundError(f"rank {rank} not in job {job_id}'s ranks 0-{n - 1}", field="rank",
                                    allowed=f"0-{n - 1}")
        return job, rank

    # --- fabric events --------------------------------------------------------------------------
    def on_event(self, ev: FabricEvent) -> None:
        rt, table = self.rt, self.table
        if ev.kind in ("chip-failed", "chip-state"):
            self.jobs.save_health(rt)  # the fabric retired a slot; the rank move comes with job-resumed
            if ev.kind == "chip-state" and ev.chip is not None:
                self.jobs.schedule(rt)  # a chip back in service (a node joined) may take waiting work
            return
        job = table.find(ev.job_id)
        if job is None or job.ended:
            self.relaunches.forget(ev.job_id)
            return
        self.sync_logs(job)
        d = dict(ev.detail)
        kind = ev.kind
        if kind == "progress":
            if job.state in _LIVE:
                table.progress(job, step=d.get("step"), loss=d.get("loss"), tokens_per_s=d.get("tokens_per_s"),
                               step_time_s=d.get("step_time_s"))
                self.relaunches.trained(job, int(d.get("step") or 0))
        elif kind == "checkpoint":
            if job.state in _LIVE:
                self.jobs.checkpointed(job, int(d.get("step", job.status.progress.step)), str(d.get("path", "")), d)
            if job.id in self.rt.checkpoint_writes:
                self.jobs.schedule(rt)  # a preemption waits for this one: its preemptor may start now
        elif kind == "job-started":
            table.log(job, f"workers started on chips {d.get('chips') or list(job.chips)}"
                           + (f", attempt {d['attempt']}" if "attempt" in d else ""))
            if job.id in self.relaunching:
                self.relaunching.discard(job.id)
                if job.state == JobState.RECOVERING and job.status.allocation:
                    # The relaunch is over only now that the gang runs (dispatch.launch left it).
                    self.table.transition(job, JobState.RUNNING, f"relaunched gang running on chips "
                                          f"{list(job.chips)} from step {job.status.progress.step}")
        elif kind == "job-waiting":  # the fabric holds the gang back (its cluster unreachable)
            table.set_reason(job, f"waiting: {d.get('reason')}")
        elif kind == "worker-exited":
            table.log(job, f"worker exited: rank {d.get('rank')} on chip {ev.chip}, cause {d.get('cause')}, "
                           f"exit code {d.get('exit_code')}: {d.get('message') or d.get('reason') or ''}")
            if d.get("gang_ended"):
                self._gang_ended(job, d, ev.chip)
        elif kind == "hang":
            table.log(job, f"rank {d.get('rank')} on chip {ev.chip} hung (no heartbeat for "
                           f"{float(d.get('heartbeat_age_s', 0)):.1f} s)")
        elif kind == "job-recovering":
            self._recovering(job, d)
        elif kind == "job-resumed":
            self._resumed(job, d)
        elif kind == "recovered":  # the fabric recovered a rank itself and measured it
            self.relaunches.fabric_recovered(job, d, ev.chip if ev.chip is not None else d.get("chip"))
        elif kind == "job-stopped" and job.state == JobState.PENDING:
            table.log(job, "the preempted gang stopped; the job waits to resume from its checkpoint")
        elif kind in ("job-finished", "job-failed", "job-stopped"):
            self._ended(job, kind, d)
        if job.ended:
            self.seen.pop(job.id, None)

    def _ended(self, job: Job, kind: str, d: JsonObject) -> None:
        self.fabric_recovering.discard(job.id)
        self.relaunching.discard(job.id)
        self.relaunches.ended(job)
        if kind == "job-stopped":
            self.table.end(job, JobState.STOPPED, "stopped by the fabric")
        else:
            self._update_counts(job)
            if kind == "job-finished":
                self.table.progress(job, step=job.spec.steps, loss=d.get("loss"))
                self.table.end(job, JobState.SUCCEEDED, "all steps done")
            else:
                self.sync_logs(job, final=True)
                self.table.end(job, JobState.FAILED, str(d.get("reason") or "the workers failed"))
        self.jobs.schedule(self.rt)

    def _recovering(self, job: Job, d: JsonObject) -> None:
        cause = str(d.get("cause", ""))
        # (The fabric's own failure count may already include this exit: only the budget is used.)
        no_retries = not job.spec.max_retries
        if job.state not in _LIVE or cause == "bad-input" or (cause == "user-code" and no_retries):
            return  # the fabric fails the job next (job-failed carries the cause)
        self.fabric_recovering.add(job.id)
        what = "retrying after a crash in the job's code" if cause == "user-code" else "moving it to a spare"
        self.table.transition(job, JobState.RECOVERING,
                              f"rank {d.get('rank')} lost ({cause}): {d.get('message', '')}; {what}")

    def _resumed(self, job: Job, d: JsonObject) -> None:
        self.fabric_recovering.discard(job.id)
        self._update_counts(job)
        chips = tuple(int(c) for c in d.get("chips", ()))
        old = job.chips
        self.rt.owners.replace(job.id, chips)
        moved = ", ".join(f"rank {r}: chip {a} -> {b}" for r, (a, b) in enumerate(zip(old, chips, strict=False))
                          if a != b)
        reason = f"resumed from {d.get('source')} step {d.get('restored_step')}" + (f"; {moved}" if moved else "")
        self.table.progress(job, step=int(d.get("restored_step") or 0))
        alloc = Allocation(chips, (len(chips),), f"recovered: {moved}" if moved else "recovered on the same chips")
        if job.state == JobState.RECOVERING:
            self.table.transition(job, JobState.RUNNING, reason, allocation=alloc)
        else:  # a bad-input / last-retry path skipped RECOVERING: keep the allocation right
            self.table.log(job, reason)
            self.table.amend(job, allocation=alloc, persist=True)

    def _gang_ended(self, job: Job, d: JsonObject, chip: int | None) -> None:
        """The gang ended because a rank died: relaunch it, or fail the job with the cause.
        A relaunched gang that is lost before it started is relaunched again the same way."""
        again = job.id in self.relaunching and job.state == JobState.RECOVERING
        # A fabric that was moving the rank itself (job-recovering) and gave up ends the
        # gang: the job is RECOVERING already, and is relaunched as any lost gang is.
        again = again or (job.id in self.fabric_recovering and job.state == JobState.RECOVERING)
        self.relaunching.discard(job.id)
        self.fabric_recovering.discard(job.id)
        if job.state not in _LIVE and not again:
            return
        cause = str(d.get("cause", ""))
        reason = str(d.get("reason") or d.get("error") or cause)
        if cause == "bad-input":
            self.table.end(job, JobState.FAILED, f"bad input: {reason}")
            self.jobs.schedule(self.rt)
            return
        if cause == "infra" and d.get("killed_by") == "hang":
            counts = self.table.count_run(job, hang_restarts=1)
            if counts.hang_restarts > self.jobs.hang_restarts:
                # Hung again and again: its code (the GIL held in a C call, a deadlock),
                # not the host. A user-code failure, not relaunched again.
                self.table.count_run(job, user_failures=1)
                self.table.end(job, JobState.FAILED, hang_reason(f"rank {d.get('rank')} on chip {chip}",
                                                                 counts.hang_restarts, None, self.jobs.hang_restarts))
                self.jobs.schedule(self.rt)
                return
        self.relaunches.open(job, d.get("rank"), cause, chip)
        if cause == "infra":
            self.table.count_run(job, infra_failures=1)
            if chip is not None:
                self.rt.owners.release_chip(chip, job.id)  # the dead rank moves to another chip
            why = f"{reason}; relaunching from checkpoint step {job.status.checkpoint_step}"
            if again:
                self.table.set_reason(job, why)
            else:
                self.table.transition(job, JobState.RECOVERING, why)
        else:
            counts = self.table.count_run(job, user_failures=1)
            budget = job.spec.max_retries
            if counts.user_failures > budget:
                self.table.end(job, JobState.FAILED, f"user code failed ({counts.user_failures} failures, "
                                                     f"max_retries={budget}): {reason}")
                self.jobs.schedule(self.rt)
                return
            why = f"{reason}; retry {counts.user_failures} of {budget}"
            if again:
                self.table.set_reason(job, why)
            else:
                self.table.transition(job, JobState.RECOVERING, why)
        self.jobs.relaunch(self.rt, job)

    # --- status, logs ------------------------------------------------------------------------------
    def counts(self, job: Job) -> RunCounts:
        """The job's run counts (read; the job table writes them)."""
        return self.table.run_counts(job)

    def _update_counts(self, job: Job) -> None:
        if not isinstance(self.fabric, Introspection):
            return
        st = self.fabric.run_status(job.id)
        if st is None:
            return
        # A fabric that recovers ranks itself counts across its attempts; one whose gang
        # ends with a rank reports only the current run, while this driver counted the
        # relaunches: the larger of the two is the job's count either way.
        self.table.count_run(job, at_least=RunCounts(attempt=st.attempt, infra_failures=st.infra_failures,
                                                     user_failures=st.user_failures, max_retries=st.max_retries))

    def sync_logs(self, job: Job, *, final: bool = False) -> None:
        """Copy the fabric's new job-log lines (and, at the end, each worker's output tail)."""
        if not isinstance(self.fabric, Introspection):
            return
        lines = self.fabric.run_logs(job.id)
        n, last = self.seen.get(job.id, (0, None))
        if n <= len(lines) and (n == 0 or lines[n - 1] == last):
            new = lines[n:]
        else:  # the fabric's bounded log rotated, or a relaunch started a fresh one
            idx = max((i for i, ln in enumerate(lines) if ln == last), default=-1)
            new = lines[idx + 1:]
        if lines:
            self.seen[job.id] = (len(lines), lines[-1])
        for ln in new:
            self.table.log(job, ln)
        if final:
            st = self.fabric.run_status(job.id)
            known = set(lines)
            for ln in st.log_tail if st is not None else ():
                if ln not in known:
                    self.table.log(job, f"worker output: {ln}")
