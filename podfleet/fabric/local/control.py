"""What the control plane tells a running local gang between its steps: the work split
(``Rebalanceable``), a slow-down (the ``slow-worker`` fault) and an on-demand checkpoint
(``OnDemandCheckpoints``), as on the Ray fabric (``fabric/ray/control.py``).

The built-in loop reads these as control files in the job's directory between steps
(training/loop.py). ``LocalFabric`` holds the lock, finds the job and passes how it writes
a job's file (``JobFileWriter``: atomically, as the job's uid), so this module never
imports the fabric that imports it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from podfleet.errors import ConflictError, InvalidInputError
from podfleet.fabric.base import CHECKPOINT_HOLD_S
from podfleet.fabric.local.jobs import LocalJob
from podfleet.training.data import split_samples


class JobFileWriter(Protocol):
    """How the fabric writes a file into a job's directory (``LocalFabric._write_job_file``)."""

    def __call__(self, path: Path, data: bytes) -> None: ...


def set_work_split(job: LocalJob, shares: Sequence[int], write: JobFileWriter) -> None:
    cfg = job.base_cfg
    if len(shares) != len(job.chips) or min(shares) < 1:
        raise InvalidInputError(f"need {len(job.chips)} shares >= 1, got {list(shares)}", field="shares")
    samples = split_samples([float(x) for x in shares], cfg.global_batch)
    job.base_cfg = cfg.replace(shares=samples)
    if cfg.split_file:
        write(Path(cfg.split_file), json.dumps({"shares": list(samples)}).encode())
    job.log.append(f"work split {list(samples)} (samples of {cfg.global_batch})")


def slow_worker(job: LocalJob, rank: int, factor: float, write: JobFileWriter) -> None:
    if not 0 <= rank < len(job.chips):
        raise InvalidInputError(f"rank {rank} not in [0, {len(job.chips)})", field="rank")
    if not 1.0 <= factor <= 100.0:
        raise InvalidInputError(f"slow-down factor must be in [1, 100], got {factor:g}", field="factor")
    if job.base_cfg.slow_file is None:
        raise ConflictError(f"job {job.spec.job_id} runs its own entrypoint: only the built-in loop can be slowed")
    job.slow[rank] = float(factor)
    write(Path(job.base_cfg.slow_file), json.dumps({"factors": {str(r): f for r, f in job.slow.items()}}).encode())
    job.log.append(f"slow-worker: rank {rank} slowed {factor:g}x")


def checkpoint_now(job: LocalJob, write: JobFileWriter) -> int:
    """Ask a running job's gang to save at its next step boundary and hold there; the last
    step every rank completed."""
    path = job.base_cfg.checkpoint_request_file
    if path is None:
        raise ConflictError(f"job {job.spec.job_id} runs its own entrypoint: only the built-in loop checkpoints "
                            f"on demand (its own checkpoints are the script's)")
    job.checkpoint_requests += 1
    request = {"request": job.checkpoint_requests, "hold_s": CHECKPOINT_HOLD_S}
    write(Path(path), json.dumps(request).encode())
    job.log.append(f"on-demand checkpoint asked at step {job.step} (request {job.checkpoint_requests})")
    return job.step
