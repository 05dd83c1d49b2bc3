"""What the job manager asks of a job driver: the fabric-specific half of a job's life.

One driver per cluster, chosen once from what its fabric declares (``driver_for``):
the twin driver for fabrics with ``ResumableRuns`` (a job's state lives on its chips:
pause, move a rank, resume), the process driver for everything else (local worker
processes, Ray actors, Neuron hosts: a job's state lives in its checkpoints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from podfleet.fabric.base import FabricEvent
from podfleet.wire import JsonObject

if TYPE_CHECKING:
    from podfleet.control.jobtable import Job, JobTable
    from podfleet.control.planning import Plan
    from podfleet.control.runtime import ClusterRuntime
    from podfleet.control.specs import JobSpec


class JobDriver(Protocol):
    # Whether ``checkpoint_now`` saves the job's state on demand (preemption uses it).
    on_demand_checkpoints: bool
    # Whether the planner knows this driver's models (``parallelism: auto`` picks a plan).
    plans_models: bool
    # True: the fabric reports the on-demand checkpoint written (``checkpoint_saved``),
    # waited for up to ``checkpoint_write_s``; False: the write takes ``checkpoint_write_s``.
    checkpoint_reported: bool
    # URL scheme of checkpoints the control plane records itself (preemption).
    checkpoint_scheme: str

    def check_submit(self, spec: JobSpec) -> tuple[Plan | None, float | None]:
        """Refuse what this fabric cannot run (a 4xx at submit); the job's layout and
        model size."""

    def launch_options(self, job: Job, start_step: int) -> JsonObject:
        """``WorkerGroupSpec.options`` for (re)launching ``job`` from ``start_step``."""

    def start(self, job: Job, chips: tuple[int, ...], start_step: int) -> None:
        """Start (or restart) the job's gang on ``chips``, continuing from ``start_step``.
        Raises ``PodfleetError`` when the fabric refuses."""

    def stop(self, job_id: str) -> None:
        """Stop the job's workers; a job the fabric does not know is fine."""

    def preemptible(self, spec: JobSpec) -> bool:
        """Whether the scheduler may preempt such a job (checkpoint and requeue): only where
        its state is saved on demand, so no work is redone."""

    def checkpoint_now(self, job_id: str) -> int | None:
        """Save the job's state now (or ask the fabric to) and return its step; None when
        the job does not run there or cannot be saved on demand."""

    def checkpoint_write_s(self, job_id: str) -> float:
        """Seconds the checkpoint ``checkpoint_now`` just took needs to be written, or the
        longest the plane waits for its report (the victim keeps its chips until then); 0
        when nothing is written on demand."""

    def checkpoint_saved(self, job_id: str, step: int) -> int | None:
        """The step of the on-demand checkpoint asked at ``step`` once it is written (the
        fabric's report: at least ``step``); None while it is not."""

    def owns(self, job_id: str) -> bool:
        """True while the fabric or recovery is moving the job itself (hands off)."""

    def holds_recovering(self, job_id: str) -> bool:
        """True when a relaunched job's gang starts in the background: ``dispatch.launch``
        leaves it RECOVERING and the driver moves it to RUNNING once the gang runs."""

    def on_event(self, ev: FabricEvent) -> None:
        """A fabric event about this cluster, on the engine thread, in a store transaction."""


class RecoveryPort(Protocol):
    """What the job manager needs of the recovery service (``recovery.service``)."""

    def owns(self, job_id: str) -> bool:
        """True while a recovery flow moves the job: the scheduler leaves it alone."""

    def on_event(self, rt: ClusterRuntime, ev: FabricEvent) -> bool:
        """Handle a fabric event; True when a recovery flow took the fault over."""

    def drain(self, rt: ClusterRuntime, chip: int, reason: str) -> bool:
        """Move the rank on ``chip`` off while the chip works; False when no recovery
        flow can (the fabric does not move ranks, or no managed job holds the chip)."""

    def set_cordoned(self, rt: ClusterRuntime, chips: list[int]) -> None:
        """The chips recovery must not move ranks to (cordoned or draining)."""

    def set_spares(self, rt: ClusterRuntime, spares: tuple[int, ...]) -> None:
        """The cluster's spares changed (one took a rank, or one was restored)."""

    def let_go(self, rt: ClusterRuntime, job_id: str) -> None:
        """Stop managing the job (its chips stay the owner map's): a pod-loss policy moves
        it as a whole (``control.podloss``)."""

    def adopt_restored(self, rt: ClusterRuntime, job_id: str) -> None:
        """A job reloaded RECOVERING after a restart: adopt the flow its journal left open
        (before the job manager places it again)."""


class JobOps(Protocol):
    """What drivers and ``dispatch`` ask of the job manager (``control.jobs``): the job
    table and the shared steps of a job's life, so they need not import it."""

    @property
    def table(self) -> JobTable: ...

    @property
    def recovery(self) -> RecoveryPort | None: ...

    @property
    def hang_restarts(self) -> int:
        """Relaunches of a job whose ranks hang before it fails as its code's fault."""

    def now(self) -> float: ...

    def driver(self, rt: ClusterRuntime) -> JobDriver: ...

    def save_health(self, rt: ClusterRuntime) -> None: ...

    def render(self, rt: ClusterRuntime) -> None: ...

    def schedule(self, rt: ClusterRuntime) -> None: ...

    def relaunch(self, rt: ClusterRuntime, job: Job) -> None: ...

    def checkpointed(self, job: Job, step: int, path: str, detail: Mapping[str, Any]) -> None: ...
