"""Values of the recovery flows: job policies, step timings, and the recovery record.

A ``Recovery`` is the journal of one flow: its kind, target, reason and ordered steps,
each with its own reason and times. It is JSON-plain (``to_dict``/``from_dict``) so it
can live in a job's status in the store and be picked up after a control-plane restart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from podfleet.errors import InvalidInputError
from podfleet.states import check_transition

NO_SPARE_POLICIES = ("shrink", "wait")


@dataclass(frozen=True)
class JobPolicy:
    """How a job wants to be recovered."""

    dp: int = 2  # data-parallel replicas: ranks form dp equal groups
    peer_replica: bool = True  # peers keep an in-memory copy of each rank's state
    on_no_spare: str = "shrink"  # "shrink" (drop a DP replica) or "wait" (for a repaired chip)
    min_dp: int = 1
    state_bytes_per_rank: float = 17.5e9  # llama3-70b: 70e9 params x 16 bytes / 64 ranks
    hbm_need_ratio: float = 0.85  # share of a chip's HBM a rank needs

    def __post_init__(self) -> None:
        if self.on_no_spare not in NO_SPARE_POLICIES:
            raise InvalidInputError(f"on_no_spare must be one of {', '.join(NO_SPARE_POLICIES)}, got "
                                    f"{self.on_no_spare!r}", field="on_no_spare")
        if self.dp < 1 or self.min_dp < 1 or self.min_dp > self.dp:
            raise InvalidInputError(f"need 1 <= min_dp ({self.min_dp}) <= dp ({self.dp})", field="dp")


@dataclass(frozen=True)
class Timings:
    """Twin-time cost of each step. Assumptions, documented in docs/health.md."""

    detect_s: float = 0.0  # the fabric reports the failure as an event
    isolate_s: float = 0.002  # fence the chip out of the collective group
    select_s: float = 0.001
    move_s: float = 0.010  # a warm standby process on the spare takes the rank
    replica_bw_bytes_per_s: float = 1.28e12  # peer -> spare over NeuronLink (trn2 per-chip)
    checkpoint_bw_bytes_per_s: float = 2.5e9  # per-chip read from shared storage
    restart_s: float = 30.0  # relaunch + rendezvous of the whole group (checkpoint path)
    resume_s: float = 0.005
    reroute_s: float = 0.050
    fence_s: float = 0.020  # remap the bad HBM rows / retire the partition (firmware call)
    hbm_fence_ratio: float = 0.25  # one of four HBM stacks
    throttle_s: float = 1.0
    reset_s: float = 30.0  # firmware reset of a chip
    repair_s: float | None = 4 * 3600.0  # a technician replaces a chip; None: never

    def replica_restore_s(self, nbytes: float) -> float:
        return nbytes / self.replica_bw_bytes_per_s

    def checkpoint_restore_s(self, nbytes: float) -> float:
        return self.restart_s + nbytes / self.checkpoint_bw_bytes_per_s


class RecoveryState(StrEnum):
    RUNNING = "running"
    WAITING = "waiting"  # no spare; the job waits for a repaired chip
    DONE = "done"
    FAILED = "failed"


RECOVERY_TRANSITIONS = {
    RecoveryState.RUNNING: frozenset({RecoveryState.WAITING, RecoveryState.DONE, RecoveryState.FAILED}),
    RecoveryState.WAITING: frozenset({RecoveryState.RUNNING, RecoveryState.FAILED}),
    RecoveryState.DONE: frozenset(),
    RecoveryState.FAILED: frozenset(),
}


@dataclass
class Step:
    name: str  # isolate, fence, throttle, select-spare, move-rank, restore, shrink, wait, resume, reroute...
    reason: str
    t_start: float
    t_end: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Recovery:
    id: str
    kind: str  # chip-failure, ecc, link, thermal, drain, firmware
    target: str  # "chip:12", "link:3-7"
    reason: str
    t_start: float
    job_id: str | None = None
    state: RecoveryState = RecoveryState.RUNNING
    steps: list[Step] = field(default_factory=list)
    pending: list[list[Any]] = field(default_factory=list)  # [chip, cause] still to handle
    t_end: float | None = None
    restored_from: str | None = None  # "replica" | "checkpoint" | None
    detected_t: float | None = None

    def set_state(self, dst: RecoveryState) -> None:
        check_transition("recovery", RECOVERY_TRANSITIONS, self.state, dst)
        self.state = dst

    @property
    def step(self) -> str | None:
        return self.steps[-1].name if self.steps else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        d["step"] = self.step
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Recovery:
        d = {k: v for k, v in d.items() if k != "step"}
        d["state"] = RecoveryState(d["state"])
        d["steps"] = [Step(**s) for s in d.get("steps", [])]
        return cls(**d)
