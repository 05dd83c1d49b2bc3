"""Fabric events into the control plane: the one subscriber to every cluster's fabric.

Each event is handled just after the fabric finishes its own reaction (a zero-delay
event on the timeline): the fabric calls its subscribers from inside its state change,
and the plane's reaction (isolate, move a rank, resume) must not interleave with the
rest of that change. Then, in one store transaction (a checkpoint's two transitions and
its record go together):

    fabric-degraded / -recovered   the cluster's reason (the fabric lost its telemetry)
    progress                       the job's progress and metrics history (memory only)
    anything else                  a log line; chip health (and, on a link event, the
                                   links not up) saved; the recovery service
                                   first (``RecoveryPort.on_event``: a flow may take the
                                   fault over), else the cluster's job driver; process
                                   fabrics' own recoveries are audited

Built by the plane (``ControlPlane``) with only what it uses: it never calls the plane
back, so a fault goes fabric -> here -> recovery -> fabric in a straight line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Protocol

from podfleet.control.drivers.base import JobDriver, RecoveryPort
from podfleet.control.jobmetrics import JobMetrics
from podfleet.control.lifecycle import ClusterState
from podfleet.control.runtime import ClusterRuntime
from podfleet.engine.timeline import Timeline
from podfleet.errors import UnavailableError
from podfleet.fabric.base import ChipState, FabricEvent, LinkControl, LinkState
from podfleet.store.protocol import ClusterStore, StoreProtocol
from podfleet.store.records import ChipHealthRecord

# How long after a store outage refused an event it is handled again (timeline seconds).
EVENT_RETRY_S = 1.0


def event_line(ev: FabricEvent) -> str:
    """A fabric event as a line of the cluster's log. Chip and link events keep their bare
    kind (reports match them; the line carries the chip or link beside it); a moved rank
    names the job, the rank and both chips, which no field beside the line carries."""
    d = ev.detail
    if ev.kind == "rank-moved":
        return (f"fabric: rank-moved: job {ev.job_id} rank {d.get('rank')} chip {d.get('from_chip')} -> "
                f"chip {d.get('to_chip')}")
    return f"fabric: {ev.kind}"


class EventJobs(Protocol):
    """What the router asks of the job manager: its recovery port and a cluster's driver."""

    @property
    def recovery(self) -> RecoveryPort | None: ...

    @property
    def drivers(self) -> Mapping[str, JobDriver]: ...

    def schedule(self, rt: ClusterRuntime) -> None:
        """Give free chips to waiting jobs (a fabric that recovered may run them now)."""


def save_health(store: ClusterStore, rt: ClusterRuntime) -> None:
    """Persist every chip's state (and whether it is a spare) for a restart to read."""
    states = rt.chip_states()
    store.save_chip_health([ChipHealthRecord(rt.id, i, s.value, bool(rt.spare_mask[i])) for i, s in enumerate(states)])


def save_links(store: ClusterStore, rt: ClusterRuntime) -> None:
    """Persist which links are down or degraded with the cluster, for a restart to set
    again (a fresh twin has every link up)."""
    states = {i: s.value for i, s in enumerate(rt.fabric.link_states()) if s != LinkState.UP}
    if rt.set_links(states):
        store.save_cluster(rt.rec)


def restore_health(store: ClusterStore, rt: ClusterRuntime) -> None:
    """What a restart keeps of the chips' health (``save_health``): failed chips isolated
    and degraded chips degraded (a fresh twin would otherwise heal them all)."""
    fab = rt.fabric
    for h in store.list_chip_health(rt.id):
        if h.chip >= rt.topology.n_chips:
            continue
        if h.state in (ChipState.FAILED, ChipState.ISOLATED):
            fab.set_chip_state(h.chip, ChipState.ISOLATED, "isolated before the restart")
        elif h.state == ChipState.DEGRADED and fab.chip_states()[h.chip] == ChipState.HEALTHY:
            fab.set_chip_state(h.chip, ChipState.DEGRADED, "degraded before the restart")


def restore_links(rt: ClusterRuntime) -> None:
    """What a restart keeps of the links (``save_links``): down links down and degraded
    links degraded (a fresh twin would show them whole, and a job would count as rerouted
    over a link that is up). Set once the plane is subscribed: the link events reach the
    recovery service, whose link flow reroutes again and whose ``LinkImpact`` picks up
    each job's step time from before the fault, persisted with the job."""
    fab, links = rt.fabric, rt.rec.status.links or {}
    if not links or not isinstance(fab, LinkControl):
        return
    now = fab.link_states()
    for key, word in links.items():
        link = int(key)
        if link < len(now) and now[link] == LinkState.UP and word != LinkState.UP.value:
            fab.set_link_state(link, LinkState(word), f"{word} before the restart")


class FabricEvents:
    def __init__(self, tl: Timeline, store: StoreProtocol, now: Callable[[], float],
                 clusters: Mapping[str, ClusterRuntime], jobs: EventJobs, metrics: JobMetrics) -> None:
        self.tl, self.store, self.now = tl, store, now
        self.clusters, self.jobs, self.metrics = clusters, jobs, metrics

    def subscribe(self, rt: ClusterRuntime) -> None:
        rt.fabric.subscribe(functools.partial(self._on_event, rt))

    def _on_event(self, rt: ClusterRuntime, ev: FabricEvent) -> None:
        self.tl.call_at(0, lambda: self.handle(rt, ev))

    def handle(self, rt: ClusterRuntime, ev: FabricEvent) -> None:
        if rt.id not in self.clusters:
            return
        if ev.kind in ("fabric-degraded", "fabric-recovered"):
            self._fabric_health(rt, ev)
            return
        if ev.kind not in ("progress", "checkpoint", "thermal-throttle") and not ev.kind.startswith("job-"):
            rt.logs.append(self.now(), event_line(ev), chip=ev.chip, link=ev.link)
        if ev.kind == "progress":  # memory only: progress is persisted with checkpoints
            self._to_jobs(rt, ev)
            if ev.job_id is not None:
                self.metrics.record(ev.job_id, self.now(), ev.detail)
            return
        # One commit per event: a checkpoint's two transitions and its record go together.
        stack = ExitStack()
        try:
            stack.enter_context(self.store.transaction())
        except UnavailableError as exc:
            # The store does not answer: nothing of the event was applied yet, so it is
            # handled again a little later, as often as it takes (no job wedges waiting
            # for a checkpoint or an exit the plane never recorded).
            self.tl.emit("event-retry", event=ev.kind, job=ev.job_id, reason=exc.message)
            self.tl.call_at(EVENT_RETRY_S, lambda: self.handle(rt, ev))
            return
        with stack:
            if ev.chip is not None and ev.kind.startswith("chip-") and ev.kind != "chip-failed":
                save_health(self.store, rt)
            elif ev.link is not None and ev.kind.startswith("link-"):
                save_links(self.store, rt)
            self._to_jobs(rt, ev)
            self._audit_fabric_recovery(rt, ev)

    def _to_jobs(self, rt: ClusterRuntime, ev: FabricEvent) -> None:
        rec = self.jobs.recovery
        if rec is not None and rec.on_event(rt, ev):
            return  # a recovery flow took the fault over
        drv = self.jobs.drivers.get(rt.id)
        if drv is not None:
            drv.on_event(ev)

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
        # A recovery may say how (a Ray cluster reconnected): shown as the reason then.
        reason = str(ev.detail.get("reason") or (ev.kind if ev.kind == "fabric-degraded" else ""))
        rt.logs.append(self.now(), f"fabric: {ev.kind}" + (f": {reason}" if reason else ""))
        if rt.rec.status.reason != reason and rt.state == ClusterState.ACTIVE:
            rt.set_reason(reason or "fabric recovered", self.now())
            self.store.save_cluster(rt.rec)
        if ev.kind == "fabric-recovered":
            self.jobs.schedule(rt)  # jobs waiting for the fabric look again now
