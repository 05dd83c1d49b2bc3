"""Starting a local gang: the options a ``WorkerGroupSpec`` may carry on this fabric, the
job's first worker config (``new_job``), and each rank's worker (``spawn``).

``LocalFabric`` checks the chips, holds the lock and registers the job; recovery
(``recovery.py``) and rank moves (``rankmove.py``) start later gangs and ranks through the
fabric, which passes its ``Spawner`` and its report / exit callbacks here, so this module
never imports the fabric that imports it.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from podfleet.errors import UnknownNameError
from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.local.jobs import LocalJob
from podfleet.fabric.local.process import OnExit, OnMessage, WorkerProcess
from podfleet.fabric.local.spawner import Spawner
from podfleet.training.config import PRESET_NAMES, WorkerConfig
from podfleet.training.data import split_samples

HOST = socket.gethostname()  # every slot's worker runs on this host

# Options a WorkerGroupSpec may carry for this fabric (anything else is a typo).
OPTIONS = (
    "seed", "global_batch", "seq_len", "lr", "checkpoint_dir", "max_retries", "recover", "array_index",
    "replica_peer", "step_delay_s", "threads", "entrypoint_args", "encrypt_checkpoints",
    "key_file", "resume", "work_split", "rank_step_delay_s", "grad_compression", "rank_moves", "regroup_timeout_s",
)


def group_dict(spec: WorkerGroupSpec) -> dict[str, Any]:
    """The gang's spec as the agent keeps it (JSON), for a plane that re-attaches."""
    return {"job_id": spec.job_id, "chips": list(spec.chips), "model": spec.model, "steps": spec.steps,
            "checkpoint_interval": spec.checkpoint_interval, "entrypoint": spec.entrypoint,
            "options": {k: list(v) if isinstance(v, tuple) else v for k, v in dict(spec.options).items()}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def new_job(group: WorkerGroupSpec, workdir: Path, key_file: str | None) -> LocalJob:
    """The runtime record of a group whose chips were checked: its options and model checked,
    its job directory cleared of an earlier run's control files, its first worker config."""
    opts = dict(group.options)
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise UnknownNameError("job option", unknown[0], OPTIONS, field="options")
    if group.entrypoint is None and group.model not in PRESET_NAMES:
        raise UnknownNameError("model preset", group.model, PRESET_NAMES, field="model")
    jobdir = workdir / "jobs" / group.job_id
    jobdir.mkdir(parents=True, exist_ok=True)
    (jobdir / "work_split.json").unlink(missing_ok=True)  # a split from an earlier run of this id
    (jobdir / "rendezvous.json").unlink(missing_ok=True)  # and a rank move's rendezvous
    (jobdir / "slow.json").unlink(missing_ok=True)
    (jobdir / "checkpoint_request.json").unlink(missing_ok=True)
    gb = int(opts.get("global_batch", WorkerConfig.global_batch))
    shares = split_samples(opts["work_split"], gb) if opts.get("work_split") else ()
    base = WorkerConfig(
        job_id=group.job_id, rank=0, world_size=len(group.chips), model=group.model,
        steps=group.steps, checkpoint_interval=group.checkpoint_interval, entrypoint=group.entrypoint,
        checkpoint_dir=str(opts.get("checkpoint_dir") or jobdir / "checkpoints"),
        key_file=opts.get("key_file", key_file),
        resume=bool(opts.get("resume", False)),
        entrypoint_args=tuple(opts.get("entrypoint_args", ())),
        shares=shares, split_file=str(jobdir / "work_split.json") if len(group.chips) > 1 else None,
        # A lost rank of a built-in DP gang moves alone (rankmove.py) unless turned off.
        regroup_file=(str(jobdir / "rendezvous.json") if len(group.chips) > 1 and group.entrypoint is None
                      and bool(opts.get("rank_moves", True)) else None),
        slow_file=str(jobdir / "slow.json") if group.entrypoint is None else None,
        checkpoint_request_file=str(jobdir / "checkpoint_request.json") if group.entrypoint is None else None,
        **{k: opts[k] for k in ("seed", "global_batch", "seq_len", "lr", "step_delay_s", "threads",
                                "encrypt_checkpoints", "replica_peer", "grad_compression", "array_index",
                                "regroup_timeout_s")
           if k in opts},
    )
    return LocalJob(group, list(group.chips), base, int(opts.get("max_retries", 0)), bool(opts.get("recover", True)))


def spawn(pool: Spawner, workdir: Path, job: LocalJob, rank: int, on_message: OnMessage, on_exit: OnExit, *,
          port: int, resume_from: str | None = None, resume: bool = False, join: bool = False) -> WorkerProcess:
    """Start rank ``rank`` of the job's current attempt on ``job.chips[rank]`` (the fabric
    checked it is not closed); ``join``: a rank move's replacement."""
    chip = job.chips[rank]
    jobdir = workdir / "jobs" / job.spec.job_id
    replica_dir = jobdir / "replica" / f"attempt-{job.attempt}"
    cfg = job.base_cfg.replace(rank=rank, master_port=port, resume=resume, resume_from=resume_from,
                               replica_dir=str(replica_dir), generation=job.generation, join=join)
    delays = job.spec.options.get("rank_step_delay_s") or {}
    if str(rank) in delays or rank in delays:  # a per-rank slow worker (tests, benchmarks)
        cfg = cfg.replace(step_delay_s=float(delays.get(rank, delays.get(str(rank), 0.0))))
    gen = f"-gen-{job.generation}" if join else ""
    log_path = jobdir / f"attempt-{job.attempt}-rank-{rank}{gen}.log"

    wp = job.workers[rank] = pool.spawn(cfg, chip, job.attempt, log_path, on_message, on_exit,
                                        group=group_dict(job.spec))
    job.log.append(f"[attempt {job.attempt}] rank {rank} on chip {chip}: node {HOST} ip 127.0.0.1 "
                   f"pid {wp.pid}" + (f" (rank move, generation {job.generation})" if join else ""))
    return wp
