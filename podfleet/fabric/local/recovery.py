"""What the local fabric does when a worker exits: finish, fail, or recover the gang.

Recovery design (data parallelism): every rank holds an identical replica of the
model and optimizer. When one rank dies, its peers' next collective fails within
milliseconds (gloo sees the closed connection); because the loop runs every
collective of a step before ``optimizer.step``, each survivor still holds exactly the
last completed step, saves it (one encrypted shard, ``kind: replica``) and exits 75.
Once the whole gang is down (survivors that do not exit within ``replica_grace_s``
are killed), the failed rank moves to a spare (else a free slot), and a new gang
starts from the newest of {survivor replica, last committed checkpoint}, on a fresh
rendezvous port. The slot it left is retired (FAILED -> ISOLATED) only when it fails
its check (``check_chip_health``: the control plane took it out of service); a worker
killed or crashed on a healthy slot is not a slot fault, and the slot stays in
service, free (the control plane makes it a spare again). Restarting every rank costs
a torch import per process but keeps the process-group logic trivial and correct.

Budget: infrastructure failures (kill -9 from outside, ``kill_worker``, a hang, a
retired slot) never count against ``max_retries``, but a job whose ranks hang again
after ``max_hang_restarts`` restarts fails as a user-code failure (its code holds the
GIL or blocks; a host stall does not follow a job from attempt to attempt); an exception or crash in the job's
own code does; bad input (missing entrypoint, wrong key, unwritable checkpoint dir)
fails the job at once, since a retry would fail the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from podfleet.checkpoint import manifest
from podfleet.fabric.base import RunState, hang_reason
from podfleet.fabric.local import rankmove
from podfleet.fabric.local.jobs import (
    CRASH_TAIL_LINES,
    TERMINAL,
    Cause,
    LocalJob,
    classify_exit,
    crash_words,
    signal_name,
)
from podfleet.fabric.local.process import WorkerProcess
from podfleet.fabric.local.state import LocalState


class RecoveryHost(Protocol):
    """What recovery uses of the fabric (``LocalFabric`` is the one), declared here so this
    module never imports the fabric that imports it."""

    @property
    def state(self) -> LocalState: ...

    @property
    def spares(self) -> tuple[int, ...]: ...

    @property
    def replica_grace_s(self) -> float: ...

    @property
    def hang_timeout_s(self) -> float: ...

    @property
    def max_hang_restarts(self) -> int: ...

    def emit(self, kind: str, *, chip: int | None = None, job_id: str | None = None, **detail: Any) -> None: ...

    def deliver(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def finish(self, job: LocalJob, state: RunState, reason: str | None) -> None: ...

    def pick_spare(self) -> int | None: ...

    def check_chip_health(self, chip: int) -> str | None: ...

    def retire_chip(self, chip: int, reason: str) -> None: ...

    def claim(self, chip: int, job_id: str) -> None: ...

    def release_chip(self, chip: int, job_id: str) -> None: ...

    def start_attempt(self, job: LocalJob, *, resume_from: str | None = None, resume: bool = False) -> None: ...

    def spawn_rank(self, job: LocalJob, rank: int, *, port: int, join: bool = False) -> WorkerProcess: ...

    def publish_rendezvous(self, job: LocalJob) -> int: ...


def _message(wp: WorkerProcess, code: int, cause: Cause) -> str:
    if wp.error and wp.error.get("message"):
        return f"rank {wp.rank}: {wp.error.get('kind')}: {wp.error['message']}"
    if wp.killed_by:
        return f"rank {wp.rank} on chip {wp.chip}: killed ({wp.killed_by})"
    if code < 0:
        # A signal it raised itself (SIGABRT, SIGSEGV): its stderr, in the rank's log, says
        # why. A kill from outside (SIGKILL, SIGTERM) interrupts whatever it last wrote.
        words = crash_words(wp.log_tail(CRASH_TAIL_LINES)) if cause is Cause.USER_CODE else ""
        last = f"; its last output: {words}" if words else ""
        return f"rank {wp.rank} on chip {wp.chip}: killed by signal {-code} ({signal_name(-code)}){last}"
    tail = wp.log_tail(3)
    return f"rank {wp.rank}: exit code {code} ({cause.value})" + (f": {tail[-1]}" if tail else "")


def handle_exit(fab: RecoveryHost, wp: WorkerProcess, code: int, detected_mono: float) -> None:
    assert wp.cfg is not None  # a standby's exits are not reported here
    wp.exit_handled = True
    job = fab.state.jobs.get(wp.cfg.job_id)
    cause = classify_exit(code, wp.killed_by)
    msg = _message(wp, code, cause)
    fab.emit("worker-exited", chip=wp.chip, job_id=wp.cfg.job_id, rank=wp.rank, exit_code=code,
             cause=cause.value, infra=cause is Cause.INFRA, message=msg, attempt=wp.attempt,
             killed_by=wp.killed_by)
    if job is None or wp.attempt != job.attempt or job.state in TERMINAL:
        return
    job.log.append(f"[attempt {wp.attempt} rank {wp.rank}] exited {code} ({cause.value}): {msg}")
    gang_down = all(w.exit_handled for w in job.workers.values())
    if job.state is RunState.STOPPING:
        if gang_down:
            fab.finish(job, RunState.STOPPED, "stopped")
        return
    if cause is Cause.OK:
        if gang_down and all(w.exit_code == 0 for w in job.workers.values()):
            fab.finish(job, RunState.FINISHED, None)
        return
    if rankmove.on_lost(fab, job, wp, cause, msg, detected_mono):
        return  # the rank moves alone; the other ranks keep running
    if cause in (Cause.INFRA, Cause.USER_CODE, Cause.BAD_INPUT):
        job.failed_ranks[wp.rank] = (cause, msg)
    if wp.killed_by == "hang":
        job.hung_ranks[wp.rank] = f"rank {wp.rank} on chip {wp.chip}"
    if job.recovery is None:
        job.recovery = {"detect_mono": detected_mono, "attempt": job.attempt, "last_step": job.step,
                        "kill_mono": wp.kill_mono}
    if cause in (Cause.INFRA, Cause.USER_CODE, Cause.BAD_INPUT) and "rank" not in job.recovery:
        job.recovery.update(rank=wp.rank, chip=wp.chip, cause=cause.value, message=msg)
    if job.state is RunState.RUNNING:
        job.set_state(RunState.RECOVERING)
        fab.emit("job-recovering", job_id=job.spec.job_id, rank=wp.rank, cause=cause.value, message=msg)
        attempt = job.attempt
        threading.Timer(fab.replica_grace_s, lambda: fab.deliver(_reap, job, attempt)).start()
    if gang_down:
        _relaunch_or_fail(fab, job)


def _reap(job: LocalJob, attempt: int) -> None:
    if job.attempt == attempt and job.state is RunState.RECOVERING:
        for w in job.workers.values():
            if w.alive:
                w.kill("recovery")


def _relaunch_or_fail(fab: RecoveryHost, job: LocalJob) -> None:
    failed = job.failed_ranks
    bad = [m for c, m in failed.values() if c is Cause.BAD_INPUT]
    if bad:
        fab.finish(job, RunState.FAILED, f"bad input: {bad[0]}")
        return
    if job.hung_ranks:
        job.hang_restarts += 1
        if job.hang_restarts > fab.max_hang_restarts:
            # The same job hanging again and again is its code (holding the GIL in a C
            # call, a deadlock), not the host: a user-code failure, not restarted again.
            job.user_failures += 1
            fab.finish(job, RunState.FAILED, hang_reason(next(iter(job.hung_ranks.values())), job.hang_restarts,
                                                         fab.hang_timeout_s, fab.max_hang_restarts))
            return
    user = [m for c, m in failed.values() if c is Cause.USER_CODE]
    if user:
        job.user_failures += 1
        if job.user_failures > job.max_retries:
            fab.finish(job, RunState.FAILED,
                       f"user code failed ({job.user_failures} failures, max_retries={job.max_retries}): {user[0]}")
            return
    infra = sorted(r for r, (c, _m) in failed.items() if c is Cause.INFRA)
    job.infra_failures += len(infra) if infra else (0 if user else 1)
    if not job.recover:
        fab.finish(job, RunState.FAILED, f"worker lost and recovery is off: {next(iter(failed.values()), (0, '?'))[1]}")
        return
    moves = {}
    paths = []
    for r in infra:
        # A spare slot, else a free one, else the rank's own slot once it passes a check.
        old = job.chips[r]
        new = fab.pick_spare()
        if new is None:
            why = fab.check_chip_health(old)
            if why is not None:
                fab.finish(job, RunState.FAILED, f"rank {r} lost on chip {old}, no other slot is free and its "
                                                 f"own failed its check: {why}")
                return
            paths.append("own-chip")
            continue
        paths.append("spare" if new in fab.spares else "free-chip")
        why = fab.check_chip_health(old)
        if why is None:
            # The worker died, not its slot (kill -9, a crash, a hang): the slot stays in
            # service, free for the next job or as a spare again.
            fab.release_chip(old, job.spec.job_id)
        else:
            fab.retire_chip(old, f"worker of {job.spec.job_id} rank {r} lost: {why}")
        job.chips[r] = new
        fab.claim(new, job.spec.job_id)
        moves[r] = (old, new)
    ckpt = manifest.latest(job.base_cfg.checkpoint_dir)
    ckpt_step = manifest.read(ckpt).step if ckpt else None
    rec: dict[str, Any] = job.recovery if job.recovery is not None else {"detect_mono": 0.0, "last_step": job.step}
    if job.replica and (ckpt_step is None or job.replica[0] >= ckpt_step) and job.spec.entrypoint is None:
        source, restored, resume_from = "replica", job.replica[0], job.replica[1]
    elif ckpt is not None:
        source, restored, resume_from = "checkpoint", ckpt_step or 0, str(ckpt)
    else:
        source, restored, resume_from = "scratch", 0, None
    rec.update(source=source, restored_step=restored, steps_lost=max(0, rec["last_step"] - restored),
               moves={str(r): list(m) for r, m in moves.items()}, relaunch_mono=time.monotonic(),
               path=paths[0] if paths else rec.get("path"), mechanism="relaunch")
    job.recovery = rec
    job.set_state(RunState.RUNNING)
    # User scripts restore through pf.load_state(), which reads the latest checkpoint.
    fab.start_attempt(job, resume_from=resume_from if job.spec.entrypoint is None else None,
                      resume=job.spec.entrypoint is not None)
    fab.emit("job-resumed", job_id=job.spec.job_id, attempt=job.attempt, source=source, restored_step=restored,
             chips=list(job.chips), mechanism="relaunch", path="relaunch")
