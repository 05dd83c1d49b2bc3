"""The control plane: one writer on the engine thread; commands in, read models out.

See ``podfleet.control`` for the public API.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import threading
from collections.abc import Callable
from typing import ParamSpec, Protocol, TypeVar

from podfleet.control import chips, faults, hardwareviews, podloss
from podfleet.control.balancing import ClusterBalancer
from podfleet.control.connect import (
    DEFAULT_CONNECT_TIMEOUT_S,
    ConnectingCluster,
    pending_deployment,
    target,
)
from podfleet.control.connections import Connections
from podfleet.control.deploy import start_deployment
from podfleet.control.events import FabricEvents, save_health
from podfleet.control.fabricaccess import FabricAccess
from podfleet.control.faults import KILL_WORKER, SLOW_WORKER
from podfleet.control.hardwareviews import ChipFilter
from podfleet.control.ids import new_id, resolve_ref
from podfleet.control.jobmetrics import JobMetrics
from podfleet.control.jobs import JobManager
from podfleet.control.jobtable import JobTable
from podfleet.control.lifecycle import ClusterState
from podfleet.control.logbuf import LogBuffer
from podfleet.control.priorities import PriorityClasses
from podfleet.control.queues import QueueCommands
from podfleet.control.readout import FabricReadout
from podfleet.control.reservations import ReservationCommands
from podfleet.control.runtime import ClusterRuntime, HealthSource
from podfleet.control.scheduling import cluster_spares
from podfleet.control.specs import ClusterSpec
from podfleet.control.workdir import cluster_workdir
from podfleet.engine.timeline import Timeline
from podfleet.errors import (
    ConflictError,
    NotFoundError,
    PodfleetError,
)
from podfleet.fabric.base import (
    DEFAULT_HANG_RESTARTS,
    Fabric,
    FabricFactory,
    close_fabric,
    delete_fabric,
)
from podfleet.hardware.topology import Topology
from podfleet.scheduler.extension import ShapePlanner
from podfleet.store.protocol import StoreProtocol
from podfleet.store.records import ClusterRecord, ClusterStatus
from podfleet.wire import JsonObject

T = TypeVar("T")
P = ParamSpec("P")



class HealthPort(Protocol):
    """What the plane reads of the health service (``podfleet.health.service``)."""

    def source(self, cluster_id: str) -> HealthSource | None:
        """The cluster's chip/link health for its hardware snapshot, once scanned."""


def request_hash(body: JsonObject) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()



class ControlPlane:
    def __init__(
        self,
        store: StoreProtocol,
        timeline: Timeline,
        *,
        fabric_factory: FabricFactory,
        planner: ShapePlanner | None = None,
        telemetry_interval_s: float = 1.0,
        default_fabric: str = "sim",
        workdir: str | None = None,
        balance_interval_s: float | None = None,
        schedule_interval_s: float = 10.0,
        fabric_access: FabricAccess | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        hang_restarts: int = DEFAULT_HANG_RESTARTS,
        reaches_out: Callable[[str], bool] | None = None,
    ) -> None:
        self.store = store
        # Group commit: commands queued together commit in one store transaction and are
        # acknowledged after it (Timeline.drain).
        timeline.batch = store.transaction
        # Real fabrics keep checkpoints, worker logs and keys under <workdir>/clusters/<id>
        # (default $PODFLEET_WORKDIR or ~/.podfleet/work).
        self.workdir = workdir
        self.tl = timeline
        self._summaries: dict[str, tuple[object, bytes]] = {}  # cluster -> (snapshot, its summary JSON)
        # Given by the composition root (``compose.build``): the plane builds no fabric of its
        # own and imports no fabric implementation, not even the factory that names them.
        self.fabric_factory = fabric_factory
        # Which fabric kinds reach outside this process (Ray, neuron-ls) and so are built on
        # their own thread when serving (``fabric.factory.reaches_out``, wired by compose).
        self.reaches_out: Callable[[str], bool] = reaches_out or (lambda kind: False)
        # How each cluster's scheduler plans ``parallelism: auto`` jobs per block shape (the
        # scheduler's ``ShapePlanner`` port; None: shapes by communication cost alone).
        self.planner = planner
        self.telemetry_interval_s = telemetry_interval_s
        # Load monitor sampling (None: the telemetry interval; see control.balancing) and
        # the periodic queue pass for aging (submits, finishes and faults run one at once).
        self.balance_interval_s = balance_interval_s
        self.schedule_interval_s = schedule_interval_s
        self.default_fabric = default_fabric
        timeline.anchor_wall()  # timestamps: the wall clock from here (``Timeline.wall_at``)
        self.clusters: dict[str, ClusterRuntime] = {}  # live clusters by id
        self.names: dict[str, str] = {}  # live cluster name -> id (connecting ones too)
        # Clusters whose fabric is being built off the engine thread, or failed to be
        # (``control.connect``); a connected one moves to ``clusters``.
        self.connecting: dict[str, ConnectingCluster] = {}
        # Which Ray addresses and host commands a spec may name (PODFLEET_RAY_ADDRESSES,
        # PODFLEET_NEURON_COMMANDS), and the builds of fabrics that reach outside.
        self.access = fabric_access or FabricAccess.from_env()
        # Fabrics built off the engine thread, and clusters reloaded at a restart (``control.connections``).
        self.connections = Connections(self, connect_timeout_s)
        # Restarts of a job whose ranks stopped heartbeating before it fails as its code's
        # fault (PODFLEET_HANG_RESTARTS): given to the fabrics that restart ranks themselves
        # and read by the process driver, which relaunches the others.
        self.hang_restarts = hang_restarts
        self.table = JobTable(store, self.now)  # the one writer of job records
        self.jobs = JobManager(self, self.table)
        self.queues = QueueCommands(self)  # CreateQueue ... DeleteQueue (``control.queues``)
        # CreateReservation ... DeleteReservation (``control.reservations``)
        self.reservations = ReservationCommands(self)
        self.priorities = PriorityClasses(self)  # named priorities (``control.priorities``)
        # Loss, tokens/s and step time over each job's run (GetJobMetrics).
        self.job_metrics = JobMetrics(store)
        self.table.on_end(lambda job: self.job_metrics.close(job.id))
        # The one subscriber to every cluster's fabric: recovery first, then the job driver.
        self.events = FabricEvents(timeline, store, self.now, self.clusters, self.jobs, self.job_metrics)
        self.health: HealthPort | None = None
        self.call_timeout_s = 30.0  # how long ``call_sync`` waits for the engine
        self._thread: threading.Thread | None = None
        self.serving = False  # an engine thread runs: fabrics that reach out are built off it
        # Told (on the engine thread) each time a cluster's snapshot is re-rendered: live
        # streams wait on this instead of polling the snapshot (see ``on_render``).
        self._render_listeners: list[Callable[[str], object]] = []

    def use_health(self, health: HealthPort) -> None:
        """Show ``health``'s chip and link health in hardware snapshots (composition root)."""
        self.health = health

    # --- time, threads ---------------------------------------------------------------
    def now(self) -> float:
        """Unix seconds: the wall clock on a paced (served) plane at any speed, also after an
        engine stall (``Timeline.wall_at``); virtual time's own clock in rehearsals."""
        return self.tl.wall_at(self.tl.now)

    def timeline_at(self, unix: float) -> float:
        """The timeline (scheduler clock) time of a wall-clock instant (``now``'s inverse)."""
        return self.tl.timeline_at(unix)

    @property
    def epoch(self) -> float:
        """Unix time of timeline time 0 (what ``now`` adds to timeline time at speed 1)."""
        return self.tl.wall_at(0.0)

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """From any thread's event loop: run a command on the engine thread and await it."""
        return await asyncio.wrap_future(self.tl.submit(fn, *args, **kwargs))

    def call_sync(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """From a thread without an event loop: run a command on the engine thread and
        wait for it (at most ``call_timeout_s``)."""
        return self.tl.submit(fn, *args, **kwargs).result(timeout=self.call_timeout_s)

    def start(self) -> None:
        """Paced serving: reload from the store, then run the timeline on its own thread."""
        self.serving = True  # fabrics that reach outside are built off the engine from now on
        self.load()
        self._thread = threading.Thread(target=self.tl.serve_forever, name="podfleet-engine", daemon=True)
        self._thread.start()

    @property
    def engine_running(self) -> bool:
        """Whether the engine thread (serving) is alive: it ends on ``stop`` or when a
        failure nobody handles stops it (fail-stop)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self.tl.stop()
        if self._thread:
            self._thread.join(timeout=10)
        for rt in list(self.clusters.values()):
            close_fabric(rt.fabric)
        self.connections.close()
        # A build still hanging (a Ray address that never answers) is a daemon thread: it
        # holds nothing this process must close, and the fabric it might bring is discarded.

    # --- the write path ---------------------------------------------------------------------
    def mutation(
        self, op: str, actor: str, target: str, fn: Callable[[], tuple[JsonObject, str]],
        *, body: JsonObject | None = None, client_token: str | None = None,
        replay: Callable[[str], JsonObject] | None = None,
    ) -> JsonObject:
        """Run ``fn`` (which persists its records) in one transaction with its idempotency
        key and audit record; audit failures too. Returns ``fn``'s result."""
        store = self.store
        h = request_hash(body or {})
        if client_token:
            existing = store.get_idempotent(op, client_token)
            if existing is not None:
                if store.idempotent_request_hash(op, client_token) != h:
                    exc = ConflictError(
                        f"client_token {client_token!r} was already used for a different {op} request",
                        field="client_token",
                    )
                    store.append_audit(time=self.now(), actor=actor, action=op, target=existing,
                                       result=f"error:{exc.code}", detail={"client_token": client_token})
                    raise exc
                assert replay is not None
                return replay(existing)
        try:
            with store.transaction():
                result, target = fn()
                if client_token:
                    store.put_idempotent(op, client_token, target, h)
                store.append_audit(time=self.now(), actor=actor, action=op, target=target,
                                   result="ok", detail=_audit_detail(body))
        except PodfleetError as exc:
            store.append_audit(time=self.now(), actor=actor, action=op, target=target,
                               result=f"error:{exc.code}", detail={"message": exc.message})
            raise
        return result

    def audit(self, actor: str, action: str, target: str, result: str, detail: JsonObject | None = None) -> None:
        """Engine-thread audit append for calls that never reached a command (denied, invalid)."""
        self.store.append_audit(time=self.now(), actor=actor, action=action, target=target,
                                result=result, detail=detail or {})

    # --- clusters -------------------------------------------------------------------------
    def create_cluster(self, body: JsonObject, *, actor: str = "system", client_token: str | None = None) -> JsonObject:
        def do() -> tuple[JsonObject, str]:
            spec = ClusterSpec.parse({"fabric": self.default_fabric, **body})
            if spec.name in self.names:
                raise ConflictError(f"a cluster named {spec.name!r} already exists", field="name")
            self.access.check(spec)
            topology = spec.topology()
            now = self.now()
            # Spares where they keep the largest blocks free (or as named), persisted with
            # the cluster and given to the fabric, so twin, recovery and scheduler agree.
            spares = cluster_spares(spec, topology)
            rec = ClusterRecord(new_id("cl"), spec.name, ClusterState.DEPLOYING.value, spec.to_dict(),
                                ClusterStatus(spares=list(spares)), now, now)
            if self.connections.builds_off_engine(spec):
                pending = ConnectingCluster(rec, spec, topology, spares, target(spec))
                pending.set_deployment(pending_deployment("connecting"))
                pending.set_reason(f"connecting to {pending.target}")
                self.store.save_cluster(rec)
                connecting.append(pending)
                return pending.view(), rec.id
            # Build the fabric before persisting: a fabric that is not available fails here.
            fabric = self.make_fabric(spec, topology, spares, rec.id)
            rt = ClusterRuntime(rec, spec, fabric.topology, fabric, spares=spares, clock=self._clock,
                                planner=self.planner)
            rt.set_deployment(rt.deployment)
            self.store.save_cluster(rec)
            created.append(rt)
            return rt.view(), rec.id

        created: list[ClusterRuntime] = []
        connecting: list[ConnectingCluster] = []
        out = self.mutation("CreateTrainiumCluster", actor, str(body.get("name", "")), do, body=body,
                            client_token=client_token, replay=self.describe_cluster)
        for rt in created:  # only after the commit: nothing runs for an unpersisted cluster
            self.install(rt)
            out = rt.view()
        for pending in connecting:
            self.connections.connect(pending)
            out = pending.view()
        return out

    def make_fabric(self, spec: ClusterSpec, topology: Topology, spares: tuple[int, ...],
                     cluster_id: str, timeline: Timeline | None = None) -> Fabric:
        # A fabric of worker processes keeps checkpoints, logs and its key in the
        # cluster's own directory; the twin ignores options.
        opts = {"workdir": str(cluster_workdir(self.workdir, cluster_id)), **spec.fabric_options(),
                "hang_restarts": self.hang_restarts}
        return self.fabric_factory(spec.fabric, topology, timeline or self.tl, spares, self.tl.seed, options=opts)

    def cluster_log(self, ref: str) -> tuple[LogBuffer, Callable[[], JsonObject]]:
        """A cluster's deployment and fabric log, and its deployment progress as it is now
        (the progress follows the cluster from connecting to deployed)."""
        pending = self.connections.find(ref)
        rt: ClusterRuntime | ConnectingCluster = pending if pending is not None else self.resolve(ref)
        cid = rt.id

        def progress() -> JsonObject:
            now = self.clusters.get(cid) or self.connecting.get(cid)
            return now.deployment if now is not None else rt.deployment

        return rt.logs, progress

    def install(self, rt: ClusterRuntime) -> None:
        self.clusters[rt.id] = rt
        self.names[rt.rec.name] = rt.id
        self.jobs.attach(rt)  # its job driver, from what its fabric declares
        self.queues.install(rt)  # its persisted queues, before any job is queued
        self.reservations.install(rt)
        self.events.subscribe(rt)  # its fabric's events, from now on (control.events)
        self.render(rt)
        self.tl.every(self.telemetry_interval_s, lambda: self._tick(rt))
        # Aging and starvation holds move with time: re-run the queue while jobs wait.
        self.tl.every(self.schedule_interval_s, lambda: self._schedule_tick(rt))
        if ClusterBalancer.supported(rt.fabric):
            rt.balancer = ClusterBalancer(self, rt, self.balance_interval_s or self.telemetry_interval_s)
        if rt.state == ClusterState.DEPLOYING:
            start_deployment(self, rt)

    def _clock(self) -> float:
        return self.tl.now

    def _schedule_tick(self, rt: ClusterRuntime) -> None:
        if rt.id in self.clusters and (rt.scheduler.pending or rt.preempting):
            self.jobs.schedule(rt)

    def _tick(self, rt: ClusterRuntime) -> None:
        if rt.id not in self.clusters:
            return
        chips.settle(self, rt)  # drains that finished, spares that took a rank
        self.jobs.enforce_time_limits(rt)
        if rt.wanted:
            self.render(rt)  # refreshes the scheduler figures too (when wanted and stale)
        else:
            # Once per tick at most, not per command (with a long queue these figures cost
            # O(jobs)), and only while someone reads them and something they show moved.
            rt.tick_metrics()

    def render(self, rt: ClusterRuntime) -> None:
        """Re-render a cluster's hardware snapshot now (engine thread)."""
        rt.render_hardware(self.now(), self.tl.now, self.health.source(rt.id) if self.health else None)
        for fn in self._render_listeners:
            fn(rt.id)

    def on_render(self, fn: Callable[[str], object]) -> None:
        """Call ``fn(cluster_id)`` on the engine thread after every re-render of a cluster's
        snapshot (it must be quick and thread-safe: hand the news to another thread)."""
        self._render_listeners.append(fn)

    def _on_engine(self) -> bool:
        return threading.get_ident() == self.tl.engine_thread or self._thread is None

    def _fresh(self, rt: ClusterRuntime) -> ClusterRuntime:
        """On the engine thread, bring the scheduler figures up to date before a read
        (API threads see the last whole dict; their read makes the next tick refresh it)."""
        if self._on_engine():
            rt.refresh_metrics()
        return rt

    def metrics_stale(self, ref: str) -> bool:
        """True when a cluster's scheduler figures were last brought up to date more than
        two ticks ago (nobody read them lately): an API reader should ask the engine to
        refresh them (``refresh_metrics``) before it reads."""
        if self.connections.find(ref) is not None:
            return False  # no scheduler yet
        rt = self.resolve(ref)
        return self.tl.now - rt.metrics_at > 2 * self.telemetry_interval_s

    def refresh_metrics(self, ref: str) -> None:
        self.resolve(ref).refresh_metrics()

    def snapshot_stale(self, ref: str) -> bool:
        """True when the snapshot is older than two ticks (nobody read it lately): the
        reader should ask the engine for a fresh one (``refresh_hardware``) first."""
        rt = self.resolve(ref)
        rt.wanted = True
        return self.tl.now - rt.rendered_at > 2 * self.telemetry_interval_s

    def refresh_hardware(self, ref: str) -> None:
        self.render(self.resolve(ref))

    # How long a scrape waits for the engine to read the fabrics before it exports the
    # readouts last published (a busy or stopped engine must not hang a scrape).
    READOUT_WAIT_S = 5.0

    def metrics_readouts(self) -> list[tuple[ClusterRuntime, FabricReadout]]:
        """Every live cluster with its fabric readout as of now (``control.readout``), for the
        Prometheus collectors. From an API thread the engine reads the fabrics (one command
        for all clusters); if it does not answer within ``READOUT_WAIT_S`` the readouts last
        published are returned. A scrape is the only reader: no tick reads a fabric for it."""
        if self._on_engine():
            return self._publish_readouts()
        if self.engine_running:
            try:
                return self.tl.submit(self._publish_readouts).result(timeout=self.READOUT_WAIT_S)
            except concurrent.futures.TimeoutError:
                pass
        return [(rt, rt.readout) for rt in list(self.clusters.values())]

    def _publish_readouts(self) -> list[tuple[ClusterRuntime, FabricReadout]]:
        t = self.tl.now
        return [(rt, rt.publish_readout(t)) for rt in list(self.clusters.values())]

    def set_cluster_state(self, rt: ClusterRuntime | ConnectingCluster, dst: ClusterState, reason: str = "") -> None:
        rt.transition(dst, reason, self.now(), deployment=rt.deployment)
        self.store.save_cluster(rt.rec)
        rt.logs.append(self.now(), f"cluster {dst.value}" + (f": {reason}" if reason else ""))

    def resolve(self, ref: str) -> ClusterRuntime:
        """A live cluster by id, name, or a unique id prefix."""
        pending = self.connections.find(ref)
        if pending is not None:
            what = (f"has no fabric: {pending.failed}; delete it and create it again" if pending.failed
                    else f"is still connecting to {pending.target}; try again once it is active")
            raise ConflictError(f"cluster {pending.rec.name} {what}", field="cluster", state=pending.rec.state)
        cid = self.names.get(ref) or resolve_ref(ref, self.clusters, "cluster")
        rt = self.clusters.get(cid)
        if rt is None:
            raise NotFoundError(f"cluster {ref!r} not found", field="cluster")
        return rt

    def delete_cluster(self, ref: str, *, actor: str = "system") -> JsonObject:
        def do() -> tuple[JsonObject, str]:
            pending = self.connections.find(ref)
            if pending is not None:  # its build, if still running, is discarded when it answers
                self.set_cluster_state(pending, ClusterState.DELETING, "delete requested")
                self.set_cluster_state(pending, ClusterState.DELETED, "deleted")
                pending.logs.closed = True
                del self.connecting[pending.id]
                del self.names[pending.rec.name]
                return pending.view(), pending.id
            rt = self.resolve(ref)
            self.set_cluster_state(rt, ClusterState.DELETING, "delete requested")
            self.jobs.stop_all(rt, reason="cluster deleted")
            self.set_cluster_state(rt, ClusterState.DELETED, "deleted")
            rt.logs.closed = True
            del self.clusters[rt.id]
            del self.names[rt.rec.name]
            self.jobs.detach(rt)
            delete_fabric(rt.fabric)  # a private Ray head goes with its last cluster (a shutdown keeps it)
            return rt.view(), rt.id

        return self.mutation("DeleteCluster", actor, ref, do)

    def describe_cluster(self, ref: str) -> JsonObject:
        pending = self.connections.find(ref)
        if pending is not None:
            return pending.view()
        cid = self.names.get(ref) or resolve_ref(ref, self.clusters, "cluster")
        rt = self.clusters.get(cid)
        if rt is not None:
            rt.wanted = True  # the next tick refreshes its snapshot and scheduler figures
            return self._fresh(rt).view()
        rec = self.store.get_cluster(cid)
        if rec is None:
            raise NotFoundError(f"cluster {ref!r} not found", field="cluster")
        return {"id": rec.id, "name": rec.name, "state": rec.state, "spec": rec.spec,
                "reason": rec.status.reason}

    def list_clusters(self, *, next_token: str | None = None, max_results: int = 100) -> tuple[list[JsonObject], str | None]:
        ids = sorted(i for i in [*self.clusters, *self.connecting] if next_token is None or i > next_token)
        page = ids[:max_results]
        views = []
        for i in page:
            rt = self.clusters.get(i)
            if rt is not None:
                views.append(self._fresh(rt).view())
            elif (pending := self.connecting.get(i)) is not None:
                views.append(pending.view())
        return views, (page[-1] if len(ids) > max_results else None)

    def hardware_gzip(self, ref: str) -> bytes:
        """The whole-pod snapshot, gzip-compressed once per render."""
        return self.resolve(ref).hardware_gzip

    def hardware(self, ref: str, chip: int | None = None) -> bytes:
        """The pre-rendered snapshot (see ``snapshot_stale``); engine-thread callers get a
        fresh one."""
        rt = self.resolve(ref)
        rt.wanted = True
        if self._on_engine() and self.tl.now - rt.rendered_at > self.telemetry_interval_s:
            self.render(rt)
        if chip is None:
            return rt.hardware_bytes
        return rt.chip_json(rt.check_chip(chip))

    def hardware_page(self, ref: str, flt: ChipFilter, limit: int, next_token: str | None) -> JsonObject:
        """A page of the snapshot's chips matching ``flt`` (``control.hardwareviews``)."""
        rt = self.resolve(ref)
        return hardwareviews.page(rt.snapshot, rt.topology, flt, limit, next_token)

    def hardware_summary(self, ref: str) -> bytes:
        """Per-pod and per-block counts of the snapshot, computed once per rendered snapshot."""
        rt = self.resolve(ref)
        snap = rt.snapshot
        hit = self._summaries.get(rt.id)
        if hit is None or hit[0] is not snap:
            hit = (snap, json.dumps(hardwareviews.summaries(snap, rt.topology), separators=(",", ":")).encode())
            self._summaries[rt.id] = hit
        return hit[1]

    # --- faults ---------------------------------------------------------------------------
    def inject_fault(self, ref: str, kind: str, *, chip: int | None = None, link: str | None = None,
                     rank: int | None = None, job: str | None = None, factor: float | None = None,
                     pod: int | None = None, actor: str = "system") -> JsonObject:
        given: dict[str, object] = {"chip": chip, "link": link, "rank": rank, "job_id": job, "factor": factor,
                                    "pod": pod}
        if kind == faults.POD_LOSS:  # a twin fleet's whole pod: each job on it acts on its on-pod-loss policy
            def lose() -> tuple[JsonObject, str]:
                faults.refuse_foreign(kind, given)
                rt = self.resolve(ref)
                out = podloss.lose_pod(self.jobs, rt, pod, self.now())
                self.render(rt)
                return out
            return self.mutation("InjectFault", actor, ref, lose, body={"kind": kind, "pod": pod})
        if kind == KILL_WORKER:  # fabrics of worker processes: kill one rank's worker
            def kill() -> tuple[JsonObject, str]:
                faults.refuse_foreign(kind, given)
                rt = self.resolve(ref)
                return faults.kill_worker(self.jobs.driver(rt), rt, rank, job)
            return self.mutation("InjectFault", actor, ref, kill, body={"kind": kind, "rank": rank, "job_id": job})
        if kind == SLOW_WORKER:  # likewise: slow one rank's worker down
            def slow() -> tuple[JsonObject, str]:
                faults.refuse_foreign(kind, given)
                rt = self.resolve(ref)
                return faults.slow_worker(self.jobs.driver(rt), rt, rank, job, factor)
            return self.mutation("InjectFault", actor, ref, slow,
                                 body={"kind": kind, "rank": rank, "job_id": job, "factor": factor})

        def do() -> tuple[JsonObject, str]:
            faults.refuse_foreign(kind, given)
            rt = self.resolve(ref)
            out, target = faults.inject(rt, kind, chip=chip, link=link, now=self.now())
            self.render(rt)
            return out, target

        return self.mutation("InjectFault", actor, ref, do, body={"kind": kind, "chip": chip, "link": link})

    def get_job_metrics(self, job_ref: str, *, resolution_s: float | None = None, since: float = 0.0,
                        limit: int = 2000) -> JsonObject:
        """A job's metrics history (engine thread: the open buckets are written there)."""
        job_id = str(self.jobs.describe(job_ref)["id"])
        return self.job_metrics.query(job_id, resolution_s=resolution_s, since=since, limit=limit)

    # --- chip lifecycle (control.chips) -------------------------------------------------------
    def chip_command(self, ref: str, chip: int, action: str, *, actor: str = "system",
                     reason: str | None = None) -> JsonObject:
        """cordon | drain | uncordon | repair one chip (audited, with the operator's
        ``reason`` when given); its chip view."""
        return chips.chip_command(self, ref, chip, action, actor=actor, reason=reason)

    def save_health(self, rt: ClusterRuntime) -> None:
        save_health(self.store, rt)

    # --- restart ---------------------------------------------------------------------------
    def load(self) -> None:
        """Rebuild the read models from the store and reconcile with fresh fabrics."""
        self.priorities.load()
        after = None
        while True:
            page = self.store.list_clusters(after=after, limit=200)
            if not page:
                break
            after = page[-1].id
            for rec in page:
                self.connections.restore(rec)
        self.jobs.restore_all()


def _audit_detail(body: JsonObject | None) -> JsonObject:
    # Keep audit rows small and JSON-plain: the request fields, never secrets.
    plain: JsonObject = json.loads(json.dumps({k: v for k, v in (body or {}).items() if k != "token"}, default=str))
    return plain
