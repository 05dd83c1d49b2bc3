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
from podfleet.wire import JsonObject

NO_SPARE_POLICIES = ("shrink", "wait")


@dataclass(frozen=True)
class JobPolicy:
    """How a job wants to be recovered."""

    dp: int = 2  # data-parallel replicas: ranks form dp equal groups
    peer_replica: bool = True  # peers keep an in-memory copy of each rank's state
    on_no_spare: str = "shrink"  # "shrink" (drop a DP replica) or "wait" (for a repaired chip)
    min_dp: int = 1
    # None: parameters + optimizer state of the job's model and plan (perf), else
    # DEFAULT_STATE_BYTES_PER_RANK.
    state_bytes_per_rank: float | None = None
    hbm_need_ratio: float = 0.85  # share of a chip's HBM a rank needs

    def __post_init__(self) -> None:
        if self.on_no_spare not in NO_SPARE_POLICIES:
            raise InvalidInputError(f"on_no_spare must be one of {', '.join(NO_SPARE_POLICIES)}, got "
                                    f"{self.on_no_spare!r}", field="on_no_spare")
        if self.dp < 1 or self.min_dp < 1 or self.min_dp > self.dp:
            raise InvalidInputError(f"need 1 <= min_dp ({self.min_dp}) <= dp ({self.dp})", field="dp")


# --- measured on the real runtime (local fabric, real worker processes) ---------------------
# Figures from docs/benchmarks.md, measured 2026-11-29 19:26-19:33 UTC on an idle x86_64
# machine with 2 CPUs (CPython 3.11.7); derivation of what follows in docs/health.md,
# "Recovery costs".
# ``podfleet bench run recovery-real --output json``: kill -9 of one of two DP workers of
# the ``tiny`` model (0.86M params), kill -> first step after resume completed by every rank.
MEASURED_REPLICA_RESUME_S = 0.59  # peer replica + warm standby
MEASURED_CHECKPOINT_RESUME_S = 2.53  # checkpoint only, cold start (every rank imports torch)
MEASURED_TINY_PARAMS = 0.86e6
MEASURED_TINY_STATE_BYTES = MEASURED_TINY_PARAMS * 12  # fp32 weights + Adam m and v (training/)
# ``podfleet bench run checkpoint-io --output json``: 130 MB, AES-256-GCM encrypted, local disk.
MEASURED_CKPT_WRITE_BYTES_PER_S = 154e6
MEASURED_CKPT_RESTORE_BYTES_PER_S = 283e6
# What is left of a measured resume once the tiny state's load is taken out (it read
# its state at the measured restore rate): the fixed cost of bringing a rank back.
REPLICA_FIXED_S = MEASURED_REPLICA_RESUME_S - MEASURED_TINY_STATE_BYTES / MEASURED_CKPT_RESTORE_BYTES_PER_S
CHECKPOINT_FIXED_S = MEASURED_CHECKPOINT_RESUME_S - MEASURED_TINY_STATE_BYTES / MEASURED_CKPT_RESTORE_BYTES_PER_S

# --- detection: the runtime's own timeouts -----------------------------------------------------
HANG_TIMEOUT_S = 3.0  # fabric.factory.LOCAL_HANG_TIMEOUT_S: heartbeat silence that is a hang
HEARTBEAT_INTERVAL_S = 0.2  # training.config: workers beat every 0.2 s
MONITOR_POLL_S = 0.1  # fabric.local.monitor: the monitor checks heartbeat ages every 0.1 s
SCAN_INTERVAL_S = 2.0  # health.scan.HealthConfig.interval_s
TELEMETRY_INTERVAL_S = 2.0  # the twin's telemetry interval (fabric.sim.SimFabric default)

DEFAULT_STATE_BYTES_PER_RANK = 17.5e9  # llama3-70b: 70e9 params x 16 bytes / 64 ranks (a model perf does not know)


@dataclass(frozen=True)
class Timings:
    """Twin-time cost of each step: measured constants scaled by the job's state size
    and the path's bandwidth (``recovery.costs``); the rest are assumptions. Sources and
    derivation in docs/health.md, "Recovery costs"."""

    # detection (never 0 for a fault; the control plane's own drains and updates are known at once)
    hang_timeout_s: float = HANG_TIMEOUT_S
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S
    monitor_poll_s: float = MONITOR_POLL_S
    scan_interval_s: float = SCAN_INTERVAL_S
    telemetry_interval_s: float = TELEMETRY_INTERVAL_S
    isolate_s: float = 0.002  # assumption: fence the chip out of the collective group
    select_s: float = 0.001  # assumption: spare choice (control-plane compute)
    move_s: float = REPLICA_FIXED_S  # measured: a warm standby takes the rank, rendezvous, first step
    # A cold relaunch of the gang on top of the move (checkpoint path): measured.
    restart_s: float = CHECKPOINT_FIXED_S - REPLICA_FIXED_S
    replica_bw_bytes_per_s: float = 1.28e12  # fallback copy bandwidth when the path is unknown (trn2 per chip)
    checkpoint_bw_bytes_per_s: float = 2.5e9  # assumption: per-chip read from shared storage
    resume_s: float = 0.005  # assumption: release the paused gang
    reroute_s: float = 0.050  # assumption
    fence_s: float = 0.020  # assumption: remap the bad HBM rows / retire the partition (firmware call)
    hbm_fence_ratio: float = 0.25  # one of four HBM stacks
    throttle_s: float = 1.0  # assumption
    reset_s: float = 30.0  # assumption: firmware reset of a chip
    repair_s: float | None = 4 * 3600.0  # assumption: a technician replaces a chip; None: never

    def replica_restore_s(self, nbytes: float, bw_bytes_per_s: float | None = None) -> float:
        return nbytes / (bw_bytes_per_s or self.replica_bw_bytes_per_s)

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
    detail: JsonObject = field(default_factory=dict)


@dataclass
class Recovery:
    id: str
    kind: str  # chip-failure, ecc, link, thermal, drain, firmware, rehome (a rank back to its job's pod)
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

    def to_dict(self) -> JsonObject:
        d = asdict(self)
        d["state"] = self.state.value
        d["step"] = self.step
        return d

    @classmethod
    def from_dict(cls, d: JsonObject) -> Recovery:
        d = {k: v for k, v in d.items() if k != "step"}
        d["state"] = RecoveryState(d["state"])
        d["steps"] = [Step(**s) for s in d.get("steps", [])]
        return cls(**d)
