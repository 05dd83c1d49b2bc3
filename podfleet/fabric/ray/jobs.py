"""A Ray job's lifecycle and runtime record (driver side)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from podfleet.fabric.base import (
    ENDED_RUN_STATES,
    ExitCause,
    RunState,
    RunStatus,
    exit_cause,
    run_transitions,
)
from podfleet.security.redact import Redactor
from podfleet.states import check_transition

# Placement strategies by the job option's name -> Ray's (``placement`` of a job).
STRATEGIES = {"pack": "PACK", "spread": "SPREAD", "strict_pack": "STRICT_PACK", "strict_spread": "STRICT_SPREAD"}


RAY_JOB_TRANSITIONS = run_transitions({
    RunState.PLACING: {RunState.STARTING, RunState.STOPPING, RunState.FAILED},
    RunState.STARTING: {RunState.RUNNING, RunState.STOPPING, RunState.FAILED},
    RunState.RUNNING: {RunState.RECOVERING, RunState.STOPPING, RunState.FINISHED, RunState.FAILED},
    # A rank move (rankmove.py): the other ranks live on while the lost one's replacement
    # starts and the process group re-forms; a move that fails ends the gang (FAILED).
    RunState.RECOVERING: {RunState.RUNNING, RunState.STOPPING, RunState.FAILED},
})
TERMINAL = ENDED_RUN_STATES
# What ``run_status`` shows: a gang being started counts as running (it is live, and the
# control plane has nothing to do about the difference).
_SHOWN = {RunState.PLACING: RunState.RUNNING, RunState.STARTING: RunState.RUNNING}
LOG_TAIL = 20


@dataclass
class RankRecord:
    rank: int
    chip: int
    actor: Any = None  # ray.actor.ActorHandle
    name: str = ""  # the actor's name in the cluster's namespace ("": the launch's, supervisor.rank_name)
    acked: int | None = None  # the last report applied (None: none yet; the actor drops those up to it)
    info: dict[str, Any] = field(default_factory=dict)  # hello(): pid, ip, node_id, ...
    result: dict[str, Any] | None = None
    cause: ExitCause | None = None
    killed_by: str | None = None  # "fault", "hang", "stop", "drain": why *we* ended it
    pg: Any = None  # its own placement group (a ``pack`` gang: one per rank); None: a bundle of ``RayJob.pg``
    cpu_percent: float = 0.0
    mem_bytes: float = 0.0
    mem_capacity_bytes: float = 0.0  # the memory of the worker's host
    heartbeat_age_s: float = 0.0
    step_time_s: float = 0.0
    tokens_per_s: float = 0.0
    armed: bool = False  # hang detection starts after the first step (torch import is slow)
    last_seen_mono: float = 0.0  # when a poll last answered (a frozen actor stops answering)

    def silent_s(self, now_mono: float) -> float:
        """How long this rank has given no sign of life: its own heartbeat, or no answer."""
        return max(self.heartbeat_age_s, now_mono - self.last_seen_mono if self.last_seen_mono else 0.0)

    @property
    def done(self) -> bool:
        return self.cause is not None


@dataclass
class RayJob:
    spec: Any  # WorkerGroupSpec
    strategy: str
    workdir: str
    checkpoint_dir: str | None
    state: RunState = RunState.PLACING
    pg: Any = None  # the gang's placement group (detached); None when each rank has its own
    supervisor: Any = None  # the gang's detached GangSupervisor actor (ray/supervisor.py)
    launch: str = ""  # this start's token in the gang's actor names
    ranks: list[RankRecord] = field(default_factory=list)
    step: int = 0
    loss: float | None = None
    reason: str | None = None
    pending_ckpt: dict[int, set[int]] = field(default_factory=dict)  # step -> ranks whose shard is durable
    checkpoint_step: int | None = None
    cause: ExitCause | None = None  # why it failed: the blamed rank's cause
    speed: Any = None  # fabric.local.speed.RankSpeed of a data-parallel gang (ray/telemetry.py)
    shares: tuple[int, ...] = ()  # the work split in samples (set_work_split); (): even
    slow: dict[int, float] = field(default_factory=dict)  # rank -> slow-down factor (slow-worker faults)
    checkpoint_requests: int = 0  # on-demand checkpoints asked of this job (checkpoint_now)
    # Rank moves (rankmove.py): the rendezvous generation, the move in flight, the recovery
    # being measured (closed by the first step after it), placement groups of moved ranks,
    # and chips the gang's own placement group still reserves after their rank moved away.
    generation: int = 0
    moved_ranks: int = 0  # ranks lost and moved (infrastructure failures, never the retry budget)
    moving: dict[str, Any] | None = None
    recovery: dict[str, Any] | None = None
    extra_pgs: list[Any] = field(default_factory=list)
    held: set[int] = field(default_factory=set)
    log: deque[str] = field(default_factory=lambda: deque(maxlen=400))

    @property
    def job_id(self) -> str:
        return str(self.spec.job_id)

    def set_state(self, dst: RunState) -> None:
        check_transition("ray job", RAY_JOB_TRANSITIONS, self.state, dst)
        self.state = dst

    def status(self, red: Redactor) -> dict[str, Any]:
        """The fabric's view of the job (``job_status``); what a worker wrote passes ``red``."""
        return {
            "job_id": self.job_id,
            "state": self.state.value,
            "chips": list(self.spec.chips),
            "step": self.step,
            "loss": self.loss,
            "reason": red.redact(self.reason) if self.reason else self.reason,
            "checkpoint_step": self.checkpoint_step,
            "placement": self.strategy,
            "ranks": [
                {"rank": r.rank, "chip": r.chip, "node_ip": r.info.get("ip"), "pid": r.info.get("pid"),
                 "node_id": r.info.get("node_id"),
                 "cause": r.cause.value if r.cause else None,
                 "exit_code": (r.result or {}).get("exit_code")}
                for r in self.ranks
            ],
            "log_tail": list(self.log)[-LOG_TAIL:],
        }

    def run_status(self, red: Redactor) -> RunStatus:
        """This fabric restarts no gang: one attempt, a failure charged to its cause, each lost
        rank it moved an infrastructure failure (as on the local fabric).
        What a worker wrote (the reason, the log tail) passes ``red``."""
        failed = self.state is RunState.FAILED
        return RunStatus(
            job_id=self.job_id, state=_SHOWN.get(self.state, self.state), chips=tuple(r.chip for r in self.ranks),
            step=self.step, loss=self.loss, attempt=1,
            infra_failures=self.moved_ranks + int(failed and self.cause is ExitCause.INFRA),
            user_failures=int(failed and self.cause is ExitCause.USER_CODE),
            max_retries=int(self.spec.options.get("max_retries", 0)),
            reason=red.redact(self.reason) if self.reason else self.reason,
            checkpoint_step=self.checkpoint_step, log_tail=tuple(red.lines(list(self.log)[-LOG_TAIL:])),
        )


@dataclass(eq=False)
class RayState:
    """What ``RayFabric`` shares with its ``JobRunner``; hold ``lock`` to read or change it."""

    ray: Any  # the ray module (imported lazily)
    jobs: dict[str, RayJob] = field(default_factory=dict)
    chip_job: dict[int, tuple[str, int]] = field(default_factory=dict)  # chip -> (job, rank)
    standby_names: set[str] = field(default_factory=set)  # idle warm actors (standby.py)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def free(self, job: RayJob) -> None:
        """Release the job's chips (those still held by it)."""
        for c in [*(r.chip for r in job.ranks), *job.held]:
            if self.chip_job.get(c, (None,))[0] == job.job_id:
                del self.chip_job[c]


def cause_of(result: dict[str, Any]) -> ExitCause:
    """A rank's result from its actor: its worker's exit code is all it says."""
    return exit_cause(result.get("exit_code"))
