"""Thin adapter over optional fabric capabilities the ``Fabric`` protocol does not name.

The twin can move a paused job's rank and resume it from a step (``move_rank``,
``resume``); a fabric without them gets stop + launch. The twin's ``launch`` starts
at step 0 and ignores ``options["start_step"]``, so after a launch we set the run's
step when the fabric exposes it (a resumed job continues from its checkpoint).
Preemption checkpoints a victim on demand where the fabric can (``checkpoint_now``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from podfleet.errors import NotFoundError
from podfleet.fabric.base import Fabric, WorkerGroupSpec


def _run(fabric: Fabric, job_id: str) -> Any:
    jobs = getattr(fabric, "jobs", None)
    return jobs.get(job_id) if isinstance(jobs, dict) else None


def start(fabric: Fabric, group: WorkerGroupSpec, start_step: int) -> None:
    """Start (or restart) ``group`` so that it continues from ``start_step``."""
    run = _run(fabric, group.job_id)
    state = str(getattr(run, "state", "")) if run is not None else ""
    if state == "paused" and hasattr(fabric, "move_rank") and hasattr(fabric, "resume"):
        old = tuple(run.chips)
        if len(old) == len(group.chips):
            for rank, (a, b) in enumerate(zip(old, group.chips, strict=True)):
                if a != b:
                    fabric.move_rank(group.job_id, rank, b)
            fabric.resume(group.job_id, from_step=min(start_step, int(run.step)))
            return
    if state in ("running", "paused"):
        stop(fabric, group.job_id)
    out = fabric.launch(group)
    if start_step and out is not None and hasattr(out, "step"):
        out.step = start_step


def stop(fabric: Fabric, job_id: str) -> None:
    """Stop a job's workers; a job the fabric does not know (fresh after a restart) is fine."""
    with contextlib.suppress(NotFoundError):
        fabric.stop(job_id)


def can_checkpoint_now(fabric: Fabric) -> bool:
    """Whether the fabric can save a job's state on demand (the twin: its step counter;
    a fabric may also offer ``checkpoint_now(job_id) -> step``)."""
    return callable(getattr(fabric, "checkpoint_now", None)) or getattr(fabric, "kind", None) == "sim"


def checkpoint_now(fabric: Fabric, job_id: str) -> int | None:
    """Save the job's state now and return its step; None when the job does not run there
    (finished or stopped: nothing left to save)."""
    fn = getattr(fabric, "checkpoint_now", None)
    if callable(fn):
        return int(fn(job_id))
    run = _run(fabric, job_id)
    if run is None or str(getattr(run, "state", "")) not in ("running", "paused"):
        return None
    # On the twin a job's whole training state is its step counter: the steps completed
    # so far are exactly what a checkpoint taken now would hold.
    return int(run.step)
