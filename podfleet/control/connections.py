"""Clusters between a record and a live runtime, on the engine thread.

* A new cluster whose fabric reaches outside this process (Ray, ``neuron-ls``), while
  serving: registered as a ``ConnectingCluster``, its fabric built off the engine thread
  (``control.connect``), then installed, or failed with why; a deployed cluster reloaded
  at a restart whose fabric cannot be reached is tried again with backoff, its jobs held.
* A restart: each cluster's record reloaded with a fresh fabric (its chip health and
  links as they were, ``control.events.restore_health``/``restore_links``), connected
  again off the engine thread, or listed without a fabric and why.

It asks the plane only what ``ConnectHost`` lists (``ControlPlane`` satisfies it) and
never imports the plane.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol

from podfleet.control import reattach
from podfleet.control.clusterrecord import ClusterRecordOwner
from podfleet.control.connect import (
    DEFAULT_CONNECT_TIMEOUT_S,
    ConnectingCluster,
    FabricConnector,
    HeldTimeline,
    discard,
    pending_deployment,
    retry_delay,
    target,
)
from podfleet.control.events import restore_health, restore_links
from podfleet.control.fabricaccess import FabricAccess
from podfleet.control.ids import resolve_ref
from podfleet.control.lifecycle import ClusterState
from podfleet.control.ports import PlaneCore
from podfleet.control.runtime import ClusterRuntime
from podfleet.control.scheduling import cluster_spares
from podfleet.control.specs import ClusterSpec
from podfleet.engine.timeline import Timeline
from podfleet.errors import PodfleetError
from podfleet.fabric.base import Fabric
from podfleet.hardware.topology import Topology
from podfleet.scheduler.extension import ShapePlanner
from podfleet.store.records import ClusterRecord


class RestoredJobs(Protocol):
    """What the connection flow asks of the job manager (``control.jobs.JobManager``)."""

    def resume_restored(self, job_ids: Sequence[str], reason: str | None = None) -> None:
        """Jobs held for a fabric reached after a restart: re-attached, or failed with ``reason``."""


class ConnectHost(PlaneCore, Protocol):
    """PlaneCore, and what connecting and reloading clusters ask of the plane besides."""

    @property
    def jobs(self) -> RestoredJobs: ...

    # Plain attributes of the plane: the allow-list a spec is checked against, the
    # planner each reloaded cluster's scheduler gets, and whether an engine thread runs
    # (``start``: fabrics that reach out are built off it from then on).
    access: FabricAccess
    planner: ShapePlanner | None
    serving: bool
    names: dict[str, str]  # live cluster name -> id, connecting ones too

    @property
    def connecting(self) -> dict[str, ConnectingCluster]:
        """Clusters whose fabric is being built, or could not be (this flow adds and removes them)."""

    def reaches_out(self, kind: str) -> bool: ...

    def make_fabric(self, spec: ClusterSpec, topology: Topology, spares: tuple[int, ...], cluster_id: str,
                    timeline: Timeline | None = None) -> Fabric: ...

    def install(self, rt: ClusterRuntime) -> None:
        """Make ``rt`` live: its driver, queues, events, ticks (and deployment)."""

    def set_cluster_state(self, rt: ClusterRuntime | ConnectingCluster, dst: ClusterState,
                          reason: str = "") -> None: ...


class Connections:
    """Engine thread: clusters whose fabric is built off the engine thread, and clusters
    reloaded from their records at a restart."""

    def __init__(self, host: ConnectHost, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        self.host = host
        self.connector = FabricConnector(host.tl, timeout_s)

    def close(self) -> None:
        self.connector.close()

    def _clock(self) -> float:
        return self.host.tl.now

    def builds_off_engine(self, spec: ClusterSpec) -> bool:
        """Served (an engine thread runs), a fabric that may wait on the network or an
        external command is built on a thread; in virtual time the caller is the engine
        and nothing else runs meanwhile, so it is built inline."""
        return self.host.serving and self.host.reaches_out(spec.fabric)

    def find(self, ref: str) -> ConnectingCluster | None:
        """The connecting (or failed) cluster ``ref`` names, by id, name or id prefix."""
        host = self.host
        cid = host.names.get(ref, ref)
        pending = host.connecting.get(cid)
        if pending is None and host.connecting and cid not in host.clusters:
            try:
                pending = host.connecting.get(resolve_ref(ref, host.connecting, "cluster"))
            except PodfleetError:
                return None
        return pending

    def connect(self, pending: ConnectingCluster) -> None:
        """Register ``pending`` and start building its fabric (engine thread)."""
        host = self.host
        host.connecting[pending.id] = pending
        host.names[pending.rec.name] = pending.id
        pending.logs.append(host.now(), f"connecting to {pending.target} (timeout "
                                        f"{self.connector.timeout_s:g} s)", step="fabric-connection")
        held = HeldTimeline(host.tl)
        # The fabric keeps the held timeline as its own: it only submits, reads ``now``
        # and ``stopping``, which the held one forwards.
        as_timeline: Any = held

        def build() -> Fabric:
            return host.make_fabric(pending.spec, pending.topology, pending.spares, pending.id, as_timeline)

        self.connector.start(pending.id, build, functools.partial(self._connected, pending, held))

    def _connected(self, pending: ConnectingCluster, held: HeldTimeline, fabric: Fabric | None,
                   reason: str | None) -> None:
        """The build answered (engine thread): install the cluster, or fail it with why."""
        host = self.host
        if pending.settled or host.connecting.get(pending.id) is not pending:
            if fabric is not None:  # deleted (or failed) meanwhile: nobody owns it
                discard(fabric)
            return
        pending.settled = True
        rt = None
        if fabric is not None:
            try:
                rt = ClusterRuntime(pending.rec, pending.spec, fabric.topology, fabric, spares=pending.spares,
                                    clock=self._clock)
            except PodfleetError as exc:
                reason = exc.message
                discard(fabric)
        if rt is None:
            self._connect_failed(pending, f"cannot connect to {pending.target}: {reason}")
            return
        del host.connecting[pending.id]
        pending.logs.append(host.now(), f"connected to {pending.target}", step="fabric-connection")
        rt.logs = pending.logs
        if pending.restored:
            restore_health(host.store, rt)
            rt.set_reason("fabric reconnected after a restart")
            rt.logs.closed = rt.state != ClusterState.DEPLOYING
        if rt.state == ClusterState.DEPLOYING:
            rt.deployment = pending_deployment("pending")
            rt.set_deployment(rt.deployment)
        rt.set_connected(None)
        host.store.save_cluster(rt.rec)
        host.install(rt)
        if pending.restored:
            restore_links(rt)
        held.release()  # the fabric's first events, now that the plane is subscribed
        if pending.held_jobs:
            host.jobs.resume_restored(pending.held_jobs)
        if pending.restored:
            # A fabric reached after the reload (Ray) shows its detached gangs only now:
            # what no job claimed goes, as ``restore_all`` does for the fabrics it found.
            reattach.discard_unadopted([rt], host.now())

    def _connect_failed(self, pending: ConnectingCluster, reason: str) -> None:
        """No fabric: a new cluster (or one still deploying) fails with ``reason``; a
        deployed one reloaded at a restart keeps its state, shown with the reason, and
        is tried again at the next restart. Either way it stays listed until deleted."""
        host = self.host
        pending.failed = reason
        pending.logs.append(host.now(), reason, step="fabric-connection")
        if pending.state == ClusterState.DEPLOYING:
            pending.set_deployment({**pending.deployment, "state": "failed"})
            # Not retried at a restart: the operator deletes it and creates it again.
            pending.set_connected(False)
            host.set_cluster_state(pending, ClusterState.FAILED, reason)
        elif pending.restored and host.serving:
            # A deployed cluster whose fabric is a dependency that may come back (a Ray head
            # restarting): tried again with backoff, its jobs held meanwhile.
            pending.attempts += 1
            delay = retry_delay(pending.attempts)
            why = f"{reason}; trying again in {delay:g} s (attempt {pending.attempts})"
            pending.set_reason(why, host.now())
            host.store.save_cluster(pending.rec)
            pending.logs.append(host.now(), why, step="fabric-connection")
            for job_id in pending.held_jobs:
                job = host.table.find(job_id)
                if job is not None and not job.ended:
                    host.table.set_reason(job, f"waiting for its cluster's fabric: {why}")
            host.tl.call_at(delay, functools.partial(self._reconnect_restored, pending))
            return
        else:
            pending.set_reason(reason, host.now())
            host.store.save_cluster(pending.rec)
        pending.logs.closed = True
        if pending.held_jobs:
            host.jobs.resume_restored(pending.held_jobs, f"its cluster's fabric could not be reached after a "
                                                         f"restart: {reason}")

    def _reconnect_restored(self, pending: ConnectingCluster) -> None:
        """Engine thread: connect a reloaded cluster again, unless deleted meanwhile."""
        if self.host.connecting.get(pending.id) is not pending or self.host.tl.stopping:
            return
        pending.settled = False
        pending.failed = None
        self.connect(pending)

    # --- restart ---------------------------------------------------------------------------
    def restore(self, rec: ClusterRecord) -> None:
        """Reload one cluster's record at a restart: installed with a fresh fabric, connected
        again off the engine thread, or listed without a fabric (and why)."""
        host = self.host
        spec = ClusterSpec.parse(rec.spec)
        topology = spec.topology()
        # Clusters persisted before spares were chosen by the scheduler had the last N chips.
        stored = rec.status.spares
        spares = cluster_spares(spec, topology, stored if stored is not None else
                                range(topology.n_chips - spec.total_spares(), topology.n_chips))
        if rec.state == ClusterState.DELETING:
            ClusterRecordOwner(rec).transition(ClusterState.DELETED, rec.status.reason, rec.updated_at)
            host.store.save_cluster(rec)
            return
        try:
            host.access.check(spec)  # an address or command no longer allowed is not reached
            refused = None
        except PodfleetError as exc:
            refused = exc.message
        if rec.status.fabric_connected is False or refused or self.builds_off_engine(spec):
            # Never connected or no longer allowed (listed, failed, until deleted), or
            # connected again off the engine thread: its jobs wait for the fabric
            # (``JobManager.resume_restored``).
            pending = ConnectingCluster(rec, spec, topology, spares, target(spec), restored=True)
            if rec.status.fabric_connected is False or refused:
                pending.settled = True
                pending.failed = refused or rec.status.reason or "no fabric"
                if refused:  # shown, not persisted: allowed again, it reconnects at a restart
                    pending.set_reason(f"not reconnected after a restart: {refused}")
                pending.logs.append(host.now(), pending.failed)
                pending.logs.closed = True
                host.connecting[pending.id] = pending
                host.names[rec.name] = pending.id
            else:
                pending.logs.append(host.now(), f"cluster reloaded from the store in state {rec.state}")
                pending.set_reason(f"reconnecting to {pending.target} after a restart")
                self.connect(pending)
            return
        try:
            fabric = host.make_fabric(spec, topology, spares, rec.id)
        except PodfleetError as exc:
            owner, why = ClusterRecordOwner(rec), f"fabric unavailable after restart: {exc.message}"
            if rec.state == ClusterState.DEPLOYING:
                owner.transition(ClusterState.FAILED, why, rec.updated_at)
            else:
                owner.set_reason(why)
            host.store.save_cluster(rec)
            return
        rt = ClusterRuntime(rec, spec, fabric.topology, fabric, spares=spares, clock=self._clock,
                            planner=host.planner)
        restore_health(host.store, rt)
        if rec.state == ClusterState.DEPLOYING:
            rt.deployment = {**rt.deployment, "state": "pending"}
        rt.logs.append(host.now(), f"cluster reloaded from the store in state {rec.state}")
        # A follow of the log ends with the deployment; a deployed cluster has none running.
        rt.logs.closed = rec.state != ClusterState.DEPLOYING
        host.install(rt)
        restore_links(rt)
