"""Rank moves on the local fabric: one lost (or drained) rank moves to another slot while
the other ranks' processes stay alive (the worker side is ``training/regroup.py``).

When a rank of a built-in data-parallel job dies from outside (kill -9, an evicted slot,
a hang), its peers' next collective fails within milliseconds and each survivor, instead
of exiting, keeps its model and optimizer in memory and waits for a rendezvous. Here the
fabric picks the rank's new slot (a healthy idle spare, else a free slot, else the
rank's own slot once it passes its check: the same order as a relaunch), writes the next
rendezvous (generation, a fresh port, the same world size) to the job's
``rendezvous.json`` and starts the replacement rank there, from a warm standby when one
is ready; the old slot is released, not isolated: a killed worker is not a chip fault. The gang re-forms on the new port, the newest state held by a survivor is
broadcast to every rank, and training resumes from it: ``job-recovering`` then
``job-resumed`` (``mechanism: rank-move``, ``source: replica``) as for a relaunch, and the
recovery record closes at the first step trained.

A relaunch of the whole gang stays the fallback, reported as ``mechanism: relaunch``: a
user script (its state is its own), a one-rank job, the ``rank_moves`` option off, a
crash in the job's own code, every rank lost at once, or a move that does not train a
step within ``regroup_timeout_s`` (the remaining workers are then stopped and the gang
restarts from the newest replica or checkpoint).

``move_rank`` drains a healthy rank the same way: the fabric stops it and the move runs
as if it had died, onto the chip the caller names.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from podfleet.fabric.base import RunState
from podfleet.fabric.local.jobs import Cause, LocalJob
from podfleet.fabric.local.process import Message, WorkerProcess

MECHANISM = "rank-move"


class MoveHost(Protocol):
    """What a rank move uses of the fabric (``LocalFabric``; recovery's ``RecoveryHost`` too)."""

    @property
    def spares(self) -> tuple[int, ...]: ...

    def emit(self, kind: str, *, chip: int | None = None, job_id: str | None = None, **detail: Any) -> None: ...

    def deliver(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def pick_spare(self) -> int | None: ...

    def check_chip_health(self, chip: int) -> str | None: ...

    def release_chip(self, chip: int, job_id: str) -> None: ...

    def claim(self, chip: int, job_id: str) -> None: ...

    def spawn_rank(self, job: LocalJob, rank: int, *, port: int, join: bool = False) -> WorkerProcess: ...

    def publish_rendezvous(self, job: LocalJob) -> int: ...


def eligible(job: LocalJob, wp: WorkerProcess, cause: Cause) -> bool:
    """Whether the loss of ``wp`` can be a rank move rather than a relaunch."""
    cfg = job.base_cfg
    if not cfg.regroup_file or not job.recover or job.state not in (RunState.RUNNING, RunState.RECOVERING):
        return False
    if wp.killed_by == "hang":
        return False  # a hang restarts the gang, so the hang-restart budget counts it
    if cause is not Cause.INFRA or any(c is not Cause.INFRA for c, _m in job.failed_ranks.values()):
        return False
    if job.state is RunState.RECOVERING:
        return False  # a relaunch (or another move) is already under way
    survivors = [w for r, w in job.workers.items() if r != wp.rank and w.alive and w.killed_by is None]
    return bool(survivors)


def choose_chip(fab: MoveHost, job: LocalJob, rank: int, want: int | None) -> tuple[str, int] | str:
    """(path, chip) for ``rank``'s new slot, or why there is none. The relaunch path's order."""
    old = job.chips[rank]
    if want is not None:
        why = fab.check_chip_health(want) if want != old else None
        if why is not None:
            return why
        return ("spare" if want in fab.spares else "free-chip"), want
    new = fab.pick_spare()
    if new is None:
        why = fab.check_chip_health(old)
        return why if why is not None else ("own-chip", old)
    return ("spare" if new in fab.spares else "free-chip"), new


def on_lost(fab: MoveHost, job: LocalJob, wp: WorkerProcess, cause: Cause, msg: str, detected_mono: float,
            want: int | None = None) -> bool:
    """A rank's worker exited: move it if it can be (True), else leave it to the relaunch path."""
    if job.moving is not None:
        # Any exit while a move is in flight (a survivor gave up, a second rank lost, the
        # replacement crashed): the move cannot finish; the gang relaunches.
        abort(job, f"rank {wp.rank} exited during the move")
        return False
    if not eligible(job, wp, cause):
        return False
    rank = wp.rank
    placed = choose_chip(fab, job, rank, want)
    if isinstance(placed, str):
        job.log.append(f"rank {rank} cannot move: {placed}; relaunching the gang")
        return False
    path, new = placed
    old = job.chips[rank]
    if job.recovery is None:
        job.recovery = {"detect_mono": detected_mono, "attempt": job.attempt, "last_step": job.step,
                        "kill_mono": wp.kill_mono, "rank": rank, "chip": old, "cause": cause.value, "message": msg,
                        "wall_minus_mono": time.time() - time.monotonic()}
    if job.state is RunState.RUNNING:
        job.set_state(RunState.RECOVERING)
        fab.emit("job-recovering", job_id=job.spec.job_id, rank=rank, cause=cause.value, message=msg,
                 mechanism=MECHANISM)
    if new != old:
        # A killed worker is not a chip fault: its slot stays healthy and is simply free
        # (a slot the fabric took away, ``set_chip_state``, is already failed or isolated).
        fab.release_chip(old, job.spec.job_id)
        job.chips[rank] = new
        fab.claim(new, job.spec.job_id)
    job.infra_failures += 1  # a lost worker, whichever way it recovers (never the retry budget)
    job.generation += 1
    gen = job.generation
    port = fab.publish_rendezvous(job)
    job.moving = {"rank": rank, "generation": gen, "from": old, "to": new}
    spawn_mono = time.monotonic()
    new_wp = fab.spawn_rank(job, rank, port=port, join=True)
    rec = job.recovery
    moves = dict(rec.get("moves") or {})
    if new != old:
        moves[str(rank)] = [old, new]
    rec.update(mechanism=MECHANISM, path=path, moves=moves, source="replica", restored_step=job.step,
               relaunch_mono=time.monotonic(), generation=gen, spawn_mono=spawn_mono,
               standby=bool(new_wp.ready))
    job.log.append(f"rank {rank} moves chip {old} -> {new} ({path}): rendezvous generation {gen} on port {port}, "
                   f"pid {new_wp.pid}; the other ranks keep running")
    timeout = job.base_cfg.regroup_timeout_s
    threading.Timer(timeout, lambda: fab.deliver(_timed_out, job, gen, timeout)).start()
    return True


def on_regrouped(emit: Callable[..., None], job: LocalJob, msg: Message) -> None:
    """A rank reports the re-formed gang shares its state: the move is done (once per generation)."""
    rec = job.recovery
    if rec is not None and rec.get("generation") == msg.get("generation") and isinstance(msg.get("phases"), dict):
        rec.setdefault("rank_phases", {})[str(msg.get("rank"))] = dict(msg["phases"])
    moving = job.moving
    if moving is None or int(msg.get("generation", -1)) != moving["generation"]:
        return
    job.moving = None
    step = int(msg["step"])
    for s in [s for s in job.pending_loss if s <= step]:
        del job.pending_loss[s]  # half-reported steps of the broken gang
    rec = job.recovery
    if rec is not None:
        rec.update(restored_step=step, steps_lost=max(0, int(rec.get("last_step", step)) - step),
                   source_rank=msg.get("source_rank"), restore_s=msg.get("restore_s"))
    if job.state is RunState.RECOVERING:
        job.set_state(RunState.RUNNING)
    job.log.append(f"rank move generation {moving['generation']} done: rank {moving['rank']} on chip "
                   f"{moving['to']}, state of step {step} from rank {msg.get('source_rank')}")
    emit("job-resumed", job_id=job.spec.job_id, attempt=job.attempt, source="replica", restored_step=step,
             chips=list(job.chips), mechanism=MECHANISM, path=MECHANISM, generation=moving["generation"])


def breakdown(rec: dict[str, Any], first_step_mono: float) -> dict[str, Any]:
    """Where a closed move's seconds went, each phase in seconds since the kill (since the
    detection when nothing of ours sent the signal): the fabric's own times and each rank's
    reported ones (worker wall clocks, the same host's)."""
    off = float(rec.get("wall_minus_mono") or 0.0)
    kill = rec.get("kill_mono")
    t0 = float(kill if kill is not None else rec["detect_mono"])

    def since(mono: float) -> float:
        return round(mono - t0, 4)

    out: dict[str, Any] = {"detected": since(rec["detect_mono"]), "first_step": since(first_step_mono)}
    if rec.get("spawn_mono") is not None:
        out["spawn_started"] = since(rec["spawn_mono"])
    if rec.get("relaunch_mono") is not None:
        out["spawned"] = since(rec["relaunch_mono"])
    for rank, phases in sorted((rec.get("rank_phases") or {}).items()):
        out[f"rank{rank}"] = {k: since(float(v) - off) for k, v in phases.items()}
    return out


def abort(job: LocalJob, why: str) -> None:
    """Give up the move in flight: stop every worker, so the gang relaunches (the fallback)."""
    if job.moving is None:
        return
    job.log.append(f"rank move generation {job.moving['generation']} abandoned: {why}; relaunching the gang")
    job.moving = None
    for w in job.workers.values():
        if w.alive:
            w.kill("recovery")


def _timed_out(job: LocalJob, gen: int, timeout_s: float) -> None:
    if job.moving is not None and job.moving["generation"] == gen and job.state is RunState.RECOVERING:
        abort(job, f"the gang did not re-form within {timeout_s:g} s")


def rendezvous_doc(gen: int, port: int, world_size: int, addr: str = "127.0.0.1") -> bytes:
    """The next rendezvous as ``training.regroup.read_rendezvous`` reads it (rank 0 hosts its store at addr:port)."""
    return json.dumps({"generation": gen, "addr": addr, "port": port, "world_size": world_size}).encode()


def describe(job: LocalJob) -> dict[str, Any] | None:
    """The move in flight, for status and logs (None when none)."""
    return dict(job.moving) if job.moving is not None else None
