"""Values the scheduler takes and gives: job requests, placements, decisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from podfleet.errors import InvalidInputError
from podfleet.scheduler.status import Status

if TYPE_CHECKING:
    from podfleet.perf.models import ModelSpec

COMM_PATTERNS = ("ring", "all-to-all")
PARALLELISM = ("manual", "auto")
# Network levels a gang may be kept inside (Kueue TAS): a pod (NeuronLink), or a block of
# pods behind one spine (EFA). ``topology_required``: fail to place rather than cross it;
# ``topology_preferred``: cross as few as possible.
TOPOLOGY_LEVELS = ("pod", "block")


@dataclass(frozen=True)
class JobRequest:
    """What a job asks of the scheduler. Validated here so every surface gets one message."""

    job_id: str
    chips: int
    team: str = "default"
    priority: int = 0
    queue: str = "default"  # the cluster queue it is admitted through (``scheduler.queues``)
    tp: int = 1  # tensor-parallel degree: consecutive ranks form a TP group
    comm: str = "ring"  # dominant collective pattern across the data-parallel dimension
    shape: tuple[int, ...] | None = None  # an exact block shape, or None for any
    hbm_bytes_per_chip: int = 0  # memory each rank needs (0 = not stated)
    parallelism: str = "manual"  # "auto": block shape and plan chosen together
    model: str | ModelSpec | None = None  # for parallelism="auto": a planner preset name, or a custom spec
    preemptible: bool = True
    # Its fabric can checkpoint it on demand and relaunch it from exactly that step, so a
    # reclaim may move it out of a block (``Nomination.moves``) without losing its work.
    movable: bool = False
    may_preempt: bool = True  # False: its priority class never preempts lower-priority jobs
    grad_compression: str = "none"  # for parallelism="auto": plans are estimated with it (perf.compression)
    pods: int | None = None  # a gang across pods: exactly this many pods, chips / pods on each
    topology_required: str | None = None  # "pod" | "block": never cross it
    topology_preferred: str | None = None  # "pod" | "block": cross it as little as possible
    # Slurm's ``--time``: the job is stopped this long after it starts (None: no limit).
    # Only a job with a limit may backfill onto chips a reservation holds later.
    time_limit_s: float | None = None

    def __post_init__(self) -> None:
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise InvalidInputError(f"time_limit_s must be > 0, got {self.time_limit_s!r}", field="time_limit_s")
        if not isinstance(self.chips, int) or self.chips < 1:
            raise InvalidInputError(f"chips must be a positive integer, got {self.chips!r}", field="chips")
        if self.tp < 1 or self.chips % self.tp:
            raise InvalidInputError(
                f"tp ({self.tp}) must be a positive divisor of chips ({self.chips})", field="tp"
            )
        if self.comm not in COMM_PATTERNS:
            raise InvalidInputError(
                f"comm {self.comm!r} is not one of {', '.join(COMM_PATTERNS)}", field="comm"
            )
        if self.parallelism not in PARALLELISM:
            raise InvalidInputError(
                f"parallelism {self.parallelism!r} is not one of {', '.join(PARALLELISM)}",
                field="parallelism",
            )
        if self.parallelism == "auto" and not self.model:
            raise InvalidInputError("parallelism 'auto' needs a model", field="model")
        if self.shape is not None:
            prod = 1
            for s in self.shape:
                prod *= s
            if prod != self.chips or any(s < 1 for s in self.shape):
                raise InvalidInputError(
                    f"shape {'x'.join(map(str, self.shape))} holds {prod} chips, not chips ({self.chips})",
                    field="shape",
                )
        if self.hbm_bytes_per_chip < 0:
            raise InvalidInputError("hbm_bytes_per_chip must be >= 0", field="hbm_bytes_per_chip")
        for name, v in (("topology_required", self.topology_required), ("topology_preferred", self.topology_preferred)):
            if v is not None and v not in TOPOLOGY_LEVELS:
                raise InvalidInputError(f"{name} {v!r} is not one of {', '.join(TOPOLOGY_LEVELS)}", field=name,
                                        allowed=list(TOPOLOGY_LEVELS))
        if self.pods is not None:
            if not isinstance(self.pods, int) or self.pods < 1 or self.chips % self.pods:
                raise InvalidInputError(f"pods ({self.pods!r}) must be a positive divisor of chips ({self.chips})",
                                        field="pods")
            if self.shape is not None:
                raise InvalidInputError("give pods or shape, not both", field="pods")

    @property
    def spans_pods(self) -> bool:
        """Placed across pods (``scheduler.fleet``) rather than as one block of one pod."""
        return self.pods is not None and self.pods > 1


def fmt_shape(shape: tuple[int, ...] | None) -> str:
    return "x".join(map(str, shape)) if shape else "none"


@dataclass(frozen=True)
class Placement:
    """Where a gang runs: fleet -> pod -> chips (rank order) -> NeuronCores."""

    job_id: str
    pod: int
    chips: tuple[int, ...]  # global chip indices; rank r runs on chips[r] (ring order)
    local_chips: tuple[int, ...]  # the same chips numbered inside the pod
    shape: tuple[int, ...]
    offset: tuple[int, ...]
    cores_per_chip: int = 1  # logical NeuronCores per chip (trn2 at LNC=2: 4)
    score: float = 0.0
    plan: Any = None  # the planner's plan when parallelism="auto"
    reason: str = ""
    # A gang across pods: every pod it holds chips on, in rank order, and the network
    # blocks they sit in. Empty for a one-pod gang (``pod`` says it all).
    pods: tuple[int, ...] = ()
    blocks: tuple[int, ...] = ()

    @property
    def all_pods(self) -> tuple[int, ...]:
        return self.pods or (self.pod,)

    @property
    def cores(self) -> tuple[tuple[int, ...], ...]:
        """Logical NeuronCores each rank's worker gets (chip c owns c*k .. c*k+k-1)."""
        k = self.cores_per_chip
        return tuple(tuple(range(c * k, c * k + k)) for c in self.chips)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "chips": list(self.chips),
            "shape": list(self.shape),
            "offset": list(self.offset),
            "cores": [list(c) for c in self.cores],
            "score": round(self.score, 3),
            "reason": self.reason,
            "pods": list(self.all_pods),
            **({"blocks": list(self.blocks)} if self.blocks else {}),
        }


@dataclass(frozen=True)
class Move:
    """A running job within its queue's nominal quota that a reclaim moves out of the
    block it nominated (not a preemption: checkpointed on demand and relaunched at once
    on ``local_chips`` of the same pod, from the step it was saved at)."""

    job_id: str
    local_chips: tuple[int, ...]
    block: int = -1  # the target block's id (its shape and offset), -1: not a block


@dataclass(frozen=True)
class Nomination:
    """Chips chosen for a preemptor (PostFilter) while its victims checkpoint."""

    pod: int
    block: int
    local_chips: tuple[int, ...]
    victims: tuple[str, ...]
    reason: str = ""  # why the victims go, shown on each (e.g. a queue reclaiming lent chips)
    # Holders of the block that are not preempted (a queue within its nominal quota): the
    # preemptor keeps the block and starts once they have ended (a reclaim's reservation).
    awaited: tuple[str, ...] = ()
    # Holders of the block moved out of it onto chips the victims free (``Move``): the
    # preemptor binds once they are relaunched there.
    moves: tuple[Move, ...] = ()
    # A gang across pods (``scheduler.fleet``): the placement it binds on once its victims
    # have checkpointed (``pod``/``block`` are then its first pod's, ``local_chips`` every
    # pod's in rank order).
    placement: Placement | None = None

    @property
    def all_pods(self) -> tuple[int, ...]:
        return self.placement.all_pods if self.placement is not None else (self.pod,)


class DecisionKind(StrEnum):
    BIND = "bind"  # launch the gang on placement.chips now
    PREEMPT = "preempt"  # checkpoint the victims, then call victims_checkpointed()
    PENDING = "pending"  # stays queued; status.reason says why
    REJECTED = "rejected"  # can never run here (UnschedulableAndUnresolvable)


@dataclass(frozen=True)
class Decision:
    job_id: str
    kind: DecisionKind
    status: Status
    placement: Placement | None = None
    victims: tuple[str, ...] = ()
    resume_step: int = 0  # the checkpoint step the job resumes from (0 = fresh start)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "kind": self.kind.value,
            "status": str(self.status),
            "placement": self.placement.to_dict() if self.placement else None,
            "victims": list(self.victims),
            "resume_step": self.resume_step,
        }
