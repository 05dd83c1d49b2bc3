"""The ``Fabric`` protocol and the chip / link state machines every fabric shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from podfleet.hardware.topology import Topology
from podfleet.states import any_to_any, check_transition
from podfleet.training.config import EXIT_BAD_INPUT, EXIT_OK, EXIT_PEER_LOST

if TYPE_CHECKING:  # type-only: worker processes import this module without the engine
    from podfleet.engine.timeline import Timeline


class ChipState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    FAILED = "failed"
    ISOLATED = "isolated"
    UPDATING = "updating"


CHIP_TRANSITIONS: dict[ChipState, frozenset[ChipState]] = {
    ChipState.HEALTHY: frozenset({ChipState.DEGRADED, ChipState.FAILED, ChipState.ISOLATED, ChipState.UPDATING}),
    ChipState.DEGRADED: frozenset({ChipState.HEALTHY, ChipState.FAILED, ChipState.ISOLATED, ChipState.UPDATING}),
    ChipState.FAILED: frozenset({ChipState.ISOLATED}),
    # An isolated chip comes back only after repair / replacement (or a good update).
    ChipState.ISOLATED: frozenset({ChipState.HEALTHY, ChipState.UPDATING}),
    ChipState.UPDATING: frozenset({ChipState.HEALTHY, ChipState.FAILED, ChipState.ISOLATED}),
}


def check_chip_transition(src: ChipState, dst: ChipState) -> None:
    check_transition("chip", CHIP_TRANSITIONS, src, dst)


class LinkState(StrEnum):
    UP = "up"
    DEGRADED = "degraded"
    DOWN = "down"


LINK_TRANSITIONS: dict[LinkState, frozenset[LinkState]] = any_to_any(LinkState)


def check_link_transition(src: LinkState, dst: LinkState) -> None:
    check_transition("link", LINK_TRANSITIONS, src, dst)


class ExitCause(StrEnum):
    """Why a real worker exited, as every real fabric classifies it. The control plane
    charges only USER_CODE against a job's retry budget."""

    OK = "ok"
    INFRA = "infra"  # killed, hung, node or actor lost: not the job's fault
    USER_CODE = "user-code"  # an exception or crash in the job's code: uses the retry budget
    BAD_INPUT = "bad-input"  # missing entrypoint, wrong key, unwritable dir: retrying won't help
    PEER_LOST = "peer-lost"  # a survivor whose collective broke after a peer died
    STOPPED = "stopped"  # we stopped it (job stop, or the rest of a gang being recovered)


def exit_cause(code: int | None) -> ExitCause:
    """What a worker's own exit code says (``training.config``'s ``EXIT_*``): anything but
    a clean end, a lost peer or bad input is its code's fault. Kills and signals are the
    fabric's to tell apart first (it knows who sent them)."""
    if code == EXIT_OK:
        return ExitCause.OK
    if code == EXIT_PEER_LOST:
        return ExitCause.PEER_LOST
    if code == EXIT_BAD_INPUT:
        return ExitCause.BAD_INPUT
    return ExitCause.USER_CODE


# Restarts of a job whose ranks stopped heartbeating (hang detection) before it fails as
# its own code's fault (PODFLEET_HANG_RESTARTS): a host stall does not follow a job from
# attempt to attempt; code that holds the GIL in a C call, or deadlocks, does.
DEFAULT_HANG_RESTARTS = 2


def hang_reason(where: str, hangs: int, timeout_s: float | None, limit: int) -> str:
    """Why a job that kept hanging failed (every fabric and driver that counts hangs)."""
    silent = f" for over {timeout_s:g} s" if timeout_s else ""
    return (f"the job's code stopped responding: {where} sent no heartbeat{silent} in {hangs} attempts "
            f"(hang restarts allowed: {limit}, PODFLEET_HANG_RESTARTS); code that holds the GIL or blocks "
            "without heartbeats is a user-code failure, not restarted again")


@dataclass(frozen=True)
class WorkerGroupSpec:
    """What a fabric needs to launch one job's gang of workers."""

    job_id: str
    chips: tuple[int, ...]  # rank r runs on chips[r]
    model: str
    steps: int
    checkpoint_interval: int = 0
    entrypoint: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FabricEvent:
    """Something a fabric reports upward: a fault, a worker exit, progress.

    Job events the control plane's drivers read: ``job-started``, ``progress`` (step,
    loss, tokens_per_s, step_time_s), ``checkpoint`` (step, path), ``job-finished``,
    ``job-failed`` (reason, cause), ``job-stopped``; a fabric that recovers a lost rank
    itself sends ``job-recovering`` then ``job-resumed`` (chips, source, restored_step);
    ``worker-exited`` (rank, cause: an ``ExitCause``) carries ``gang_ended=True`` when the
    whole gang ended with that rank and its launcher must relaunch it.
    """

    kind: str  # e.g. "chip-failed", "link-down", "worker-exited", "progress", "hang"
    t: float
    chip: int | None = None
    link: int | None = None
    job_id: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Fabric(Protocol):
    """What every fabric does. What only some do is a capability below: the control
    plane asks ``isinstance(fabric, Capability)``, never the fabric's name or ``getattr``."""

    @property
    def kind(self) -> str:
        """"sim", "local", "ray", "neuron": for display and the factory only."""

    @property
    def topology(self) -> Topology:
        """The chips and links this fabric drives (a fabric may discover its own)."""

    def attach(self, timeline: Any) -> None:
        """Register this fabric's processes (telemetry sampling, faults) on the timeline."""

    def chip_states(self) -> list[ChipState]: ...

    def set_chip_state(self, chip: int, state: ChipState, reason: str) -> None: ...

    def link_states(self) -> list[LinkState]: ...

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        """Latest telemetry: metric name -> array over chips (or [chips, cores])."""

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        """Latest link telemetry: metric name -> array over links."""

    def launch(self, group: WorkerGroupSpec) -> object:
        """Start the gang (what it returns is the fabric's own; callers ignore it)."""

    def stop(self, job_id: str) -> None: ...

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> object:
        """Deliver every event to ``callback`` (a fabric may return an unsubscribe handle)."""


# --- the shared run-state type -------------------------------------------------------------


class RunState(StrEnum):
    """A job's gang as its fabric sees it: the one run-state vocabulary of every fabric (the
    twin uses RUNNING, PAUSED, STOPPED, FINISHED; local processes add RECOVERING, STOPPING,
    FAILED; Ray adds PLACING and STARTING). Each fabric enforces its own transitions over
    it. Not the control plane's user-visible ``JobState`` (``control.lifecycle``), which a
    driver derives from the fabric's events."""

    PLACING = "placing"  # Ray: waiting for the placement group (all bundles or nothing)
    STARTING = "starting"  # Ray: actors created, rendezvous in progress
    RUNNING = "running"
    PAUSED = "paused"  # the twin: stopped between steps, state kept on the chips
    RECOVERING = "recovering"  # a process fabric is relaunching a lost rank itself
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"


LIVE_RUN_STATES = frozenset({RunState.PLACING, RunState.STARTING, RunState.RUNNING, RunState.PAUSED,
                             RunState.RECOVERING})
ENDED_RUN_STATES = frozenset({RunState.FINISHED, RunState.FAILED, RunState.STOPPED})


def run_transitions(live: dict[RunState, set[RunState]]) -> dict[RunState, frozenset[RunState]]:
    """A process fabric's run-state machine: its own live states and where each may go,
    plus the end every such fabric shares (a stop drains to STOPPED; the ends are final)."""
    return {**{s: frozenset(dst) for s, dst in live.items()}, RunState.STOPPING: frozenset({RunState.STOPPED}),
            **{s: frozenset() for s in ENDED_RUN_STATES}}


@dataclass(frozen=True)
class RunStatus:
    """One job's run on a fabric: what ``Introspection.run_status`` returns."""

    job_id: str
    state: RunState
    chips: tuple[int, ...]  # rank r on chips[r]
    step: int  # last step every rank completed
    loss: float | None = None
    attempt: int = 0
    infra_failures: int = 0
    user_failures: int = 0
    max_retries: int = 0
    reason: str | None = None
    checkpoint_step: int | None = None
    log_tail: tuple[str, ...] = ()
    step_time_s: float | None = None  # the last completed step's duration; None before one

    @property
    def live(self) -> bool:
        return self.state in LIVE_RUN_STATES


# --- capabilities: what a fabric declares it can do ----------------------------------------


@runtime_checkable
class Introspection(Protocol):
    """The fabric can say how a job's run stands and what its workers logged."""

    def run_status(self, job_id: str) -> RunStatus | None:
        """None when the fabric does not know the job (never launched, or forgotten)."""

    def run_logs(self, job_id: str) -> list[str]:
        """The fabric's log lines for the job (bounded; oldest first); [] if unknown."""


# How long a process fabric's gang holds at the step boundary of an on-demand checkpoint
# before it trains on: longer than the plane waits for the checkpoint
# (``control.drivers.process.CHECKPOINT_WAIT_S``), so a preemption stops it before it takes
# a step the checkpoint lacks; a preemption called off costs this much.
CHECKPOINT_HOLD_S = 60.0


@runtime_checkable
class OnDemandCheckpoints(Protocol):
    """The fabric saves a running job's state when asked, so preemption loses no work
    (``control.dispatch``). The twin snapshots its step counter at once (part of
    ``RankMoves``); a process fabric asks the gang to save at its next step boundary and
    hold there, and reports the checkpoint when every rank's shard is written
    (``RunStatus.checkpoint_step``, event ``checkpoint``), which the plane waits for, with a
    timeout, before it stops the job. Never blocks."""

    def checkpoint_now(self, job_id: str) -> int | None:
        """Save the job's state now; its step (a process fabric: the last step every rank
        completed, which the checkpoint it reports holds at least), or None when it does not
        run here. A stop or pause that follows waits for the write. ``ConflictError`` when
        the job cannot be saved on demand (a user script's state is its own)."""


@runtime_checkable
class RankMoves(Introspection, OnDemandCheckpoints, Protocol):
    """What recovery, moves home and rollouts call (the recovery orchestrator): pause a
    run at a step boundary, move one rank to another chip, resume it, checkpoint it now.

    Called on the engine thread and never blocking: a process fabric does the work in
    the background and shows its progress in ``run_status`` (and events ``job-paused``,
    ``rank-moved``, ``job-resumed``), which the orchestrator polls. ``RunStatus.step`` is
    always the last step every rank completed. The full contract (the ``RunState`` each
    call leaves the run in, errors, events) is in docs/health.md, "The RankMoves capability"."""

    def run_spec(self, job_id: str) -> WorkerGroupSpec | None:
        """The spec the run runs with now (``chips`` after its moves); None if unknown."""

    def pause(self, job_id: str, reason: str = ...) -> RunStatus:
        """RUNNING / RECOVERING -> PAUSED once every live rank holds the state of
        ``step`` (at once on the twin; the status returned may still show the pause
        pending). PAUSED: unchanged. Ended: ``ConflictError``."""

    def resume(self, job_id: str, *, from_step: int | None = None) -> RunStatus:
        """PAUSED -> RUNNING (the twin) or RECOVERING while moved ranks restore and the
        process group re-forms, then RUNNING; rolled back to ``from_step`` when given.
        RUNNING / RECOVERING: unchanged. Every chip must work (``ConflictError``)."""

    def move_rank(self, job_id: str, rank: int, new_chip: int) -> RunStatus:
        """A PAUSED run's rank ``rank`` runs on ``new_chip`` (healthy or degraded, free)
        from now on: ``chips[rank] == new_chip`` at once, the run stays PAUSED, the old
        chip is released; the rank's state comes from a live replica or the checkpoint."""


@runtime_checkable
class ResumableRuns(RankMoves, Protocol):
    """The twin: a run is a model whose state is its step counter on its chips, so its
    rank moves, restores and resumes take no time of their own (the recovery
    orchestrator waits their modelled costs, ``recovery.model.Timings``), and the twin
    driver runs its jobs. ``launch`` honours ``WorkerGroupSpec.options["start_step"]``.
    A process fabric never has ``step_time_fn``: its step times are measured."""

    @property
    def step_time_fn(self) -> Callable[..., float]:
        """How long one step of a run takes (the twin's step-time model)."""


@runtime_checkable
class FaultInjection(Protocol):
    """Faults on demand, and repair (the twin)."""

    def inject_fault(self, kind: str, chip: int | None = None, link: int | None = None,
                     **kw: Any) -> Any: ...

    def repair_chip(self, chip: int, reason: str = ...) -> None: ...

    def repair_link(self, link: int, reason: str = ...) -> None: ...


@runtime_checkable
class LinkControl(Protocol):
    """Set a link's state (the twin): a restarted control plane puts back the down and
    degraded links it had persisted, which a fresh fabric would otherwise show whole."""

    def set_link_state(self, link: int, state: LinkState | str, reason: str) -> None: ...


@runtime_checkable
class WorkerKill(Protocol):
    """Kill one rank's worker process (real fabrics): returns its pid when known."""

    def kill_worker(self, job_id: str, rank: int) -> int | None: ...


@dataclass(frozen=True)
class Adoption:
    """A gang that ran on through a control-plane restart, taken back by the new plane."""

    job_id: str
    chips: tuple[int, ...]  # rank r runs on chips[r]
    pids: tuple[int, ...]
    attempt: int
    replayed: int  # reports the plane missed, replayed from the supervisor's journal


@runtime_checkable
class Reattachable(Protocol):
    """Workers outlive the control plane (a supervisor or detached actors own them): a
    restarted plane adopts the gangs still running instead of resuming them from a
    checkpoint. ``adopt`` answers None, or a ConflictError's message, with nothing held for
    the job; ``discard_unadopted`` stops whatever the plane did not adopt (after its
    restore) and names those jobs."""

    def adopt(self, job_id: str, checkpoint_step: int | None) -> Adoption | None: ...

    def discard_unadopted(self) -> list[str]: ...


@runtime_checkable
class WorkerSlowdown(Protocol):
    """Slow one rank's worker down (fault injection on real fabrics: the ``slow-worker``
    fault): it computes ``factor`` times slower per sample until set back to 1."""

    def slow_worker(self, job_id: str, rank: int, factor: float) -> None: ...


@runtime_checkable
class ChipCheck(Protocol):
    """The fabric can health-check one chip on demand (real fabrics: its node is alive,
    its slot is usable), so a lost rank may go back onto the chip it ran on when no other
    chip is free. Answers from what the fabric already knows: it never blocks."""

    def check_chip_health(self, chip: int) -> str | None:
        """None when the chip passes; else why it does not (one sentence)."""


@runtime_checkable
class ClusterConnection(Protocol):
    """The fabric depends on an outside cluster it can lose and reach again (a Ray head):
    ``state`` ``connected`` or ``unreachable``, with the ``reason`` and ``since``. Answers
    from what the fabric already knows: it never blocks."""

    def connection_status(self) -> dict[str, Any]: ...


@runtime_checkable
class WorkerPlacement(Protocol):
    """Where chips and their workers live: the host of each chip (metrics' ``host``
    label) and, per chip running a rank, the worker's ``job_id``, ``rank``, ``node_id``,
    ``ip`` and ``pid`` (hardware describe)."""

    def chip_hosts(self) -> Sequence[str]: ...

    def chip_workers(self) -> Mapping[int, Mapping[str, Any]]: ...


@runtime_checkable
class GangPlacement(Protocol):
    """The fabric places a gang's workers across its machines itself (Ray placement
    groups): the job option ``placement`` names one of its strategies."""

    def placement_strategies(self) -> tuple[str, ...]: ...


@runtime_checkable
class FirmwareUpdate(Protocol):
    """Take one chip offline, update its firmware, bring it back."""

    def update_firmware(self, chip: int, version: str, *, duration_s: float = ...,
                        failure_p: float = ...) -> None: ...


@dataclass(frozen=True)
class CommandResult:
    """What one maintenance command did on one host: its exit code (None when it could
    not start or ran past its timeout, ``error`` then says which), the tail of its
    combined stdout and stderr, and how long it ran."""

    host: str
    exit_code: int | None
    output: str
    duration_s: float
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@runtime_checkable
class HostCommands(Protocol):
    """Run an admin's maintenance command on the host that holds some chips (maintenance
    rollouts: ``recovery.maintenance``). The local fabric runs it on this host; a fabric of
    several hosts on the one named. The command gets a scrubbed environment: ``env`` and
    a ``PATH``, never the control plane's own variables."""

    def chip_hosts(self) -> Sequence[str]: ...

    def host_command(self, chip: int, argv: Sequence[str], *, env: Mapping[str, str],
                     timeout_s: float) -> Callable[[], CommandResult]:
        """Prepared on the engine thread; the call that runs it blocks until the command
        ends, so the caller runs it on a thread of its own."""


@runtime_checkable
class TelemetrySource(Protocol):
    """Per-chip telemetry for health scans: ``chip_metrics`` carries the scan's names
    (temperatures, ECC, utilization, ...: NaN for what the fabric cannot measure) and
    ``telemetry_metrics`` names the keys it really measures (the twin: all of them; a
    worker fabric: CPU, memory, step time, samples/s, heartbeat age; neuron: what
    neuron-monitor reports). Consumers decide from that set, never from the fabric."""

    def telemetry_metrics(self) -> frozenset[str]: ...


@runtime_checkable
class Closeable(Protocol):
    """Holds processes, threads or connections that must be released."""

    def close(self) -> None: ...


def close_fabric(fabric: Fabric) -> None:
    """Release what a fabric holds (worker processes, a Ray instance); the twin holds nothing."""
    if isinstance(fabric, Closeable):
        fabric.close()


@runtime_checkable
class Disposable(Protocol):
    """Keeps something that outlives the control plane on purpose and belongs to this
    cluster alone (a private Ray head): ``close`` (a shutdown) may leave it for the next
    plane, ``dispose`` (the cluster is deleted) releases it as well."""

    def dispose(self) -> None: ...


def delete_fabric(fabric: Fabric) -> None:
    """Release everything a deleted cluster's fabric holds, what outlives a shutdown included."""
    if isinstance(fabric, Disposable):
        fabric.dispose()
    else:
        close_fabric(fabric)


class FabricFactory(Protocol):
    """Builds one cluster's fabric; the composition root hands one to the control plane
    (``fabric.factory.make_fabric`` by default). ``options``: ``workdir`` (the cluster's
    own directory, stable across restarts), ``ray_address``, and ``neuron_ls`` /
    ``neuron_monitor`` (fabric neuron's commands). ``timeline`` is the plane's
    (``engine.timeline.Timeline``)."""

    def __call__(self, kind: str, topology: Topology, timeline: Timeline, spares: tuple[int, ...], seed: int,
                 *, options: Mapping[str, Any] | None = None) -> Fabric: ...


@runtime_checkable
class Rebalanceable(Protocol):
    """The fabric applies a load rebalancing to a running data-parallel job, between steps.

    ``shares``: the relative work of each rank (rank r on ``chips[r]``; e.g. micro-batches,
    every share >= 1), which the fabric turns into its own unit (the twin: compute per
    rank; worker fabrics: samples of the global batch, gradients weighted so the update
    equals the even split's). ``ring``: the job's chips in the order its gradient ring
    should visit them (a fabric without a ring it can choose records it)."""

    def set_work_split(self, job_id: str, shares: Sequence[int]) -> None: ...

    def set_ring_order(self, job_id: str, ring: Sequence[int]) -> None: ...


@runtime_checkable
class LinkTraffic(Protocol):
    """The fabric knows the collective traffic its running jobs put on its links, so
    placement can keep a new job's ring off links already in use (``scheduler.traffic``)."""

    def link_traffic(self) -> np.ndarray:
        """float [2 * links]: ring edges of the running jobs on each directed link
        (``2 * link + direction``, links indexed as ``link_states()``; 0 where idle).
        Read-only; answers from what the fabric already knows: it never blocks."""


# --- probes: acceptance checks ask the fabric to measure (podfleet.advisor.verify) -------------


@dataclass(frozen=True)
class MatmulRate:
    """One chip's timed matmul: achieved dense TFLOP/s for ``dtype``; ``clock_factor`` is
    the share of nominal clock the chip ran at (1.0 where the device does not say)."""

    chip: int
    dtype: str
    tflops: float
    clock_factor: float = 1.0
    wrong: int = 0  # result elements that disagree with a reference product


@dataclass(frozen=True)
class CollectiveRow:
    """One row of an nccom-test / nccl-tests style table. ``algbw`` = bytes / time;
    ``busbw`` scales it by the op's bus factor (all-reduce 2(n-1)/n; all-gather,
    reduce-scatter, all-to-all (n-1)/n; send/recv 1), so it compares with link speed."""

    op: str  # all-reduce | all-gather | reduce-scatter | all-to-all | send-recv
    group: str  # the communicator's name (e.g. "x", "z", "pod", "local")
    ranks: int
    size_bytes: int
    count: int  # elements
    type: str  # element type, e.g. "float32"
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int  # elements that differ from the expected result (-1: not checked)


COLLECTIVE_OPS: tuple[str, ...] = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send-recv")


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' bus bandwidth factor of ``op`` over ``ranks`` ranks."""
    if ranks <= 1:
        return 1.0
    if op == "all-reduce":
        return 2.0 * (ranks - 1) / ranks
    if op == "send-recv":
        return 1.0
    return (ranks - 1) / ranks


@runtime_checkable
class ComputeProbe(Protocol):
    """The fabric can time a matmul on each of its chips (the twin from its chip model,
    throttling included; worker fabrics with a real kernel on each worker's device).

    Two phases, so a probe that takes seconds never holds the engine: ``matmul_probe``
    reads what it needs now (engine thread) and returns the measurement, a call that
    may run on any thread."""

    def matmul_dtypes(self) -> tuple[str, ...]:
        """The dtypes its devices multiply natively (e.g. ("bf16", "fp8"))."""

    def matmul_probe(self, chips: Sequence[int], dtype: str) -> Callable[[], list[MatmulRate]]: ...


@runtime_checkable
class CollectiveProbe(Protocol):
    """The fabric can run (or model) collectives over groups of its chips; two phases
    as ``ComputeProbe``."""

    def collective_groups(self) -> Mapping[str, tuple[int, ...]]:
        """Named communicators worth measuring (the twin: one ring per torus axis and the
        whole pod; worker fabrics: all workers), chips in rank order."""

    def collective_probe(self, group: str, ops: Sequence[str],
                         sizes_bytes: Sequence[int]) -> Callable[[], list[CollectiveRow]]: ...


@runtime_checkable
class HardwareErrors(Protocol):
    """The fault log: errors the fabric observed, oldest first, bounded. The twin's are
    NEURON_HW_ERR style ``fault`` events on a chip or link; neuron's are the
    ``chip-failed`` / ``chip-degraded`` events its monitor reports read from; worker
    fabrics' are ``worker-fault`` events (``detail["observed"]``: hang, signal, oom-kill,
    exit). Diagnosis reads the evidence they carry (where, when, counters, signals),
    never a label naming the fault an injector meant (the twin's ``detail["fault"]``)."""

    def hardware_errors(self) -> list[FabricEvent]: ...
