"""A local job's lifecycle, its runtime record and how a worker exit is classified."""

from __future__ import annotations

import signal
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from podfleet.fabric.base import ENDED_RUN_STATES, ExitCause, RunState, exit_cause, run_transitions
from podfleet.states import check_transition

JOB_TRANSITIONS = run_transitions({
    RunState.RUNNING: {RunState.RECOVERING, RunState.STOPPING, RunState.FINISHED, RunState.FAILED},
    RunState.RECOVERING: {RunState.RUNNING, RunState.STOPPING, RunState.FAILED},
})

TERMINAL = ENDED_RUN_STATES


# The exit classification is shared by every real fabric (fabric.base.ExitCause).
Cause = ExitCause


# Signals the host or an operator sends (OOM killer, kill -9, node drain) vs. those a
# process raises on itself (segfault, abort), which point at the job's own code.
_INFRA_SIGNALS = {signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGBUS, signal.SIGINT}


def classify_exit(code: int, killed_by: str | None) -> Cause:
    if killed_by in ("fault", "hang"):
        return Cause.INFRA
    if killed_by in ("stop", "recovery"):
        return Cause.STOPPED
    if code < 0:
        return Cause.INFRA if -code in _INFRA_SIGNALS else Cause.USER_CODE
    return exit_cause(code)


# What a crashing process writes last: C++'s std::terminate (a gloo or c10 exception no
# one caught, e.g. in a communication thread), CPython's fatal error handler.
_CRASH_HEADS = ("terminate called", "Fatal Python error")
CRASH_TAIL_LINES = 40  # log lines read for a crash's last words
CRASH_TAIL_CHARS = 400


def crash_words(lines: list[str]) -> str:
    """A crashed worker's last words on one line: from its abort message (``terminate
    called after throwing ...`` and the ``what():`` after it) when it wrote one, else its
    last two lines; "" when it wrote nothing. A signal number alone (6: SIGABRT) tells an
    operator nothing about which exception, thread or peer brought the process down."""
    kept = [ln.strip() for ln in lines if ln.strip()]
    heads = [i for i, ln in enumerate(kept) if ln.startswith(_CRASH_HEADS)]
    start = heads[-1] if heads else max(0, len(kept) - 2)
    text = " | ".join(kept[start:start + 3])
    return text if len(text) <= CRASH_TAIL_CHARS else text[:CRASH_TAIL_CHARS - 3] + "..."


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def check_job_transition(src: RunState, dst: RunState) -> None:
    check_transition("job", JOB_TRANSITIONS, src, dst)


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: RunState
    chips: tuple[int, ...]
    step: int  # last step every rank completed
    loss: float | None
    attempt: int
    infra_failures: int
    user_failures: int
    max_retries: int
    reason: str | None
    checkpoint_step: int | None
    losses: dict[int, float]
    recoveries: tuple[dict[str, Any], ...]
    log_tail: tuple[str, ...]


@dataclass
class LocalJob:
    spec: Any  # WorkerGroupSpec
    chips: list[int]
    base_cfg: Any  # WorkerConfig for rank 0 of the first attempt
    max_retries: int
    recover: bool
    state: RunState = RunState.RUNNING
    attempt: int = 0
    workers: dict[int, Any] = field(default_factory=dict)  # rank -> WorkerProcess (current attempt)
    step: int = 0
    loss: float | None = None
    losses: dict[int, float] = field(default_factory=dict)
    infra_failures: int = 0
    user_failures: int = 0
    reason: str | None = None
    checkpoint_step: int | None = None
    pending_ckpt: dict[int, set[int]] = field(default_factory=dict)
    pending_loss: dict[int, dict[int, float]] = field(default_factory=dict)  # step -> rank -> local loss
    replica: tuple[int, str] | None = None  # (step, dir) saved by a survivor this attempt
    failed_ranks: dict[int, Any] = field(default_factory=dict)  # rank -> Cause this attempt
    hung_ranks: dict[int, str] = field(default_factory=dict)  # rank -> message: killed as hung this attempt
    hang_restarts: int = 0  # attempts restarted because a rank stopped heartbeating
    recovery: dict[str, Any] | None = None  # the recovery in progress
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    log: deque[str] = field(default_factory=lambda: deque(maxlen=400))
    resume_next: dict[str, Any] = field(default_factory=dict)
    speed: Any = None  # RankSpeed of the current attempt (built-in loop only)
    generation: int = 0  # rendezvous generation of the gang (a rank move starts the next one)
    moving: dict[str, Any] | None = None  # the rank move in flight (rankmove.py)
    slow: dict[int, float] = field(default_factory=dict)  # rank -> slow-down factor (slow-worker faults)
    checkpoint_requests: int = 0  # on-demand checkpoints asked of this job (checkpoint_now)

    def set_state(self, dst: RunState) -> None:
        check_job_transition(self.state, dst)
        self.state = dst
