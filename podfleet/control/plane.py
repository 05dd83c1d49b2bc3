"""The control plane: one writer on the engine thread; commands in, read models out.

See ``podfleet.control`` for the public API.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar

from podfleet.control import chips, faults
from podfleet.control.balancing import ClusterBalancer
from podfleet.control.deploy import start_deployment
from podfleet.control.faults import KILL_WORKER
from podfleet.control.ids import new_id, resolve_ref
from podfleet.control.jobmetrics import JobMetrics
from podfleet.control.jobs import JobManager
from podfleet.control.jobtable import JobTable
from podfleet.control.lifecycle import ClusterState, check_cluster_transition
from podfleet.control.priorities import PriorityClasses
from podfleet.control.queues import QueueCommands
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
from podfleet.fabric.base import ChipState, Fabric, FabricEvent
from podfleet.fabric.factory import FabricFactory, close_fabric, make_fabric
from podfleet.hardware.topology import Topology
from podfleet.store.protocol import StoreProtocol
from podfleet.store.records import ChipHealthRecord, ClusterRecord

T = TypeVar("T")
P = ParamSpec("P")



class HealthPort(Protocol):
    """What the plane reads of the health service (``podfleet.health.service``)."""

    def source(self, cluster_id: str) -> HealthSource | None:
        """The cluster's chip/link health for its hardware snapshot, once scanned."""


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


class ControlPlane:
    def __init__(
        self,
        store: StoreProtocol,
        timeline: Timeline,
        *,
        fabric_factory: FabricFactory | None = None,
        telemetry_interval_s: float = 1.0,
        default_fabric: str = "sim",
        workdir: str | None = None,
        balance_interval_s: float | None = None,
        schedule_interval_s: float = 10.0,
    ) -> None:
        self.store = store
        # Group commit: commands queued together commit in one store transaction and are
        # acknowledged after it (Timeline.drain).
        timeline.batch = store.transaction
        # Real fabrics keep checkpoints, worker logs and keys under <workdir>/clusters/<id>
        # (default $PODFLEET_WORKDIR or ~/.podfleet/work).
        self.workdir = workdir
        self.tl = timeline
        self.fabric_factory = fabric_factory or make_fabric
        self.telemetry_interval_s = telemetry_interval_s
        # Load monitor sampling (None: the telemetry interval; see control.balancing) and
        # the periodic queue pass for aging (submits, finishes and faults run one at once).
        self.balance_interval_s = balance_interval_s
        self.schedule_interval_s = schedule_interval_s
        self.default_fabric = default_fabric
        self.epoch = time.time() - timeline.now  # timestamps = epoch + timeline time
        self.clusters: dict[str, ClusterRuntime] = {}  # live clusters by id
        self.names: dict[str, str] = {}  # live cluster name -> id
        self.table = JobTable(store, self.now)  # the one writer of job records
        self.jobs = JobManager(self, self.table)
        self.queues = QueueCommands(self)  # CreateQueue ... DeleteQueue (``control.queues``)
        self.priorities = PriorityClasses(self)  # named priorities (``control.priorities``)
        # Loss, tokens/s and step time over each job's run (GetJobMetrics).
        self.job_metrics = JobMetrics(store)
        self.table.on_end(lambda job: self.job_metrics.close(job.id))
        self.health: HealthPort | None = None
        self.call_timeout_s = 30.0  # how long ``call_sync`` waits for the engine
        self._thread: threading.Thread | None = None
        # Told (on the engine thread) each time a cluster's snapshot is re-rendered: live
        # streams wait on this instead of polling the snapshot (see ``on_render``).
        self._render_listeners: list[Callable[[str], object]] = []

    def use_health(self, health: HealthPort) -> None:
        """Show ``health``'s chip and link health in hardware snapshots (composition root)."""
        self.health = health

    # --- time, threads ---------------------------------------------------------------
    def now(self) -> float:
        """Unix seconds on the timeline (tracks the wall clock when paced at speed 1)."""
        return self.epoch + self.tl.now

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """From any thread's event loop: run a command on the engine thread and await it."""
        return await asyncio.wrap_future(self.tl.submit(fn, *args, **kwargs))

    def call_sync(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """From a thread without an event loop: run a command on the engine thread and
        wait for it (at most ``call_timeout_s``)."""
        return self.tl.submit(fn, *args, **kwargs).result(timeout=self.call_timeout_s)

    def start(self) -> None:
        """Paced serving: reload from the store, then run the timeline on its own thread."""
        self.load()
        self._thread = threading.Thread(target=self.tl.serve_forever, name="podfleet-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.tl.stop()
        if self._thread:
            self._thread.join(timeout=10)
        for rt in list(self.clusters.values()):
            close_fabric(rt.fabric)

    # --- the write path ---------------------------------------------------------------------
    def mutation(
        self, op: str, actor: str, target: str, fn: Callable[[], tuple[dict[str, Any], str]],
        *, body: dict[str, Any] | None = None, client_token: str | None = None,
        replay: Callable[[str], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Run ``fn`` (which persists its records) in one transaction with its idempotency
        key and audit record; audit failures too. Returns ``fn``'s result."""
        store = self.store
        h = request_hash(body or {})
        if client_token:
            existing = store.get_idempotent(op, client_token)
            if existing is not None:
                if store.idempotent_request_hash(op, client_token) != h:
                    exc = ConflictError(
                        f"clientToken {client_token!r} was already used for a different {op} request",
                        field="clientToken",
                    )
                    store.append_audit(time=self.now(), actor=actor, action=op, target=existing,
                                       result=f"error:{exc.code}", detail={"clientToken": client_token})
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

    def audit(self, actor: str, action: str, target: str, result: str, detail: dict[str, Any] | None = None) -> None:
        """Engine-thread audit append for calls that never reached a command (denied, invalid)."""
        self.store.append_audit(time=self.now(), actor=actor, action=action, target=target,
                                result=result, detail=detail or {})

    # --- clusters -------------------------------------------------------------------------
    def create_cluster(self, body: dict[str, Any], *, actor: str = "system", client_token: str | None = None) -> dict[str, Any]:
        def do() -> tuple[dict[str, Any], str]:
            spec = ClusterSpec.parse({"fabric": self.default_fabric, **body})
            if spec.name in self.names:
                raise ConflictError(f"a cluster named {spec.name!r} already exists", field="name")
            topology = spec.topology()
            now = self.now()
            rec = ClusterRecord(new_id("cl"), spec.name, ClusterState.DEPLOYING.value, spec.to_dict(),
                                {"deployment": None}, now, now)
            # Build the fabric before persisting: a fabric that is not available fails here.
            # Spares where they keep the largest blocks free (or as named), persisted with
            # the cluster and given to the fabric, so twin, recovery and scheduler agree.
            spares = cluster_spares(spec, topology)
            rec.status["spares"] = list(spares)
            fabric = self._make_fabric(spec, topology, spares, rec.id)
            rt = ClusterRuntime(rec, spec, fabric.topology, fabric, spares=spares, clock=self._clock)
            rec.status["deployment"] = rt.deployment
            self.store.save_cluster(rec)
            created.append(rt)
            return rt.view(), rec.id

        created: list[ClusterRuntime] = []
        out = self.mutation("CreateTrainiumCluster", actor, str(body.get("name", "")), do, body=body,
                            client_token=client_token, replay=self.describe_cluster)
        for rt in created:  # only after the commit: nothing runs for an unpersisted cluster
            self._install(rt)
            out = rt.view()
        return out

    def _make_fabric(self, spec: ClusterSpec, topology: Topology, spares: tuple[int, ...],
                     cluster_id: str) -> Fabric:
        # A fabric of worker processes keeps checkpoints, logs and its key in the
        # cluster's own directory; the twin ignores options.
        opts = {"workdir": str(cluster_workdir(self.workdir, cluster_id)), **spec.fabric_options()}
        return self.fabric_factory(spec.fabric, topology, self.tl, spares, self.tl.seed, options=opts)

    def _install(self, rt: ClusterRuntime) -> None:
        self.clusters[rt.id] = rt
        self.names[rt.rec.name] = rt.id
        self.jobs.attach(rt)  # its job driver, from what its fabric declares
        self.queues.install(rt)  # its persisted queues, before any job is queued
        rt.fabric.subscribe(functools.partial(self._fabric_event, rt))
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

    def set_cluster_state(self, rt: ClusterRuntime, dst: ClusterState, reason: str = "") -> None:
        check_cluster_transition(rt.state, dst)
        rt.rec.state = dst.value
        rt.rec.updated_at = self.now()
        rt.rec.status["reason"] = reason
        rt.rec.status["deployment"] = rt.deployment
        self.store.save_cluster(rt.rec)
        rt.logs.append(self.now(), f"cluster {dst.value}" + (f": {reason}" if reason else ""))

    def resolve(self, ref: str) -> ClusterRuntime:
        """A live cluster by id, name, or a unique id prefix."""
        cid = self.names.get(ref) or resolve_ref(ref, self.clusters, "cluster")
        rt = self.clusters.get(cid)
        if rt is None:
            raise NotFoundError(f"cluster {ref!r} not found", field="cluster")
        return rt

    def delete_cluster(self, ref: str, *, actor: str = "system") -> dict[str, Any]:
        def do() -> tuple[dict[str, Any], str]:
            rt = self.resolve(ref)
            self.set_cluster_state(rt, ClusterState.DELETING, "delete requested")
            self.jobs.stop_all(rt, reason="cluster deleted")
            self.set_cluster_state(rt, ClusterState.DELETED, "deleted")
            rt.logs.closed = True
            del self.clusters[rt.id]
            del self.names[rt.rec.name]
            self.jobs.detach(rt)
            close_fabric(rt.fabric)
            return rt.view(), rt.id

        return self.mutation("DeleteCluster", actor, ref, do)

    def describe_cluster(self, ref: str) -> dict[str, Any]:
        cid = self.names.get(ref) or resolve_ref(ref, self.clusters, "cluster")
        rt = self.clusters.get(cid)
        if rt is not None:
            rt.wanted = True  # the next tick refreshes its snapshot and scheduler figures
            return self._fresh(rt).view()
        rec = self.store.get_cluster(cid)
        if rec is None:
            raise NotFoundError(f"cluster {ref!r} not found", field="cluster")
        return {"id": rec.id, "name": rec.name, "state": rec.state, "spec": rec.spec,
                "reason": rec.status.get("reason", "")}

    def list_clusters(self, *, next_token: str | None = None, max_results: int = 100) -> tuple[list[dict[str, Any]], str | None]:
        ids = sorted(i for i in list(self.clusters) if next_token is None or i > next_token)
        page = ids[:max_results]
        views = [self._fresh(rt).view() for i in page if (rt := self.clusters.get(i)) is not None]
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
        return rt.chip_bytes[rt.check_chip(chip)]

    # --- faults ---------------------------------------------------------------------------
    def inject_fault(self, ref: str, kind: str, *, chip: int | None = None, link: str | None = None,
                     rank: int | None = None, job: str | None = None, actor: str = "system") -> dict[str, Any]:
        if kind == KILL_WORKER:  # fabrics of worker processes: kill one rank's worker
            return self.mutation("InjectFault", actor, ref, lambda: self.jobs.kill_worker(self.resolve(ref), rank, job),
                                 body={"kind": kind, "rank": rank, "jobId": job})

        def do() -> tuple[dict[str, Any], str]:
            rt = self.resolve(ref)
            out, target = faults.inject(rt, kind, chip=chip, link=link, now=self.now())
            self.render(rt)
            return out, target

        return self.mutation("InjectFault", actor, ref, do, body={"kind": kind, "chip": chip, "link": link})

    def get_job_metrics(self, job_ref: str, *, resolution_s: float | None = None, since: float = 0.0,
                        limit: int = 2000) -> dict[str, Any]:
        """A job's metrics history (engine thread: the open buckets are written there)."""
        job_id = str(self.jobs.describe(job_ref)["id"])
        return self.job_metrics.query(job_id, resolution_s=resolution_s, since=since, limit=limit)

    # --- chip lifecycle (control.chips) -------------------------------------------------------
    def chip_command(self, ref: str, chip: int, action: str, *, actor: str = "system") -> dict[str, Any]:
        """cordon | drain | uncordon | repair one chip (audited); its chip view."""
        return chips.chip_command(self, ref, chip, action, actor=actor)

    # --- fabric events ----------------------------------------------------------------------
    def _fabric_event(self, rt: ClusterRuntime, ev: FabricEvent) -> None:
        # Handled just after the fabric finishes its own reaction (a zero-delay event):
        # the fabric calls us from inside its state change, and our reaction (isolate,
        # move a rank, resume) must not interleave with the rest of that change.
        self.tl.call_at(0, lambda: self._handle_fabric_event(rt, ev))

    def _handle_fabric_event(self, rt: ClusterRuntime, ev: FabricEvent) -> None:
        if rt.id not in self.clusters:
            return
        if ev.kind in ("fabric-degraded", "fabric-recovered"):
            self._fabric_health(rt, ev)
            return
        if ev.kind not in ("progress", "checkpoint", "thermal-throttle") and not ev.kind.startswith("job-"):
            rt.logs.append(self.now(), f"fabric: {ev.kind}", chip=ev.chip, link=ev.link)
        if ev.kind == "progress":  # memory only: progress is persisted with checkpoints
            self.jobs.on_event(rt, ev)
            if ev.job_id is not None:
                self.job_metrics.record(ev.job_id, self.now(), ev.detail)
            return
        # One commit per event: a checkpoint's two transitions and its record go together.
        with self.store.transaction():
            if ev.chip is not None and ev.kind.startswith("chip-") and ev.kind != "chip-failed":
                self.save_health(rt)
            self.jobs.on_event(rt, ev)
            self._audit_fabric_recovery(rt, ev)

    def _audit_fabric_recovery(self, rt: ClusterRuntime, ev: FabricEvent) -> None:
        """A fabric of worker processes recovering a job (itself, or a gang the process
        driver relaunches) is an automatic action: an audit record by the system. The
        twin's recovery flows are audited by the recovery service."""
        d = dict(ev.detail)
        if ev.kind == "job-recovering":
            state = "running"
        elif ev.kind == "job-resumed":
            state = "done"
        elif ev.kind == "worker-exited" and d.get("gang_ended") and d.get("cause") == "infra":
            state = "relaunching"
        else:
            return
        self.store.append_audit(
            time=self.now(), actor="system:recovery", action="Recovery", target=ev.job_id or rt.id, result="ok",
            detail={"state": state, "kind": ev.kind, "cluster": rt.id, "chip": ev.chip,
                    **{k: d[k] for k in ("rank", "cause", "source", "restored_step") if d.get(k) is not None}})

    def _fabric_health(self, rt: ClusterRuntime, ev: FabricEvent) -> None:
        """The fabric lost (or regained) its own telemetry source, e.g. a neuron-monitor
        that exited: shown as the cluster's reason until it recovers."""
        reason = str(ev.detail.get("reason") or ev.kind) if ev.kind == "fabric-degraded" else ""
        rt.logs.append(self.now(), f"fabric: {ev.kind}" + (f": {reason}" if reason else ""))
        if rt.rec.status.get("reason") != reason and rt.state == ClusterState.ACTIVE:
            rt.rec.status["reason"] = reason or "fabric recovered"
            rt.rec.updated_at = self.now()
            self.store.save_cluster(rt.rec)

    def save_health(self, rt: ClusterRuntime) -> None:
        states = rt.chip_states()
        self.store.save_chip_health([
            ChipHealthRecord(rt.id, i, s.value, bool(rt.spare_mask[i])) for i, s in enumerate(states)
        ])

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
                self._restore_cluster(rec)
        self.jobs.restore_all()

    def _restore_cluster(self, rec: ClusterRecord) -> None:
        spec = ClusterSpec.parse(rec.spec)
        topology = spec.topology()
        # Clusters persisted before spares were chosen by the scheduler had the last N chips.
        stored = rec.status.get("spares")
        spares = cluster_spares(spec, topology, stored if stored is not None else
                                range(topology.n_chips - spec.spares, topology.n_chips))
        if rec.state == ClusterState.DELETING:
            rec.state = ClusterState.DELETED.value
            self.store.save_cluster(rec)
            return
        try:
            fabric = self._make_fabric(spec, topology, spares, rec.id)
        except PodfleetError as exc:
            rec.state = ClusterState.FAILED.value if rec.state == "deploying" else rec.state
            rec.status["reason"] = f"fabric unavailable after restart: {exc.message}"
            self.store.save_cluster(rec)
            return
        rt = ClusterRuntime(rec, spec, fabric.topology, fabric, spares=spares, clock=self._clock)
        for h in self.store.list_chip_health(rec.id):
            if h.state in (ChipState.FAILED, ChipState.ISOLATED) and h.chip < topology.n_chips:
                fabric.set_chip_state(h.chip, ChipState.ISOLATED, "isolated before the restart")
        if rec.state == ClusterState.DEPLOYING:
            rt.deployment = {**rt.deployment, "state": "pending"}
        rt.logs.append(self.now(), f"cluster reloaded from the store in state {rec.state}")
        # A follow of the log ends with the deployment; a deployed cluster has none running.
        rt.logs.closed = rec.state != ClusterState.DEPLOYING
        self._install(rt)


def _audit_detail(body: dict[str, Any] | None) -> dict[str, Any]:
    # Keep audit rows small and JSON-plain: the request fields, never secrets.
    plain: dict[str, Any] = json.loads(json.dumps({k: v for k, v in (body or {}).items() if k != "token"}, default=str))
    return plain
