"""What the control plane tells a running Ray gang between its steps: the work split
(``Rebalanceable``), a slow-down (the ``slow-worker`` fault), an on-demand checkpoint
(``OnDemandCheckpoints``) and, after a lost rank, the gang's next rendezvous (``rankmove.py``).

The built-in loop reads these as control files between steps, exactly as on a local
slot (training/loop.py); a rank's files live on its own node, so the fabric sends each
document to the ranks' actors (``WorkerActor.control``), which write it there. The call
is fire-and-forget: it never blocks the engine thread on Ray, and a rank whose actor is
gone has no step left to apply it to. Each launch of a job gets a directory of its own,
so a gang never reads what was meant for an earlier one (a request number from before a
preemption, say).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from podfleet.errors import ConflictError, InvalidInputError
from podfleet.fabric.base import CHECKPOINT_HOLD_S, RunState
from podfleet.fabric.ray.jobs import RankRecord, RayJob
from podfleet.training.data import split_samples


def files(job: RayJob, world_size: int) -> dict[str, Any]:
    """The ``WorkerConfig`` fields of a gang's control files (the built-in loop only)."""
    if job.spec.entrypoint is not None:
        return {}
    root = os.path.join(job.workdir, f"control-{job.launch}")  # one directory per launch
    out: dict[str, Any] = {"slow_file": os.path.join(root, "slow.json"),
                           "checkpoint_request_file": os.path.join(root, "checkpoint_request.json")}
    if world_size > 1:
        out["split_file"] = os.path.join(root, "work_split.json")
        if job.spec.options.get("rank_moves", True):
            # A survivor of a lost rank waits here for the next rendezvous (rankmove.py).
            out["regroup_file"] = os.path.join(root, "rendezvous.json")
    if job.shares:
        out["shares"] = job.shares
    return out


def _send(ranks: Iterable[RankRecord], path: str, doc: dict[str, Any]) -> int:
    text = json.dumps(doc)
    sent = 0
    for r in ranks:
        if r.actor is not None and not r.done:
            r.actor.control.remote(path, text)
            sent += 1
    return sent


def _config(job: RayJob, key: str) -> str:
    got = files(job, len(job.ranks)).get(key)
    if job.state is not RunState.RUNNING:
        raise ConflictError(f"job {job.job_id} is {job.state.value}, not running", field="job_id")
    if not isinstance(got, str):
        raise ConflictError(f"job {job.job_id} runs its own entrypoint: only the built-in loop takes this "
                            f"between its steps", field="job_id")
    return got


def set_work_split(job: RayJob, shares: Sequence[int]) -> None:
    if len(shares) != len(job.ranks) or min(shares, default=0) < 1:
        raise InvalidInputError(f"need {len(job.ranks)} shares >= 1, got {list(shares)}", field="shares")
    path = files(job, len(job.ranks)).get("split_file")
    if not isinstance(path, str) or job.state not in _TAKES_SPLIT:
        # One rank takes the whole batch, a script splits its own, and a gang that is
        # stopping or has ended has no step left to apply it to.
        job.log.append(f"[fabric] work split {list(shares)} not applied: job {job.state.value}"
                       + (", its own entrypoint" if job.spec.entrypoint is not None else ""))
        return
    gb = int(job.spec.options.get("global_batch", max(8, len(job.ranks)) // len(job.ranks) * len(job.ranks)))
    samples = split_samples([float(x) for x in shares], gb)
    # Kept for the ranks still to be started (a gang placing, a moved rank: their
    # config's ``shares``), as local keeps it in the job's base config; and rank 0 reads
    # the file and broadcasts it (only its node needs it) from its next step on, also when
    # its actor is up but its loop not yet (a gang starting): the balancer, which took the
    # split as applied, never sends it again.
    job.shares = samples
    sent = _send(job.ranks[:1], path, {"shares": list(samples)})
    job.log.append(f"[fabric] work split {list(samples)} (samples of {gb})"
                   + ("" if sent else f", for the ranks it starts (job {job.state.value})"))


# The gang states a split is kept in: a gang placing or starting takes it at its start,
# one moving a rank (RECOVERING) at the moved rank's start or from rank 0's file.
_TAKES_SPLIT = frozenset({RunState.PLACING, RunState.STARTING, RunState.RUNNING, RunState.RECOVERING})


def slow_worker(job: RayJob, rank: int, factor: float) -> None:
    if not 0 <= rank < len(job.ranks):
        raise InvalidInputError(f"rank {rank} not in [0, {len(job.ranks)})", field="rank")
    if not 1.0 <= factor <= 100.0:
        raise InvalidInputError(f"slow-down factor must be in [1, 100], got {factor:g}", field="factor")
    path = _config(job, "slow_file")
    job.slow[rank] = float(factor)
    # Every rank reads its own factor from its node's file.
    _send(job.ranks, path, {"factors": {str(r): f for r, f in job.slow.items()}})
    job.log.append(f"[fabric] slow-worker: rank {rank} slowed {factor:g}x")


def checkpoint_now(job: RayJob) -> int | None:
    if job.state is not RunState.RUNNING:
        return None
    path = _config(job, "checkpoint_request_file")
    if job.checkpoint_dir is None:
        raise ConflictError(f"job {job.job_id} has no checkpoint directory (checkpoint_interval 0 and no "
                            f"checkpoint_dir option): it cannot be saved on demand", field="job_id")
    job.checkpoint_requests += 1
    # Rank 0 reads the request and broadcasts it, so every rank saves the same step.
    _send(job.ranks[:1], path, {"request": job.checkpoint_requests, "hold_s": CHECKPOINT_HOLD_S})
    job.log.append(f"[fabric] on-demand checkpoint asked at step {job.step} (request {job.checkpoint_requests})")
    return job.step
