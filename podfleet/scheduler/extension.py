"""One small Protocol per extension point (as in the Kubernetes scheduling framework).

A plugin implements only the points it needs; the ``Framework`` owns their order and
short-circuiting, and plugins never call each other. Every hook returns a ``Status``.

Order of one scheduling cycle for one job::

    Admit (queue quota) -> PreFilter -> Filter (chip masks) -> [blocks all of whose chips pass]
      -> Score (weighted sum over candidate blocks) -> Reserve -> Permit -> Bind
    If no block passes: PostFilter (preemption) may nominate victims.
    If Admit finds the job's queue within its nominal quota but that quota lent out:
      Reclaim nominates borrowing jobs to preempt (no free block is taken meanwhile).
    If Reserve, Permit or Bind fails: Unreserve runs (idempotent) on every Reserve plugin.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from podfleet.hardware.topology import GridTopology, Topology
from podfleet.scheduler.jobs import SchedulerJob
from podfleet.scheduler.queues import QueueBook
from podfleet.scheduler.reservations import ReservationBook
from podfleet.scheduler.state import PodState, SchedulerView
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest, Nomination, Placement

CycleState = dict[str, Any]  # scratch shared by one job's hooks within one cycle

# Cycle state key: (placement, its global chips as an int64 array) where the stage that
# chose the placement had the array anyway (a gang across pods: thousands of chips), so
# Reserve and Permit read the array rather than convert the placement's tuple again.
PLACED_CHIPS = "placed_chips"


def placed_array(state: CycleState, placement: Placement) -> np.ndarray | None:
    """The array of ``placement``'s chips the cycle left, or None."""
    placed = state.get(PLACED_CHIPS)
    if placed is not None and placed[0] is placement:
        chips: np.ndarray = placed[1]
        return chips
    return None


def placed_chips(state: CycleState, placement: Placement) -> np.ndarray:
    """``placement.chips`` as an int64 array: the one the cycle left, or converted."""
    chips = placed_array(state, placement)
    if chips is None:
        chips = np.fromiter(placement.chips, dtype=np.int64, count=len(placement.chips))
    return chips


class ShapePlan(Protocol):
    """A plan of one job on one block shape, as placement ranks it (it travels with the
    placement as ``Placement.plan``)."""

    @property
    def step_time_s(self) -> float: ...


class ShapePlanner(Protocol):
    """The planner as the scheduler reaches it (``parallelism: auto``): declared here, and
    implemented by ``planner.adapter.PlannerAdapter``, which the composition root hands
    the plane and the plane each cluster's scheduler (``Scheduler(planner=)``)."""

    def plan_shape(self, model: Any, chips: int, grid: GridTopology, shape: tuple[int, ...],
                   grad_compression: str = "none") -> ShapePlan:
        """The fastest plan of ``model`` on ``chips`` chips laid out as a ``shape`` block of
        ``grid``, estimated with the job's gradient compression. Raises ``PodfleetError``
        (or ``ValueError``) with the reason when no plan of that shape runs the model."""

    def __hash__(self) -> int:
        """Plans are cached per planner (and per model, chips, grid, shape)."""


@runtime_checkable
class FleetPlanner(Protocol):
    """A planner that can also plan a gang across pods (``scheduler.fleet``): the model on
    ``chips`` chips of ``topology`` (a fleet of the gang's pods, each holding the same
    block), TP/PP/DP chosen for that placement."""

    def plan_topology(self, model: Any, chips: int, topology: Topology,
                      grad_compression: str = "none") -> ShapePlan:
        """The fastest plan; raises ``PodfleetError`` (or ``ValueError``) when none runs."""


def _zero_clock() -> float:
    return 0.0


@dataclass
class Handle:
    """What plugins may see (given at construction): the cluster, the job records, the clock."""

    cluster: SchedulerView
    jobs: dict[str, SchedulerJob] = field(default_factory=dict)
    slots: dict[int, str] = field(default_factory=dict)  # owner slot -> job_id
    running: dict[str, SchedulerJob] = field(default_factory=dict)  # RUNNING only
    now_s: Callable[[], float] = _zero_clock
    planner: ShapePlanner | None = None  # plans ``parallelism: auto`` jobs per block shape
    queues: QueueBook = field(default_factory=QueueBook)  # the cluster's queues and their usage
    reservations: ReservationBook = field(default_factory=ReservationBook)  # advance reservations
    # How many ``running`` jobs have each base priority: whether any job could be a victim
    # is a look at a few priorities, not a pass over every running job (a gang that finds
    # no free pods asks on every try).
    running_priorities: Counter[int] = field(default_factory=Counter)

    def set_running(self, rec: SchedulerJob, running: bool) -> None:
        """``rec`` is RUNNING now (True) or no longer (False): ``running`` and its counts follow."""
        if running:
            if rec.job_id not in self.running:
                self.running_priorities[rec.request.priority] += 1
            self.running[rec.job_id] = rec
        elif self.running.pop(rec.job_id, None) is not None:
            left = self.running_priorities[rec.request.priority] - 1
            if left:
                self.running_priorities[rec.request.priority] = left
            else:
                del self.running_priorities[rec.request.priority]

    def any_running_below(self, priority: int) -> bool:
        """Whether some running job has a lower base priority (a possible victim)."""
        return any(p < priority for p in self.running_priorities)


@dataclass(frozen=True)
class Candidates:
    """Candidate blocks for one job, possibly on several pods; all of size ``job.chips``."""

    pod: np.ndarray  # [n] pod index
    block: np.ndarray  # [n] block id in the shared BlockIndex
    shape_id: np.ndarray  # [n]
    chips: np.ndarray  # [n, size] local chips in ring order
    pods: np.ndarray  # [k] the distinct pods considered, best fit first
    pod_pos: np.ndarray  # [n] row of each candidate's pod in ``pods`` / ``free``
    free: np.ndarray  # [k, n_blocks] blocks free (for this job) before placement
    cluster: SchedulerView

    def __len__(self) -> int:
        return len(self.block)


class Plugin(Protocol):
    """What every plugin has; the extension points it implements are the Protocols below."""

    name: str


@runtime_checkable
class AdmitPlugin(Protocol):
    """Quota admission before placement (Kueue admits a workload before TAS places it).
    Admission and placement are decided in one cycle: quota is charged only when the job
    binds or is nominated, so quota never admits a job that no block can hold."""

    name: str

    def admit(self, state: CycleState, job: JobRequest) -> Status: ...


@runtime_checkable
class ReclaimPlugin(Protocol):
    """Nominate jobs of borrowing queues to preempt so ``job``'s queue gets back the
    nominal quota it lent (``state["admission"].reclaim`` chips at least)."""

    name: str

    def reclaim(self, state: CycleState, job: JobRequest, diagnosis: str) -> tuple[Status, Nomination | None]: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(self, state: CycleState, job: JobRequest) -> Status: ...


@runtime_checkable
class FilterPlugin(Protocol):
    """Returns the chips of ``pod`` this job may use (bool mask).

    ``job_dependent = False`` filters are evaluated once per pod change with ``job=None``
    and cached in the pod's block summary; job-dependent ones run per job per pod.
    """

    name: str
    job_dependent: bool

    def filter(self, state: CycleState, job: JobRequest | None, pod: PodState) -> tuple[Status, np.ndarray]: ...


@runtime_checkable
class PodsFilterPlugin(Protocol):
    """A Filter that also answers for many pods in one call: bool [len(pods), chips per
    pod], from the cluster's fleet-wide ``ChipArrays``. The framework asks this where it
    has many pods at once (refreshing the pods a gang across pods changed, checking the
    pods chosen for one) and ``filter`` elsewhere; both must agree."""

    name: str
    job_dependent: bool

    def filter_pods(self, state: CycleState, job: JobRequest | None, view: SchedulerView,
                    pods: np.ndarray) -> tuple[Status, np.ndarray]: ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    name: str

    def post_filter(self, state: CycleState, job: JobRequest, diagnosis: str) -> tuple[Status, Nomination | None]: ...


@runtime_checkable
class FleetPostFilterPlugin(Protocol):
    """A PostFilter that also frees room for a gang across pods (``scheduler.fleet``):
    a ``Nomination`` whose ``placement`` spans the pods it preempts on."""

    name: str

    def post_filter_across_pods(self, state: CycleState, job: JobRequest,
                                diagnosis: str) -> tuple[Status, Nomination | None]: ...


@runtime_checkable
class ScorePlugin(Protocol):
    """Scores in [0, 100] per candidate; the framework multiplies by the configured weight."""

    name: str

    def score(self, state: CycleState, job: JobRequest, cands: Candidates) -> tuple[Status, np.ndarray]: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, state: CycleState, job: JobRequest, placement: Placement) -> Status: ...

    def unreserve(self, state: CycleState, job: JobRequest, placement: Placement) -> None:
        """Undo ``reserve``; must be idempotent (safe to call twice or without reserve)."""


@runtime_checkable
class PermitPlugin(Protocol):
    name: str

    def permit(self, state: CycleState, job: JobRequest, placement: Placement) -> Status: ...


@runtime_checkable
class BindPlugin(Protocol):
    name: str

    def bind(self, state: CycleState, job: JobRequest, placement: Placement) -> Status: ...


POINTS: dict[str, type] = {
    "admit": AdmitPlugin,
    "reclaim": ReclaimPlugin,
    "pre_filter": PreFilterPlugin,
    "filter": FilterPlugin,
    "post_filter": PostFilterPlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "bind": BindPlugin,
}
