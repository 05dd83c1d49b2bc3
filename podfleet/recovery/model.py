"""Values of the recovery flows: job policies, step timings, and the recovery record.

A ``Recovery`` is the journal of one flow: its kind, target, reason and ordered steps,
each with its own reason and times. It is JSON-plain (``to_dict``/``from_dict``) so it
can live in a job's status in the store and be picked up after a control-plane restart.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from podfleet.errors import InvalidInputError, PodfleetError
from podfleet.states import check_transition, transitions
from podfleet.wire import JsonObject

NO_SPARE_POLICIES = ("shrink", "wait")
# The measured recovery costs (``python -m podfleet.rehearsal.calibrate`` writes it).
MEASURED_COSTS_PATH = Path(__file__).parent / "data" / "measured_costs.json"
SCHEMA = 1


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
# The samples live in ``MEASURED_COSTS_PATH``, written by ``python -m podfleet.rehearsal.calibrate``
# (which says how, when, on which machine and at which commit); the twin draws from them with
# its seeded RNG (``Empirical.draw``: a resample of the measured values, no fitted shape).
# Derivation in docs/health.md, "Recovery costs".


class MeasuredCostsError(PodfleetError, code="measured-costs"):
    """The measured-costs data file is missing or malformed: a broken install, not bad input."""


@dataclass(frozen=True)
class Empirical:
    """A measured distribution: the samples themselves, drawn uniformly (a bootstrap)."""

    samples: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.samples:
            raise MeasuredCostsError("an empirical distribution needs at least one sample")

    def draw(self, rng: np.random.Generator) -> float:
        return self.samples[int(rng.integers(len(self.samples)))]

    @property
    def median(self) -> float:
        return float(np.median(self.samples))


@dataclass(frozen=True)
class MeasuredCosts:
    """What the twin samples for detection and resume; ``provenance`` says where it came from.

    * ``kill_to_detect_s``: a worker's process killed -> the fabric sees it gone;
    * ``replica_fixed_s``: detection -> the re-formed gang's first step, for a rank move
      (warm standby, state from the surviving peer), less the measured state transfer;
    * ``checkpoint_fixed_s``: the same for a cold relaunch from a checkpoint, less the
      checkpoint's load at the median measured restore rate;
    * ``write_bytes_per_s`` / ``restore_bytes_per_s``: encrypted checkpoints on local disk."""

    kill_to_detect_s: Empirical
    replica_fixed_s: Empirical
    checkpoint_fixed_s: Empirical
    write_bytes_per_s: Empirical
    restore_bytes_per_s: Empirical
    provenance: JsonObject = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Any, where: str = "measured costs") -> MeasuredCosts:
        def numbers(rows: Any, key: str, what: str) -> list[float]:
            if not isinstance(rows, list) or not rows:
                raise MeasuredCostsError(f"{where}: {what} must be a non-empty list")
            out = []
            for i, row in enumerate(rows):
                v = row.get(key) if isinstance(row, dict) else row
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                    raise MeasuredCostsError(f"{where}: {what}[{i}]{'.' + key if key else ''} must be a "
                                             f"finite number >= 0, got {v!r}")
                out.append(float(v))
            return out

        if not isinstance(data, dict):
            raise MeasuredCostsError(f"{where}: expected a JSON object, got {type(data).__name__}")
        if data.get("schema") != SCHEMA:
            raise MeasuredCostsError(f"{where}: schema {data.get('schema')!r}, this podfleet reads {SCHEMA}")
        moves, cold = data.get("rank_moves"), data.get("relaunches")
        io = data.get("checkpoint_io")
        if not isinstance(io, dict):
            raise MeasuredCostsError(f"{where}: checkpoint_io must be an object")
        write = numbers(io.get("write_bytes_per_s"), "", "checkpoint_io.write_bytes_per_s")
        restore = numbers(io.get("restore_bytes_per_s"), "", "checkpoint_io.restore_bytes_per_s")
        if min(write + restore) <= 0:
            raise MeasuredCostsError(f"{where}: checkpoint_io rates must be > 0")
        rate = float(np.median(restore))
        detect = numbers(moves, "kill_to_detect_s", "rank_moves") + numbers(cold, "kill_to_detect_s", "relaunches")
        move = [max(0.0, a - b) for a, b in zip(numbers(moves, "detect_to_step_s", "rank_moves"),
                                                 numbers(moves, "restore_s", "rank_moves"), strict=True)]
        relaunch = [max(0.0, a - b / rate) for a, b in zip(numbers(cold, "detect_to_step_s", "relaunches"),
                                                            numbers(cold, "state_bytes", "relaunches"), strict=True)]
        prov = {k: data.get(k) for k in ("command", "started_utc", "finished_utc", "git_commit", "machine", "note")}
        return cls(Empirical(tuple(detect)), Empirical(tuple(move)), Empirical(tuple(relaunch)),
                   Empirical(tuple(write)), Empirical(tuple(restore)), prov)


@functools.lru_cache(maxsize=8)
def load_measured(path: str | Path = MEASURED_COSTS_PATH) -> MeasuredCosts:
    """The measured costs in ``path`` (default: the packaged file); MeasuredCostsError names
    the file and what is wrong with it."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise MeasuredCostsError(f"measured recovery costs {p} cannot be read ({exc.strerror or exc}): "
                                 f"regenerate it with `python -m podfleet.rehearsal.calibrate`") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MeasuredCostsError(f"measured recovery costs {p} is not JSON: {exc}") from exc
    return MeasuredCosts.from_json(data, str(p))


# --- detection: the runtime's own timeouts -----------------------------------------------------
HANG_TIMEOUT_S = 3.0  # fabric.factory.LOCAL_HANG_TIMEOUT_S: heartbeat silence that is a hang
HEARTBEAT_INTERVAL_S = 0.2  # training.config: workers beat every 0.2 s
MONITOR_POLL_S = 0.1  # fabric.local.monitor: the monitor checks heartbeat ages every 0.1 s
SCAN_INTERVAL_S = 2.0  # health.scan.HealthConfig.interval_s
TELEMETRY_INTERVAL_S = 2.0  # the twin's telemetry interval (fabric.sim.SimFabric default)

DEFAULT_STATE_BYTES_PER_RANK = 17.5e9  # llama3-70b: 70e9 params x 16 bytes / 64 ranks (a model perf does not know)


@dataclass(frozen=True)
class Timings:
    """Twin-time cost of each step: measured distributions (``costs``, drawn with the
    timeline's RNG), configured timeouts, and named assumptions. Sources and derivation in
    docs/health.md, "Recovery costs"."""

    # measured: kill -> detection, and the fixed costs of a rank move / a cold relaunch
    costs: MeasuredCosts = field(default_factory=load_measured)
    # detection (never 0 for a fault; the control plane's own drains and updates are known at once)
    hang_timeout_s: float = HANG_TIMEOUT_S
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S
    monitor_poll_s: float = MONITOR_POLL_S
    scan_interval_s: float = SCAN_INTERVAL_S
    telemetry_interval_s: float = TELEMETRY_INTERVAL_S
    isolate_s: float = 0.002  # assumption: fence the chip out of the collective group
    select_s: float = 0.001  # assumption: spare choice (control-plane compute)
    # None: each move draws ``costs.replica_fixed_s`` (a warm standby takes the rank,
    # rendezvous, first step); a value pins it (tests, a what-if).
    move_s: float | None = None
    # None: each cold relaunch of the gang on top of the move (checkpoint path) draws
    # ``costs.checkpoint_fixed_s`` less the move's median; a value pins it.
    restart_s: float | None = None
    # assumption: the fixed costs measured with 2 processes of the debug model hold for a
    # 64-rank gang (a Trn2 relaunch also loads the Neuron runtime and compiled graphs);
    # every drawn move and relaunch is multiplied by it, so benchmarks can report it at x0.5 / x2.
    fixed_cost_scale: float = 1.0
    replica_bw_bytes_per_s: float = 1.28e12  # fallback copy bandwidth when the path is unknown (trn2 per chip)
    # assumption: per-chip read from a pod's shared storage (control.drivers.twin's write rate;
    # this host's local disk, ``costs.restore_bytes_per_s``, is not a pod's storage)
    checkpoint_bw_bytes_per_s: float = 2.5e9
    resume_s: float = 0.005  # assumption: release the paused gang
    reroute_s: float = 0.050  # assumption
    fence_s: float = 0.020  # assumption: remap the bad HBM rows / retire the partition (firmware call)
    hbm_fence_ratio: float = 0.25  # one of four HBM stacks
    throttle_s: float = 1.0  # assumption
    reset_s: float = 30.0  # assumption: firmware reset of a chip
    repair_s: float | None = 4 * 3600.0  # assumption: a technician replaces a chip; None: never

    def draw_move_s(self, rng: np.random.Generator) -> float:
        if self.move_s is not None:
            return self.move_s
        return self.fixed_cost_scale * self.costs.replica_fixed_s.draw(rng)

    def draw_restart_s(self, rng: np.random.Generator) -> float:
        if self.restart_s is not None:
            return self.restart_s
        c = self.costs
        return self.fixed_cost_scale * max(0.0, c.checkpoint_fixed_s.draw(rng) - c.replica_fixed_s.median)

    def draw_exit_detect_s(self, rng: np.random.Generator) -> float:
        """A killed worker's process -> the fabric knows it is gone (measured)."""
        return self.costs.kill_to_detect_s.draw(rng)

    def replica_restore_s(self, nbytes: float, bw_bytes_per_s: float | None = None) -> float:
        return nbytes / (bw_bytes_per_s or self.replica_bw_bytes_per_s)

    def checkpoint_restore_s(self, nbytes: float, rng: np.random.Generator) -> float:
        return self.draw_restart_s(rng) + nbytes / self.checkpoint_bw_bytes_per_s


class RecoveryState(StrEnum):
    RUNNING = "running"
    WAITING = "waiting"  # no spare; the job waits for a repaired chip
    DONE = "done"
    FAILED = "failed"


RECOVERY_TRANSITIONS = transitions(RecoveryState, {
    RecoveryState.RUNNING: {RecoveryState.WAITING, RecoveryState.DONE, RecoveryState.FAILED},
    RecoveryState.WAITING: {RecoveryState.RUNNING, RecoveryState.FAILED},
})


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
