"""The control plane: one writer on the engine thread, commands in, read models out.

``ControlPlane(store, timeline, fabric_factory=, planner=None, telemetry_interval_s=1.0,
balance_interval_s=None, schedule_interval_s=10.0)``: built by the composition root
(``podfleet.compose.build``), which gives it the fabric factory and the planner port.

Commands (engine thread only; from other threads use ``await plane.call(fn, ...)`` or
``plane.call_sync(fn, ...)``, which go through ``Timeline.submit``). Each validates,
persists its records, its idempotency key and an audit record in one store transaction,
and only then changes memory and returns the new object's public view (a dict):

    plane.create_cluster(body, actor=, client_token=)      -> cluster view
    plane.delete_cluster(ref, actor=)                      -> cluster view
    plane.inject_fault(ref, kind, chip=, link="A-B", actor=)
    plane.jobs.submit(cluster_ref, body, actor=, client_token=) -> job view
    plane.jobs.stop(job_id, actor=)                        -> job view
    plane.audit(actor, action, target, result, detail)     (denied / invalid calls)

Reads (any thread; views are replaced whole, never mutated in place):

    plane.describe_cluster(ref) / plane.list_clusters(next_token=, max_results=)
    plane.hardware(ref, chip=None) -> bytes   (snapshot rendered once per tick)
    plane.jobs.describe(job_id) / plane.jobs.list(cluster_id=, state=, ...)
    plane.clusters[id].logs / plane.jobs.job_logs(job_id)  (LogBuffer.since(offset))

Hooks for health / recovery / scheduler:

    plane.events (control.events.FabricEvents)  every fabric event: the recovery
        service first (RecoveryPort.on_event), then the cluster's job driver
    plane.clusters: dict[id, ClusterRuntime] (topology, fabric, spares (chosen by
        scheduler.choose_spares unless named; persisted), owner chip->job, scheduler,
        sched_metrics, usable() mask, replacement_chips() for recovery)
    plane.jobs.schedule(rt)           one queue pass: recovering jobs, then the cluster's
        scheduler (rt.scheduler, podfleet.scheduler) via ``dispatch``: bind, preempt by
        checkpoint and requeue, pending reasons; ``scheduling`` is the pure glue and
        ``balancing`` the load monitor + rebalancer on fabrics with telemetry
    plane.set_cluster_state(rt, ClusterState.X, reason)

Lifecycles live in ``lifecycle`` (ClusterState, JobState and their transitions).
``plane.start()`` reloads from the store, reconciles with fresh fabrics and paces the
timeline on a thread; ``plane.load()`` does the reload alone (virtual-time tests).
"""

from podfleet.control.lifecycle import ClusterState, JobState
from podfleet.control.plane import ControlPlane

__all__ = ["ClusterState", "ControlPlane", "JobState"]
