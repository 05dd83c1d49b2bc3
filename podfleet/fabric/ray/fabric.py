"""``RayFabric``: a job's gang as Ray actors in one placement group, on any Ray cluster.

Chips are units of a Ray resource: ``CPU`` slots, ``GPU`` devices or ``neuron_cores``
(Trainium; Ray sets ``NEURON_RT_VISIBLE_CORES`` for each actor). A gang is one placement
group with a bundle per rank (PACK or SPREAD; all bundles or none), and one ``WorkerActor``
per bundle runs ``training.worker.run_worker``: rank 0's actor picks the rendezvous port
on its node, every rank joins torch.distributed there (gloo on CPU, NCCL on CUDA).

Threads: ``launch``/``stop``/``kill_worker`` run on the engine thread and never block on
Ray (the launch path is ``gang.py``); a starter thread per job waits for the placement
group and the rendezvous; one poller thread drains every actor's reports, samples CPU and
memory, notices deaths and hangs; a lost rank moves alone (``rankmove.py``). Events reach
subscribers on the engine thread (``timeline.submit``). Ray is imported lazily.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from podfleet.errors import (
    ConflictError,
    InfeasibleError,
    InvalidInputError,
    NotFoundError,
    UnknownNameError,
)
from podfleet.fabric.base import (
    Adoption,
    ChipState,
    CommandResult,
    FabricEvent,
    LinkState,
    RunStatus,
    WorkerGroupSpec,
    check_chip_transition,
)
from podfleet.fabric.ray import control, gang, reattach, supervisor, telemetry
from podfleet.fabric.ray.auth import auth_error, auth_refused
from podfleet.fabric.ray.faultlog import FaultLog
from podfleet.fabric.ray.gang import ray_topology
from podfleet.fabric.ray.hostcmd import node_task
from podfleet.fabric.ray.jobs import (
    STRATEGIES,
    TERMINAL,
    RayJob,
    RayState,
    RunState,
)
from podfleet.fabric.ray.nodes import NodeMap, RayNode
from podfleet.fabric.ray.probe import (
    GCS_RECONNECT_ENV,
    GCS_RECONNECT_TIMEOUT_S,
    gcs_hostport,
    gcs_unreachable,
    probe_address,
)
from podfleet.fabric.ray.runner import JobRunner
from podfleet.hardware.topology import Topology
from podfleet.security.redact import Redactor

RESOURCES = ("CPU", "GPU", "neuron_cores")
NODE_LOST_PREFIX = "Ray node "  # a chip's reason when its node left (nodes_joined brings it back)
def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def connected_address(ray: Any) -> str | None:
    """The address this process's Ray connection was opened with: a fabric's own (None: a
    private local instance), else, opened by the embedding program, the GCS Ray reports."""
    if _connection.started:
        return _connection.address
    with contextlib.suppress(Exception):  # an old Ray without the runtime context's address
        return str(ray.get_runtime_context().gcs_address) or None
    return None


def same_cluster(requested: str | None, connected: str | None) -> bool:
    """Whether a fabric asking for ``requested`` may share a connection to ``connected``.
    ``auto`` means whatever this machine runs; otherwise the strings or their GCS host:port
    must agree. ``users`` is not consulted: a fabric still in ``_setup`` (after the connect,
    before it counts itself) holds the connection as much as a deployed one."""
    if requested == connected or requested == "auto":
        return True
    want, have = gcs_hostport(requested), gcs_hostport(connected)
    return want is not None and want == have


class _Connection:
    """A process holds one Ray connection; fabrics share it (Ray allows no second one)."""

    started = False  # a RayFabric called ray.init (else the embedding program did)
    address: str | None = None  # what it was called with (None: a private local instance)
    users = 0
    kwargs: dict[str, Any] = {}  # what ray.init was called with (a reconnect repeats it)
    generation = 0  # bumped by each reconnect: a fabric that saw an older one rebuilds its view


_connection = _Connection()
# Held while ray.init runs: fabrics are built on the control plane's connection threads,
# and two ray.init calls at once would race for the process's one connection. A build
# that hangs in ray.init keeps it: later ones give up after CONNECT_WAIT_S with a reason.
_connect_lock = threading.Lock()
CONNECT_WAIT_S = 30.0
def _import_ray() -> Any:
    # Ray's C++ failure-signal handler (read when Ray loads) would take SIGTERM from the
    # control plane's own, uvicorn's graceful shutdown: `podfleet up` then died with SIGABRT
    # instead of stopping its jobs and closing its store. Set it to 0 to keep Ray's.
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    # Read by Ray's core worker at ray.init: a lost head must not end the control plane.
    os.environ.setdefault(GCS_RECONNECT_ENV, str(GCS_RECONNECT_TIMEOUT_S))
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise InfeasibleError(
            "fabric 'ray' needs the ray package: pip install 'podfleet[ray]'", field="fabric"
        ) from None


class RayFabric:
    """Capabilities: ``Introspection``, ``WorkerKill``, ``Closeable``, ``ChipCheck``,
    ``WorkerPlacement``, ``GangPlacement``, ``ClusterConnection``, ``HostCommands``,
    ``TelemetrySource`` (``telemetry``), ``HardwareErrors`` (``faultlog``), ``Reattachable``
    (gangs are detached actors in ``namespace``: ``supervisor.py``, ``reattach.py``), and by
    control files (``control``) ``Rebalanceable``, ``WorkerSlowdown``, ``OnDemandCheckpoints``.

    ``outlive_plane``: ``close`` leaves running gangs running (the next plane adopts them
    or stops them), for a Ray cluster that outlives this process; otherwise it stops them.

    ``workdir`` holds each job's directory (and default checkpoint dir); ``key_file``, the
    checkpoint KEK every worker gets unless the job names its own (with a multi-machine
    Ray cluster both must be on shared storage)."""

    kind = "ray"

    def __init__(
        self,
        address: str | None = None,
        timeline: Any = None,
        n_chips: int | None = None,
        resource: str = "CPU",
        spares: Iterable[int] = (),
        *,
        topology: Topology | None = None,
        per_chip: float = 1.0,
        chip_type: str = "trn2",  # neuron_cores only: CPU / GPU slots are "cpu" / "cuda"
        workdir: str | None = None,
        key_file: str | None = None,
        placement: str = "pack",
        placement_timeout_s: float = 60.0,
        hang_timeout_s: float = 30.0,
        poll_interval_s: float = 0.2,
        init_kwargs: Mapping[str, Any] | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        namespace: str = supervisor.namespace_for("default"),
        outlive_plane: bool = False,
    ) -> None:
        if resource not in RESOURCES:
            raise UnknownNameError("ray resource", resource, RESOURCES, field="resource")
        if placement.lower() not in STRATEGIES:
            raise UnknownNameError("placement strategy", placement, STRATEGIES, field="placement")
        if not per_chip > 0:
            raise InvalidInputError(f"per_chip must be positive, got {per_chip}", field="per_chip")
        ray = _import_ray()
        self.key_file = key_file
        # What leaves the fabric from a worker passes this first (security.redact).
        self.redactor = Redactor.for_server(key_files=[key_file])
        self.address = address
        self.resource = resource
        self.per_chip = float(per_chip)
        self.placement = placement.lower()
        self.placement_timeout_s = placement_timeout_s
        self.hang_timeout_s = hang_timeout_s
        self.poll_interval_s = poll_interval_s
        self.namespace = namespace
        self.outlive_plane = outlive_plane
        # e.g. {"env_vars": {"PODFLEET_CHECKPOINT_KEY": ...}, "py_modules": [podfleet]} for
        # a remote cluster whose nodes lack podfleet or the key.
        self.runtime_env = dict(runtime_env) if runtime_env else None
        self._closed = False
        # The GCS this fabric watches (None: Ray's own liveness only), and why it cannot be
        # reached now (None while it can): set by the poller, read by every thread.
        self.gcs = gcs_hostport(address)
        self.unreachable: str | None = None
        self.unreachable_since: float | None = None  # wall clock (RFC 3339 in views)
        self._generation = _connection.generation
        if address is not None and not ray.is_initialized():
            # Before the lock: a refused port fails at once, even while another cluster's
            # connection hangs in ray.init holding it.
            probe_address(address)
        if not _connect_lock.acquire(timeout=CONNECT_WAIT_S):
            raise InfeasibleError(f"cannot connect to Ray at {address!r}: an earlier connection attempt of this "
                                  "server is still waiting (a Ray address that does not answer holds the "
                                  "process's one Ray connection until the server restarts)", field="ray_address")
        auth = auth_error(ray)
        try:
            self._connect(ray, address, n_chips, resource, init_kwargs)
        finally:
            _connect_lock.release()
        try:
            self._setup(ray, resource, n_chips, topology, spares, chip_type, workdir)
        except BaseException as exc:
            if _connection.started and not _connection.users:
                ray.shutdown()
                _connection.started = False
            if auth and isinstance(exc, auth):  # a token the cluster rejects after the connect
                raise auth_refused(address, exc) from None
            raise
        _connection.users += 1
        if timeline is not None:
            self.attach(timeline)

    @staticmethod
    def _connect(ray: Any, address: str | None, n_chips: int | None, resource: str,
                 init_kwargs: Mapping[str, Any] | None) -> None:
        if ray.is_initialized():
            connected = connected_address(ray)
            # None with a connection the embedding program opened: use that one, as asked.
            if (address is not None or _connection.started) and not same_cluster(address, connected):
                raise ConflictError(
                    f"cannot connect to Ray at {address or 'a private local Ray'!r}: this server is already "
                    f"connected to the Ray cluster at {connected or 'its private local Ray'} and a process holds "
                    "one Ray connection (ray.init); use that address, or run another podfleet server for the "
                    "other Ray cluster", field="ray_address")
            return
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        if address is None:
            # A private local instance (tests, a laptop): as small as Ray allows.
            kwargs.update(num_cpus=max(2, n_chips or 2) if resource == "CPU" else 2,
                          object_store_memory=100 * 1024 * 1024)
        kwargs.update(init_kwargs or {})
        auth = auth_error(ray)
        try:
            ray.init(address=address, **kwargs)
        except auth as exc:  # before RuntimeError: a missing token has a fix to name
            raise auth_refused(address, exc) from None
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InfeasibleError(f"cannot connect to Ray at {address!r}: {exc}", field="ray_address") from None
        _connection.started = True
        _connection.address = address
        _connection.kwargs = kwargs

    def _setup(self, ray: Any, resource: str, n_chips: int | None, topology: Topology | None,
               spares: Iterable[int], chip_type: str, workdir: str | None) -> None:
        available = ray.cluster_resources().get(resource, 0.0)
        capacity = math.floor(available / self.per_chip + 1e-9)
        if topology is not None:
            n_chips = topology.n_chips
        if n_chips is None:
            n_chips = capacity
        if n_chips < 1:
            raise InfeasibleError(
                f"the Ray cluster has {available:g} {resource}; a chip needs {self.per_chip:g}", field="resource"
            )
        if n_chips > capacity:
            raise InfeasibleError(
                f"n_chips {n_chips} needs {n_chips * self.per_chip:g} {resource}, "
                f"the Ray cluster has {available:g}", field="n_chips", allowed=f"1-{capacity}",
            )
        self.n_chips = n_chips
        self.topology: Topology = ray_topology(resource, n_chips, topology, chip_type)
        self.spares = tuple(int(s) for s in spares)
        for s in self.spares:
            self.topology.check_chip(s)
        self.workdir = workdir or os.path.join(tempfile.gettempdir(), "podfleet-ray")
        self.gang = gang.GangConfig(resource, self.per_chip, self.placement, self.workdir, self.key_file,
                                    self.runtime_env)
        self.nodes = NodeMap(ray.nodes(), resource, self.per_chip, n_chips)
        self._node_mem: dict[str, float] = {}  # node id -> its memory, as its workers report it
        self._states = [ChipState.HEALTHY] * n_chips
        self._reasons: dict[int, str] = {}
        self.state = RayState(ray)
        self.faults = FaultLog()
        self._subscribers: list[Callable[[FabricEvent], None]] = []
        self._t0 = time.monotonic()
        self.timeline: Any = None
        self._runner = JobRunner(self.state, self)

    def bind_devices(self, topology: Topology, visible_cores: Sequence[str]) -> None:
        """Chips are Trainium devices on their nodes (a neuron cluster's hosts,
        ``fabric/neuron/hosts.py``): ``topology`` is their wiring, and a rank on chip c sees
        ``visible_cores[c]`` as ``NEURON_RT_VISIBLE_CORES``. Before any launch."""
        if topology.n_chips != self.n_chips or len(visible_cores) != self.n_chips:
            raise InvalidInputError(f"{topology.n_chips} devices and {len(visible_cores)} core sets do not match "
                                    f"the {self.n_chips} chips of the Ray cluster's {self.resource}", field="chips")
        self.topology = topology
        self.gang = dataclasses.replace(self.gang, chip_cores=tuple(visible_cores))

    # --- Fabric protocol ----------------------------------------------------------------------
    def attach(self, timeline: Any) -> None:
        self.timeline = timeline
        self._runner.start()

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> None:
        self._subscribers.append(callback)

    def chip_states(self) -> list[ChipState]:
        return list(self._states)

    def set_chip_state(self, chip: int, state: ChipState, reason: str) -> None:
        """A chip returning to service (``chip repair``) whose node is gone moves to a live
        node with room first; with none, it stays out of service and says so."""
        self.topology.check_chip(chip)
        check_chip_transition(self._states[chip], state)
        if state in (ChipState.HEALTHY, ChipState.DEGRADED):
            with self.state.lock:
                if self.nodes.lost(chip):
                    old = self.nodes.node_of(chip)
                    node = self.nodes.remap(chip)
                    if node is None or not node.alive:
                        raise ConflictError(f"chip {chip}'s Ray node {old.short if old else '?'} is gone and no "
                                            f"live Ray node has {self.per_chip:g} {self.resource} free for it "
                                            "(start a raylet, then repair it again)", field="chip")
                    reason = f"{reason}; now on Ray node {node.short} ({node.ip})"
        self._states[chip] = state
        self._reasons[chip] = reason
        if state is ChipState.ISOLATED:
            # Taken out of service under its rank (a drain, a maintenance rollout): the rank
            # moves alone (rankmove.py), as the local fabric's evicted slot's rank does.
            self._runner.evict(chip)

    def link_states(self) -> list[LinkState]:
        return [LinkState.UP] * len(self.topology.links)

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        return telemetry.chip_metrics(self.state, self.nodes, self.n_chips, self._node_mem)

    def telemetry_metrics(self) -> frozenset[str]:
        """TelemetrySource: what the actors report (ray/telemetry.py); the rest is NaN."""
        return telemetry.MEASURED

    def hardware_errors(self) -> list[FabricEvent]:
        """HardwareErrors: worker exits, actor and node deaths, hangs (ray/faultlog.py)."""
        return self.faults.all()

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        return telemetry.link_metrics(self.topology.links)

    def launch(self, group: WorkerGroupSpec) -> None:
        """Validate and start a gang; returns at once (placement happens in the background)."""
        job = self.gang.new_job(group, self.topology)
        gang.admit(self.state, self._states, job)
        self._runner.start()
        self._runner.start_job(job)

    def stop(self, job_id: str) -> None:
        if self._runner.stop_job(self._job(job_id)):
            self.emit("job-stopped", job_id=job_id)

    # --- capabilities: WorkerKill, Introspection, Closeable ------------------------------------
    @property
    def jobs(self) -> dict[str, RayJob]:
        return self.state.jobs

    def check_chip_health(self, chip: int) -> str | None:
        """ChipCheck: the chip is healthy, no gang holds it, and its node is alive in the
        poller's latest view of the cluster (never a Ray call: the engine thread asks)."""
        self.topology.check_chip(chip)
        return gang.chip_trouble(self.state, self.nodes, self._states, chip, self.unreachable)

    def chip_hosts(self) -> list[str]:
        with self.state.lock:
            return [self.nodes.host(c) for c in range(self.n_chips)]

    def host_command(self, chip: int, argv: Sequence[str], *, env: Mapping[str, str],
                     timeout_s: float) -> Callable[[], CommandResult]:
        """HostCommands: a task pinned to the chip's Ray node (``ray/hostcmd.py``); refused
        at once while the Ray cluster is unreachable or the chip has no live node."""
        self.topology.check_chip(chip)
        with self.state.lock:
            node = self.nodes.node_of(chip)
        return node_task(self.state.ray, chip, node, self.unreachable, argv, env, timeout_s)

    def chip_workers(self) -> dict[int, dict[str, Any]]:
        return gang.chip_workers(self.state)

    def placement_strategies(self) -> tuple[str, ...]:
        return tuple(STRATEGIES)

    def warm_ready(self) -> int:  # idle standby actors done with their imports (standby.py)
        return self._runner.standbys.ready()

    def node_died(self, node: RayNode) -> None:
        """A node holding chips left the cluster (poller): its chips fail (engine thread)."""
        for c in self.nodes.chips_on(node.node_id):
            if self._states[c] in (ChipState.HEALTHY, ChipState.DEGRADED, ChipState.UPDATING):
                reason = f"{NODE_LOST_PREFIX}{node.short} ({node.ip}) lost"
                self.set_chip_state(c, ChipState.FAILED, reason)
                self._publish("chip-failed", None, c, {"reason": reason, "node_id": node.node_id})

    def nodes_joined(self, nodes: Iterable[RayNode]) -> None:
        """Nodes with room joined (a replacement raylet, a reconnect): chips whose node was
        lost move onto them and return to service (engine thread), so waiting ranks run."""
        names = ", ".join(f"{n.short} ({n.ip})" for n in nodes)
        for c in range(self.n_chips):
            # Only what the node's loss took out of service comes back by itself; a chip an
            # operator isolated (drained, cordoned) waits for its operator.
            by_loss = self._reasons.get(c, "").startswith(NODE_LOST_PREFIX)
            with self.state.lock:
                if not self.nodes.lost(c):
                    continue
                node = self.nodes.remap(c)
            if node is None or self.nodes.lost(c):
                continue
            reason = f"mapped to Ray node {node.short} ({node.ip}), which joined"
            if by_loss and self._states[c] is ChipState.FAILED:
                self.set_chip_state(c, ChipState.ISOLATED, reason)
            if by_loss and self._states[c] is ChipState.ISOLATED:
                self.set_chip_state(c, ChipState.HEALTHY, reason)
            self._publish("chip-state", None, c, {"state": self._states[c].value, "reason": reason,
                                                  "node_id": node.node_id, "joined": names})

    def link_lost(self, why: str) -> None:
        """The poller cannot reach the GCS: the cluster is unreachable until it reconnects."""
        addr = self.address
        self.unreachable = f"the Ray cluster at {addr} is unreachable ({why}); reconnecting"
        self.unreachable_since = time.time()
        self.emit("fabric-degraded", reason=self.unreachable, address=addr)

    def reconnect(self) -> bool:
        """Poller thread, while unreachable: when the GCS answers again, start a new Ray
        session (once per process, whichever fabric gets there first) and rebuild this
        fabric's view of the nodes. False while the cluster cannot be reached."""
        if self.gcs is not None:
            why = gcs_unreachable(self.gcs)
            if why is not None:
                self.unreachable = f"the Ray cluster at {self.address} is unreachable ({why}); reconnecting"
                return False
        ray = self.state.ray
        if not _connect_lock.acquire(timeout=CONNECT_WAIT_S):
            return False
        try:
            if _connection.generation == self._generation:
                # The old session's core worker must not talk to a new GCS (Ray aborts on
                # "WrongClusterID"): drop it, then connect as at the start.
                with contextlib.suppress(Exception):
                    ray.shutdown()
                try:
                    ray.init(address=self.address, **_connection.kwargs)
                except Exception as exc:  # not ready yet: the poller tries again later
                    self.unreachable = (f"the Ray cluster at {self.address} is unreachable (reconnect failed: "
                                        f"{str(exc).strip().splitlines()[0][:200] if str(exc).strip() else exc}); "
                                        "reconnecting")
                    return False
                _connection.generation += 1
            self._generation = _connection.generation
        finally:
            _connect_lock.release()
        try:
            records = ray.nodes()
        except Exception:
            return False
        with self.state.lock:
            changes = self.nodes.apply(records)
        down = self.unreachable_since
        self.unreachable = None
        self.unreachable_since = None
        alive = len([n for n in self.nodes.nodes.values() if n.alive])
        self.emit("fabric-recovered", address=self.address, down_s=round(time.time() - down, 3) if down else None,
                  reason=f"reconnected to the Ray cluster at {self.address}"
                         + (f" after {time.time() - down:.1f} s" if down else "") + f"; {alive} Ray node(s) alive")
        for node in changes.died:
            self.on_engine(self.node_died, node)
        self.on_engine(self.nodes_joined, changes.joined)
        return True

    def connection_status(self) -> dict[str, Any]:
        """Whether the Ray cluster is reachable, since when not, and its nodes."""
        since = self.unreachable_since
        with self.state.lock:
            nodes = self.nodes.describe()
        return {"state": "unreachable" if self.unreachable else "connected", "reason": self.unreachable or "",
                "since": _rfc3339(since) if since is not None else None, "address": self.address, "nodes": nodes}

    def kill_worker(self, job_id: str, rank: int) -> int | None:
        """Fault injection: kill one rank's actor (ray.kill); detected like any death.
        Returns the actor process's pid when its node reported it."""
        return self._runner.kill_rank(self._job(job_id), rank)

    # --- capabilities: Rebalanceable, WorkerSlowdown, OnDemandCheckpoints (ray/control.py) ----
    def set_work_split(self, job_id: str, shares: Sequence[int]) -> None:
        """Give rank r ``shares[r]`` / sum of the global batch from the gang's next step."""
        with self.state.lock:
            control.set_work_split(self._job(job_id), shares)

    def set_ring_order(self, job_id: str, ring: Sequence[int]) -> None:
        """gloo and NCCL pick their own rings from the process group: recorded only."""
        with self.state.lock:
            self._job(job_id).log.append(f"[fabric] ring order {list(ring)} noted (the collective library's own)")

    def slow_worker(self, job_id: str, rank: int, factor: float) -> None:
        """Fault injection: rank ``rank`` computes ``factor`` times slower per sample from
        its next step (1.0 restores it)."""
        with self.state.lock:
            control.slow_worker(self._job(job_id), rank, factor)

    def checkpoint_now(self, job_id: str) -> int | None:
        """Ask the gang to save at its next step boundary and hold there; the last step
        every rank completed (the checkpoint reported holds at least it)."""
        with self.state.lock:
            job = self.state.jobs.get(job_id)
            return control.checkpoint_now(job) if job is not None else None

    def run_status(self, job_id: str) -> RunStatus | None:
        with self.state.lock:
            job = self.state.jobs.get(job_id)
            return job.run_status(self.redactor) if job is not None else None

    def run_logs(self, job_id: str) -> list[str]:
        with self.state.lock:
            job = self.state.jobs.get(job_id)
            return self.redactor.lines(job.log) if job is not None else []

    def job_status(self, job_id: str) -> dict[str, Any]:
        with self.state.lock:
            return self._job(job_id).status(self.redactor)

    def close(self) -> None:
        """Stop every job and the poller; disconnect from Ray when the last fabric that
        shares this process's connection closes and a fabric opened it."""
        if self._closed:
            return
        self._closed = True
        for job_id, job in list(self.state.jobs.items()):
            # A gang that runs (detached) is left to the next plane; one still being
            # placed or started has no supervisor yet, so it is stopped.
            if job.state not in TERMINAL and not (self.outlive_plane and job.state is RunState.RUNNING):
                self.stop(job_id)
        self._runner.close()
        _connection.users -= 1
        if _connection.users == 0 and _connection.started and self.state.ray.is_initialized():
            self.state.ray.shutdown()
            _connection.started = False

    # --- Reattachable -------------------------------------------------------------------------
    def adopt(self, job_id: str, checkpoint_step: int | None) -> Adoption | None:
        """Take back ``job_id``'s gang when its detached actors ran on through a restart
        of the control plane (``reattach.py``); None when there is none to take. Ray is
        asked with timeouts (``supervisor.LOOKUP_TIMEOUT_S``): this runs on the engine
        thread while the plane reloads."""
        if self.unreachable is not None:
            raise ConflictError(self.unreachable, field="job_id")
        got = reattach.adopt(self.state, self._runner, self.namespace, self.n_chips, job_id, checkpoint_step)
        if got is not None:
            self.emit("job-adopted", job_id=job_id, chips=list(got.chips), pids=list(got.pids), attempt=got.attempt,
                      replayed=got.replayed)
        return got

    def discard_unadopted(self) -> list[str]:
        """Kill the detached actors (and placement groups) in this cluster's namespace that
        belong to no gang this fabric holds: jobs the plane did not adopt, or ended."""
        if self.unreachable is not None:
            return []
        return supervisor.discard(self.state.ray, self.namespace, reattach.live_names(self.state))

    # --- helpers the runner uses ------------------------------------------------------------
    def _job(self, job_id: str) -> RayJob:
        job = self.state.jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} is not on this fabric", field="job_id")
        return job

    def on_engine(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn`` on the engine thread (inline when no timeline is attached)."""
        if self.timeline is not None:
            self.timeline.submit(fn, *args)
        else:
            fn(*args)

    def emit(self, kind: str, *, job_id: str | None = None, chip: int | None = None, **detail: Any) -> None:
        """Publish an event on the engine thread (or inline when no timeline is attached)."""
        if self.timeline is not None:
            self.timeline.submit(self._publish, kind, job_id, chip, detail)
        else:
            self._publish(kind, job_id, chip, detail)

    def _publish(self, kind: str, job_id: str | None, chip: int | None, detail: dict[str, Any]) -> None:
        t = float(self.timeline.now) if self.timeline is not None else time.monotonic() - self._t0
        detail = {k: self.redactor.redact(v) if isinstance(v, str) else v for k, v in detail.items()}
        ev = FabricEvent(kind, t, chip=chip, job_id=job_id, detail=detail)
        self.faults.observe(ev, self.state)
        for cb in self._subscribers:
            cb(ev)
