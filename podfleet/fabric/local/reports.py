"""Turning a worker's reports (progress, checkpoint shards, replicas, logs) into job state.

Runs on the engine thread (delivered by ``LocalFabric.deliver``), never on a reader, with
the fabric's shared ``LocalState`` and its ``emit``.
"""

from __future__ import annotations

from collections.abc import Callable

from podfleet.checkpoint import manifest
from podfleet.fabric.local import rankmove
from podfleet.fabric.local.jobs import LocalJob
from podfleet.fabric.local.process import Message, WorkerProcess
from podfleet.fabric.local.state import LocalState

Emit = Callable[..., None]  # emit(kind, chip=, job_id=, **detail)


def handle_message(state: LocalState, emit: Emit, wp: WorkerProcess, msg: Message) -> None:
    if wp.cfg is None:
        return
    job = state.jobs.get(wp.cfg.job_id)
    if job is None:
        return
    kind = msg.get("type")
    if kind == "log":
        job.log.append(f"[attempt {wp.attempt} rank {wp.rank}] {msg.get('line', '')}")
        if wp.rank == 0 and wp.attempt == job.attempt and job.speed is not None:
            job.speed.split_logged(str(msg.get("line", "")))
    elif kind == "error":
        wp.error = msg
        job.log.append(f"[attempt {wp.attempt} rank {wp.rank}] error [{msg.get('kind')}]: {msg.get('message')}")
    elif wp.attempt != job.attempt:
        return  # a straggler from a replaced gang
    elif kind == "progress":
        _on_progress(state, emit, job, wp, msg)
    elif kind == "checkpoint":
        _on_checkpoint(emit, job, wp, int(msg["step"]))
    elif kind == "regrouped":
        rankmove.on_regrouped(emit, job, msg)
    elif kind == "replica":
        step = int(msg["step"])
        if job.replica is None or step > job.replica[0]:
            job.replica = (step, str(msg["path"]))


def _on_progress(state: LocalState, emit: Emit, job: LocalJob, wp: WorkerProcess, msg: Message) -> None:
    step = int(msg["step"])
    state.metrics["step_time_s"][wp.chip] = msg["step_time_s"]
    state.metrics["tokens_per_s"][wp.chip] = msg["tokens_per_s"]
    sp = job.speed
    if sp is not None and msg.get("t") is not None and sp.observe(step, wp.rank, float(msg["t"]),
                                                                 float(msg["step_time_s"])):
        for rank, chip in enumerate(job.chips):
            state.metrics["own_step_s"][chip] = sp.own_s[rank]
            state.metrics["samples_per_s"][chip] = sp.samples_per_s[rank]
    if job.spec.entrypoint is not None:
        # A user script reports what it likes, often from rank 0 only: take rank 0's word.
        if wp.rank != 0:
            return
        loss = float(msg["loss"])
    else:
        # Built-in loop: each rank reports its local mean loss over an equal share of the
        # global batch, so the job's loss is their mean, once every rank has the step.
        got = job.pending_loss.setdefault(step, {})
        got[wp.rank] = float(msg["loss"])
        if len(got) < len(job.chips):
            return
        del job.pending_loss[step]
        loss = sum(got[r] for r in sorted(got)) / len(got)
    job.step, job.loss = step, loss
    job.losses[step] = loss
    rec = job.recovery
    if rec is not None and "relaunch_mono" in rec and step > rec["restored_step"]:
        rec["first_step_mono"] = msg["recv_mono"]
        if rec.get("mechanism") == rankmove.MECHANISM:
            rec["phases_s"] = rankmove.breakdown(rec, msg["recv_mono"])
        rec["resume_s"] = msg["recv_mono"] - rec["detect_mono"]
        job.recoveries.append(rec)
        job.recovery = None
        emit("recovered", job_id=job.spec.job_id, **{k: v for k, v in rec.items() if not k.endswith("_mono")})
    emit("progress", chip=wp.chip, job_id=job.spec.job_id, step=step, loss=loss,
              tokens_per_s=msg["tokens_per_s"], step_time_s=msg["step_time_s"], worker_t=msg.get("t"))


def _on_checkpoint(emit: Emit, job: LocalJob, wp: WorkerProcess, step: int) -> None:
    ranks = job.pending_ckpt.setdefault(step, set())
    ranks.add(wp.rank)
    if len(ranks) < len(job.chips):
        return
    del job.pending_ckpt[step]
    root = job.base_cfg.checkpoint_dir
    try:
        if not (manifest.step_dir(root, step) / manifest.MANIFEST).exists():
            manifest.commit(root, job.spec.job_id, step, len(job.chips))
    except Exception as exc:
        job.log.append(f"checkpoint step {step} not committed: {exc}")
        return
    job.checkpoint_step = step
    emit("checkpoint", job_id=job.spec.job_id, step=step, path=str(manifest.step_dir(root, step)))
