"""Jobs on real fabrics (``local`` worker processes, ``ray`` actors), on the engine thread.

The twin pauses a job and lets the control plane move its ranks; real fabrics differ:

* ``local`` recovers a lost rank itself (spare slot, peer replica or checkpoint, retry
  budget for user-code crashes), so the control plane mirrors its events:
  ``job-recovering`` -> RECOVERING, ``job-resumed`` -> RUNNING on the new chips,
  ``job-failed`` -> FAILED with the fabric's cause. While the fabric recovers a job the
  control plane's scheduler leaves it alone (``owns``).
* ``ray`` ends the whole gang when a rank dies (``worker-exited``); the control plane
  then relaunches it from the last committed checkpoint, moving the dead rank to a spare
  when the cause was the infrastructure, and counting user-code crashes against the
  job's ``max_retries``.

Workers' own log lines (the fabric's job log, and the tail of each worker's output when
a job fails) are copied into the job's log, so ``job logs`` shows them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podfleet.control.lifecycle import TERMINAL, JobState
from podfleet.control.placement import Allocation
from podfleet.errors import ConflictError, InvalidInputError, NotFoundError, UnknownNameError
from podfleet.fabric.base import FabricEvent
from podfleet.training.config import PRESET_NAMES, WorkerConfig

if TYPE_CHECKING:
    from podfleet.control.jobs import JobManager
    from podfleet.control.runtime import ClusterRuntime
    from podfleet.control.specs import JobSpec
    from podfleet.store.records import JobRecord

REAL_FABRICS = ("local", "ray")
# Job ``options`` a real fabric passes to its workers (``WorkerConfig`` fields).
JOB_OPTIONS = ("seed", "global_batch", "seq_len", "lr", "step_delay_s", "threads", "entrypoint_args",
               "encrypt_checkpoints", "key_file", "checkpoint_dir", "replica_peer")
_LIVE = (JobState.RUNNING, JobState.CHECKPOINTING)


def is_real(rt: ClusterRuntime) -> bool:
    return rt.spec.fabric in REAL_FABRICS


def check_submit(rt: ClusterRuntime, spec: JobSpec) -> dict[str, Any]:
    """Refuse what a real fabric cannot run (4xx at submit, not a failed job later); the plan."""
    fabric = rt.spec.fabric
    if spec.entrypoint is None and spec.model not in PRESET_NAMES:
        raise UnknownNameError(f"model preset for a {fabric} cluster (or give an entrypoint script)",
                               spec.model, PRESET_NAMES, field="model")
    if spec.model_dims:
        raise InvalidInputError(f"model_dims applies to sim clusters; {fabric} clusters train the presets "
                                f"{', '.join(PRESET_NAMES)} or an entrypoint script", field="model_dims")
    if not isinstance(spec.parallelism, str) and tuple(spec.parallelism) != (1, 1, spec.chips):
        raise InvalidInputError(f"{fabric} clusters run data parallel: parallelism must be auto or "
                                f"1,1,{spec.chips}", field="parallelism", allowed=["auto", f"1,1,{spec.chips}"])
    opts = dict(spec.options or {})
    unknown = sorted(set(opts) - set(JOB_OPTIONS))
    if unknown:
        raise UnknownNameError("job option", unknown[0], JOB_OPTIONS, field="options")
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
    return {"tp": 1, "pp": 1, "dp": spec.chips, "note": f"data parallel on {spec.chips} {fabric} worker slots"}


def check_sim_submit(spec: JobSpec) -> None:
    if spec.options:
        raise InvalidInputError("options apply to local and ray clusters (the twin models the job)",
                                field="options")


class RealJobs:
    """The control plane's side of jobs on real fabrics (one per ``JobManager``)."""

    def __init__(self, jm: JobManager) -> None:
        self.jm = jm
        self.fabric_recovering: set[str] = set()  # jobs a local fabric is recovering itself
        self._seen: dict[str, tuple[int, str | None]] = {}  # job -> (lines seen, last line)

    def owns(self, job_id: str) -> bool:
        """True while the fabric itself recovers the job (the scheduler must not relaunch it)."""
        return job_id in self.fabric_recovering

    # --- launch ----------------------------------------------------------------------------------
    def launch_options(self, rt: ClusterRuntime, rec: JobRecord, start_step: int) -> dict[str, Any]:
        opts = dict(rec.spec.get("options") or {})
        opts["max_retries"] = int(rec.spec.get("max_retries") or 0)
        runtime = self._runtime(rec)
        # A relaunch (restart of the control plane, a Ray gang restarted) continues from
        # the newest committed checkpoint in the job's checkpoint dir, if any.
        if start_step or runtime.get("launches", 0):
            opts["resume"] = True
        if rt.spec.fabric == "ray" and "key_file" not in opts and getattr(rt.fabric, "key_file", None):
            opts["key_file"] = rt.fabric.key_file
        runtime["launches"] = runtime.get("launches", 0) + 1
        return opts

    # --- fault injection --------------------------------------------------------------------------
    def kill_worker(self, rt: ClusterRuntime, rank: int | None, job_id: str | None) -> tuple[dict[str, Any], str]:
        jm = self.jm
        if not is_real(rt) or not hasattr(rt.fabric, "kill_worker"):
            raise InvalidInputError(
                f"kill-worker needs a local or ray cluster; {rt.rec.name} runs on fabric {rt.spec.fabric} "
                "(use --kind with a twin fault such as chip-failure)", field="kind")
        if rank is None:
            raise InvalidInputError("kill-worker needs a rank (--kill-worker R)", field="rank")
        running = sorted(r.id for r in jm.records.values() if r.cluster_id == rt.id and r.state in _LIVE)
        if job_id is None:
            if len(running) != 1:
                raise InvalidInputError(
                    f"cluster {rt.rec.name} runs {len(running)} jobs; give --job (running: "
                    f"{', '.join(running) or 'none'})", field="jobId", allowed=running)
            job_id = running[0]
        rec = jm.records.get(job_id)
        if rec is None or rec.cluster_id != rt.id:
            raise NotFoundError(f"job {job_id!r} not found on cluster {rt.rec.name}; running: "
                                f"{', '.join(running) or 'none'}", field="jobId")
        if job_id not in running:
            raise ConflictError(f"job {job_id} is {rec.state}; kill-worker needs a running job "
                                f"(running: {', '.join(running) or 'none'})", field="jobId", allowed=running)
        n = len((rec.status.get("allocation") or {}).get("chips", ()))
        if not 0 <= rank < n:
            raise InvalidInputError(f"rank {rank} not in job {job_id}'s ranks 0-{n - 1}", field="rank",
                                    allowed=f"0-{n - 1}")
        pid = rt.fabric.kill_worker(job_id, rank)  # type: ignore[attr-defined]
        what = f"kill-worker: rank {rank} of {job_id}" + (f" (pid {pid})" if pid else "")
        rt.logs.append(jm.plane.now(), f"fault injected: {what}")
        jm._log(rec, f"fault injected: {what}")
        out = {"cluster_id": rt.id, "kind": "kill-worker", "job_id": job_id, "rank": rank, "pid": pid,
               "injected_at": jm.plane.now()}
        return out, f"{rt.id}/job/{job_id}/rank/{rank}"

    # --- fabric events ----------------------------------------------------------------------------
    def on_event(self, rt: ClusterRuntime, ev: FabricEvent) -> None:
        jm = self.jm
        if ev.kind in ("chip-failed", "chip-state"):
            jm.plane.save_health(rt)  # the fabric retired a slot; the rank move comes with job-resumed
            return
        rec = jm.records.get(ev.job_id) if ev.job_id else None
        if rec is None or JobState(rec.state) in TERMINAL:
            return
        self.sync_logs(rt, rec)
        d = dict(ev.detail)
        kind = ev.kind
        if kind == "progress":
            if rec.state in _LIVE:
                prog = rec.status["progress"]
                rec.status["progress"] = {**prog, "step": int(d.get("step", prog["step"])),
                                          "loss": d.get("loss", prog.get("loss")),
                                          "tokens_per_s": d.get("tokens_per_s", prog.get("tokens_per_s")),
                                          "step_time_s": d.get("step_time_s")}
                jm._refresh(rec)
        elif kind == "checkpoint":
            if rec.state in _LIVE:
                self._checkpoint(rt, rec, d)
        elif kind == "job-started":
            jm._log(rec, f"workers started on chips {d.get('chips') or rec.status['allocation']['chips']}"
                         + (f", attempt {d['attempt']}" if "attempt" in d else ""))
        elif kind == "worker-exited":
            jm._log(rec, f"worker exited: rank {d.get('rank')} on chip {ev.chip}, cause {d.get('cause')}, "
                         f"exit code {d.get('exit_code')}: {d.get('message') or d.get('reason') or ''}")
            if rt.spec.fabric == "ray":
                self._ray_exit(rt, rec, d, ev.chip)
        elif kind == "hang":
            jm._log(rec, f"rank {d.get('rank')} on chip {ev.chip} hung (no heartbeat for "
                         f"{float(d.get('heartbeat_age_s', 0)):.1f} s)")
        elif kind == "job-recovering":
            self._local_recovering(rt, rec, d)
        elif kind == "job-resumed":
            self._local_resumed(rt, rec, d)
        elif kind == "recovered":
            runtime = self._runtime(rec)
            runtime["recoveries"] = [*runtime.get("recoveries", []), {
                k: d.get(k) for k in ("rank", "cause", "source", "restored_step", "steps_lost", "resume_s", "moves")}]
            jm._log(rec, f"recovered: resumed from {d.get('source')} step {d.get('restored_step')} in "
                         f"{float(d.get('resume_s') or 0):.2f} s, {d.get('steps_lost')} step(s) lost")
            jm._refresh(rec)
        elif kind == "job-finished":
            self._update_counts(rt, rec)
            rec.status["progress"] = {**rec.status["progress"], "step": int(rec.spec["steps"]),
                                      **({"loss": d["loss"]} if d.get("loss") is not None else {})}
            self.fabric_recovering.discard(rec.id)
            jm._end(rec, JobState.SUCCEEDED, "all steps done")
            jm.schedule(rt)
        elif kind == "job-failed":
            self._update_counts(rt, rec)
            self.sync_logs(rt, rec, final=True)
            self.fabric_recovering.discard(rec.id)
            jm._end(rec, JobState.FAILED, str(d.get("reason") or "the workers failed"))
            jm.schedule(rt)
        elif kind == "job-stopped":
            self.fabric_recovering.discard(rec.id)
            jm._end(rec, JobState.STOPPED, "stopped by the fabric")
            jm.schedule(rt)
        if JobState(rec.state) in TERMINAL:
            self._seen.pop(rec.id, None)

    def _checkpoint(self, rt: ClusterRuntime, rec: JobRecord, d: dict[str, Any]) -> None:
        from podfleet.control.ids import new_id
        from podfleet.store.records import CheckpointRecord

        jm = self.jm
        step = int(d.get("step", rec.status["progress"]["step"]))
        jm._set_state(rec, JobState.CHECKPOINTING, f"checkpoint at step {step}")
        jm.plane.store.add_checkpoint(CheckpointRecord(
            new_id("ckpt"), rec.id, step, str(d.get("path", "")), jm.plane.now(),
            {k: v for k, v in d.items() if isinstance(v, int | float | str)}))
        rec.status["checkpoint_step"] = step
        sched = getattr(rt, "scheduler", None)
        if sched is not None and rec.id in sched.jobs:
            sched.report_checkpoint(rec.id, step)
        jm._set_state(rec, JobState.RUNNING, f"checkpoint at step {step} saved")

    def _local_recovering(self, rt: ClusterRuntime, rec: JobRecord, d: dict[str, Any]) -> None:
        cause = str(d.get("cause", ""))
        # (The fabric's own failure count may already include this exit: only the budget is used.)
        no_retries = not int(rec.spec.get("max_retries") or 0)
        if rec.state not in _LIVE or cause == "bad-input" or (cause == "user-code" and no_retries):
            return  # the fabric fails the job next (job-failed carries the cause)
        self.fabric_recovering.add(rec.id)
        what = "retrying after a crash in the job's code" if cause == "user-code" else "moving it to a spare"
        self.jm._set_state(rec, JobState.RECOVERING,
                           f"rank {d.get('rank')} lost ({cause}): {d.get('message', '')}; {what}")

    def _local_resumed(self, rt: ClusterRuntime, rec: JobRecord, d: dict[str, Any]) -> None:
        jm = self.jm
        self.fabric_recovering.discard(rec.id)
        self._update_counts(rt, rec)
        chips = tuple(int(c) for c in d.get("chips", ()))
        old = tuple((rec.status.get("allocation") or {}).get("chips", ()))
        for c, owner in list(rt.owner.items()):
            if owner == rec.id:
                del rt.owner[c]
        for c in chips:
            rt.owner[c] = rec.id
        moved = ", ".join(f"rank {r}: chip {a} -> {b}" for r, (a, b) in enumerate(zip(old, chips, strict=False))
                          if a != b)
        reason = f"resumed from {d.get('source')} step {d.get('restored_step')}" + (f"; {moved}" if moved else "")
        restored = int(d.get("restored_step") or 0)
        rec.status["progress"] = {**rec.status["progress"], "step": restored}
        alloc = Allocation(chips, (len(chips),), f"recovered: {moved}" if moved else "recovered on the same chips")
        if rec.state == JobState.RECOVERING:
            jm._set_state(rec, JobState.RUNNING, reason, allocation=alloc)
        else:  # a bad-input / last-retry path skipped RECOVERING: keep the allocation right
            rec.status["allocation"] = alloc.to_dict()
            jm._log(rec, reason)
            jm.plane.store.save_job(rec)
            jm._refresh(rec)

    def _ray_exit(self, rt: ClusterRuntime, rec: JobRecord, d: dict[str, Any], chip: int | None) -> None:
        """A Ray gang ended because a rank died: relaunch it, or fail the job with the cause."""
        jm = self.jm
        if rec.state not in _LIVE:
            return
        cause = str(d.get("cause", ""))
        runtime = self._runtime(rec)
        reason = str(d.get("reason") or d.get("error") or cause)
        if cause == "bad-input":
            jm._end(rec, JobState.FAILED, f"bad input: {reason}")
            jm.schedule(rt)
            return
        if cause == "infra":
            runtime["infra_failures"] = runtime.get("infra_failures", 0) + 1
            if chip is not None and rt.owner.get(chip) == rec.id:
                del rt.owner[chip]  # the dead rank moves to a spare
            jm._set_state(rec, JobState.RECOVERING, f"{reason}; relaunching from checkpoint step "
                                                    f"{rec.status.get('checkpoint_step', 0)}")
        else:
            runtime["user_failures"] = runtime.get("user_failures", 0) + 1
            budget = int(rec.spec.get("max_retries") or 0)
            if runtime["user_failures"] > budget:
                jm._end(rec, JobState.FAILED, f"user code failed ({runtime['user_failures']} failures, "
                                              f"max_retries={budget}): {reason}")
                jm.schedule(rt)
                return
            jm._set_state(rec, JobState.RECOVERING, f"{reason}; retry {runtime['user_failures']} of {budget}")
        jm._try_recover(rt, rec)

    # --- status, logs ------------------------------------------------------------------------------
    def _runtime(self, rec: JobRecord) -> dict[str, Any]:
        rt_status = rec.status.get("runtime")
        if not isinstance(rt_status, dict):
            rt_status = rec.status["runtime"] = {"infra_failures": 0, "user_failures": 0,
                                                 "max_retries": int(rec.spec.get("max_retries") or 0)}
        return rt_status

    def _status(self, rt: ClusterRuntime, job_id: str) -> Any:
        fn = getattr(rt.fabric, "job_status", None)
        try:
            return fn(job_id) if callable(fn) else None
        except NotFoundError:
            return None

    def _update_counts(self, rt: ClusterRuntime, rec: JobRecord) -> None:
        st = self._status(rt, rec.id)
        if st is None or isinstance(st, dict):
            return
        self._runtime(rec).update(attempt=st.attempt, infra_failures=st.infra_failures,
                                  user_failures=st.user_failures, max_retries=st.max_retries)

    def sync_logs(self, rt: ClusterRuntime, rec: JobRecord, *, final: bool = False) -> None:
        """Copy the fabric's new job-log lines (and, at the end, each worker's output tail)."""
        lines = self._fabric_lines(rt, rec.id)
        n, last = self._seen.get(rec.id, (0, None))
        if n <= len(lines) and (n == 0 or lines[n - 1] == last):
            new = lines[n:]
        else:  # the fabric's bounded log rotated, or a relaunch started a fresh one
            idx = max((i for i, ln in enumerate(lines) if ln == last), default=-1)
            new = lines[idx + 1:]
        if lines:
            self._seen[rec.id] = (len(lines), lines[-1])
        for ln in new:
            self.jm._log(rec, ln)
        if final:
            st = self._status(rt, rec.id)
            tail = st.get("log_tail", []) if isinstance(st, dict) else list(getattr(st, "log_tail", ()))
            known = set(lines)
            for ln in tail:
                if ln not in known:
                    self.jm._log(rec, f"worker output: {ln}")

    def _fabric_lines(self, rt: ClusterRuntime, job_id: str) -> list[str]:
        fn = getattr(rt.fabric, "job_logs", None)
        try:
            if callable(fn):
                return list(fn(job_id))
            jobs = getattr(rt.fabric, "jobs", None)
            job = jobs.get(job_id) if isinstance(jobs, dict) else None
            return list(getattr(job, "log", ()))
        except NotFoundError:
            return []


def cluster_workdir(root: str | Path | None, cluster_id: str) -> Path:
    """Where a real cluster keeps its jobs' checkpoints, logs and its key: stable across
    restarts of the control plane, so a reloaded job resumes from its checkpoints."""
    base = Path(root) if root else Path(os.environ.get("PODFLEET_WORKDIR") or Path.home() / ".podfleet" / "work")
    return base / "clusters" / cluster_id
