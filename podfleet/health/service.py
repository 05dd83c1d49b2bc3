"""Health for a ``ControlPlane``: telemetry, scans, alerts, failure prediction. Built by
the composition root (``podfleet.compose``), which also hands the plane its health view
(``HealthPort``) and this service the recovery's ``drain_chip`` (``DrainPort``); recovery
and firmware rollouts are their own services (``podfleet.recovery``).

One timeline process every ``interval_s`` (2 s) runs the ``HealthMonitor`` of each
active cluster whose fabric declares ``TelemetrySource`` (telemetry history, vectorized
scan, failure prediction -> proactive drain through the drain port), saves closed
rollup buckets to the store (with retention) and gives chip/link health to the hardware
snapshot (``source``).

Commands (engine thread; the API calls them through ``plane.call``):
    svc.list_alerts(cluster, state=None) / svc.acknowledge(alert_id, actor=)
    svc.telemetry(cluster, scope=, metric=, range_=, target=)
    svc.health_view(cluster) -> {"chips": [...], "links": [...]}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol, cast

from podfleet.control.lifecycle import TERMINAL, ClusterState
from podfleet.control.ports import PlaneCore
from podfleet.control.runtime import ClusterRuntime, HealthSource
from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.fabric.base import ClusterConnection, TelemetrySource
from podfleet.health.alerts import AlertBook, AlertState
from podfleet.health.monitor import HealthMonitor
from podfleet.health.scan import HealthConfig
from podfleet.health.telemetry import ALL_METRICS, HOUR_S, MINUTE_S, RETENTION_S, RollupRow, frozen
from podfleet.store.records import RollupRecord

log = logging.getLogger(__name__)

FABRIC_UNREACHABLE = "fabric-unreachable"  # the alert rule of a lost outside cluster (a Ray head)


class JobViews(Protocol):
    @property
    def views(self) -> Mapping[str, dict[str, Any]]:
        """Job id -> its view (replaced whole on every change)."""


class HealthPlane(PlaneCore, Protocol):
    """What the health service uses of the plane (times shown: ``tl.wall_at``)."""

    @property
    def jobs(self) -> JobViews: ...


class DrainPort(Protocol):
    """Where a predicted failure goes (``RecoveryService`` is one, wired by compose)."""

    def drain_chip(self, rt: ClusterRuntime, chip: int, reason: str) -> object:
        """Move the work off ``chip`` while it works; None where no recovery can."""


class HealthService:
    def __init__(self, plane: HealthPlane, config: HealthConfig | None = None, *,
                 drain: DrainPort | None = None) -> None:
        self.plane = plane
        self.cfg = config or HealthConfig()
        self.book = AlertBook(affected=self._affected_jobs)
        self.drain = drain
        self.monitors: dict[str, HealthMonitor] = {}
        self.scan_s: list[float] = []
        self._last_prune = -HOUR_S
        self._declares: dict[str, tuple[object, bool]] = {}  # cluster -> (fabric, declares TelemetrySource)
        self._connects: dict[str, tuple[object, bool]] = {}  # cluster -> (fabric, declares ClusterConnection)
        self._tick_errors: set[tuple[str, str]] = set()  # (cluster, exception type) already logged
        self._mounts_seen: dict[str, tuple[tuple[str, str, int], list[dict[str, Any]]]] = {}

    def start(self) -> None:
        """Scan on the plane's timeline every ``interval_s``."""
        self.plane.tl.every(self.cfg.interval_s, self.tick)

    def source(self, cluster_id: str) -> HealthSource | None:
        """The cluster's chip/link health for its hardware snapshot (``HealthPort``)."""
        return self.monitors.get(cluster_id)

    # --- the loop ------------------------------------------------------------------------
    def tick(self) -> None:
        plane = self.plane
        for cid in [c for c in self.monitors if c not in plane.clusters]:
            del self.monitors[cid]
            self._declares.pop(cid, None)
            self._connects.pop(cid, None)
        for rt in list(plane.clusters.values()):
            if rt.state == ClusterState.ACTIVE:
                self._connection(rt)
            if rt.state != ClusterState.ACTIVE or not self._telemetry(rt):
                # The monitor reads chip telemetry (temperature, ECC, NeuronCore use); worker
                # slots of a local or Ray cluster report process metrics only.
                continue
            mon = self.monitors.get(rt.id) or self._monitor(rt)
            try:
                mon.tick()
            except Exception as exc:
                # One cluster's bad telemetry must not stop the engine thread (every cluster's
                # jobs and the API stop with it) nor the other clusters' scans: log it once
                # per cluster and kind, and scan again next tick.
                key = (rt.id, type(exc).__name__)
                if key not in self._tick_errors:
                    self._tick_errors.add(key)
                    log.exception("health scan of cluster %s failed; its scans go on next tick", rt.rec.name)
        now = plane.now()
        if now - self._last_prune >= HOUR_S:
            self._last_prune = now
            for res, keep in RETENTION_S.items():
                plane.store.prune_rollups(resolution_s=res, before=now - keep)

    def _connection(self, rt: ClusterRuntime) -> None:
        """A fabric that lost its outside cluster (a Ray head): a critical alert on the
        cluster's ``fabric`` while it is unreachable, resolved when it reconnects."""
        fab = rt.fabric
        hit = self._connects.get(rt.id)
        if hit is None or hit[0] is not fab:
            hit = self._connects[rt.id] = (fab, isinstance(fab, ClusterConnection))
        if not hit[1]:
            return
        st = cast(ClusterConnection, fab).connection_status()
        now = self.plane.now()
        if st.get("state") == "unreachable":
            self.book.fire(cluster_id=rt.id, target="fabric", rule=FABRIC_UNREACHABLE, severity="critical",
                           message=str(st.get("reason") or "the fabric's cluster is unreachable"), now=now)
        else:
            self.book.clear(rt.id, "fabric", FABRIC_UNREACHABLE, now)

    def _telemetry(self, rt: ClusterRuntime) -> bool:
        """Whether the cluster's fabric declares ``TelemetrySource``, asked once per fabric
        (a runtime-checkable protocol's ``isinstance`` costs tens of microseconds)."""
        fab = rt.fabric
        hit = self._declares.get(rt.id)
        if hit is None or hit[0] is not fab:
            hit = self._declares[rt.id] = (fab, isinstance(fab, TelemetrySource))
        return hit[1]

    def _monitor(self, rt: ClusterRuntime) -> HealthMonitor:
        tl = self.plane.tl

        def sink(rows: list[RollupRow]) -> None:
            # The read-only arrays as they are: both stores only read a record's values as a
            # sequence of floats (the memory store keeps them, SQL writes them as JSON), and a
            # fleet's minute as lists was millions of Python floats made and dropped again.
            self.plane.store.save_rollups([RollupRecord(r.cluster_id, r.scope, r.metric, r.resolution_s,
                                                        tl.wall_at(r.t_start), cast("list[float]", r.avg),
                                                        cast("list[float]", r.min), cast("list[float]", r.max),
                                                        r.count) for r in rows])

        # Job views are replaced whole on every change: a view seen before gives the same entry.
        seen: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {}

        def jobs() -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            cid = rt.id
            for jid, v in list(self.plane.jobs.views.items()):
                hit = seen.get(jid)
                if hit is not None and hit[0] is not v:
                    w = hit[0]
                    # Re-rendered for its ``scheduling`` part alone (the balancer's degree, at
                    # nearly every tick): the same state and progress objects, the same entry.
                    if w["progress"] is v["progress"] and w["state"] is v["state"] \
                            and w["cluster_id"] is v["cluster_id"]:
                        hit = seen[jid] = (v, hit[1])
                if hit is None or hit[0] is not v:
                    # A running job's view is replaced at nearly every tick (its progress and
                    # balance degree move): the state string is looked up in the StrEnum set
                    # as it is (the same hash and equality as its member), no enum built.
                    state = v["state"]
                    entry = None
                    if v["cluster_id"] == cid and state not in TERMINAL:
                        p = v["progress"]
                        entry = {"state": state, "step": p.get("step", 0), "tokens_per_s": p.get("tokens_per_s"),
                                 "step_time_s": p.get("step_time_s")}
                    hit = seen[jid] = (v, entry)
                if hit[1] is not None:
                    out[jid] = hit[1]
            return out

        port = self.drain

        def drain(chip: int, reason: str) -> object:
            # Only where recovery can move a rank off a chip that still works (the twin).
            return port.drain_chip(rt, chip, reason) if port is not None else None

        mon = HealthMonitor(rt.id, rt.fabric, self.plane.tl, book=self.book, config=self.cfg, drain=drain,
                            sink=sink, jobs=jobs, mounts=lambda: self._mounts(rt))
        # Rollups kept in the store survive a restart: reload them into memory.
        for res in (MINUTE_S, HOUR_S):
            rows = self.plane.store.list_rollups(rt.id, resolution_s=res, since=self.plane.now() - RETENTION_S[res])
            mon.history.load([RollupRow(r.cluster_id, r.scope, r.metric, r.resolution_s, tl.timeline_at(r.t_start),
                                        frozen(r.avg), frozen(r.min), frozen(r.max), r.count) for r in rows],
                             now=self.plane.tl.now)
        self.monitors[rt.id] = mon
        return mon

    def _mounts(self, rt: ClusterRuntime) -> list[dict[str, Any]]:
        """The cluster's storage mounts as the deployment left them (the twin models no
        capacity, so only their state is scanned)."""
        step = "done"
        for s in rt.deployment.get("steps", ()):
            if s["name"] == "storage-mounts":
                step = s["state"]  # the last one, as a dict of the steps by name keeps it
        state = "ok" if step in ("done", "succeeded", "ok") else "unavailable"
        # Asked every scan: the same mounts in the same state are the same (unchanged) list.
        key = (rt.id, state, rt.spec.storage_nodes)
        hit = self._mounts_seen.get(rt.id)
        if hit is None or hit[0] != key:
            hit = self._mounts_seen[rt.id] = (key, [{"name": f"storage-{i}", "state": state}
                                                    for i in range(rt.spec.storage_nodes)])
        return hit[1]

    # --- reads and commands -----------------------------------------------------------
    def _mon(self, ref: str) -> tuple[ClusterRuntime, HealthMonitor]:
        rt = self.plane.resolve(ref)
        mon = self.monitors.get(rt.id) or self._monitor(rt)
        return rt, mon

    def list_alerts(self, ref: str, state: str | None = None) -> list[dict[str, Any]]:
        rt = self.plane.resolve(ref)
        if state is not None and state not in tuple(AlertState):
            raise InvalidInputError(f"state must be one of {', '.join(AlertState)}, got {state!r}", field="state")
        return [a.to_dict(wall=self.plane.tl.wall_at) for a in self.book.all(rt.id) if state is None or a.state == state]

    def _affected_jobs(self, cluster_id: str, target: str) -> list[str]:
        """The jobs on an alert's target now: a chip's holder, a link's endpoints' holders,
        or the job itself (``chip:12``, ``link:3-7``, ``job:job-...``)."""
        rt = self.plane.clusters.get(cluster_id)
        kind, _, what = target.partition(":")
        if kind == "job":
            return [what]
        if rt is None:
            return []
        chips: list[int] = []
        try:
            if kind == "chip":
                chips = [int(what)]
            elif kind == "link":
                chips = [int(x) for x in what.split("-")[:2]]
        except ValueError:
            return []
        return sorted({j for c in chips if (j := rt.owners.get(c)) is not None})

    def acknowledge(self, alert_id: str, *, actor: str = "system") -> dict[str, Any]:
        def do() -> tuple[dict[str, Any], str]:
            return self.book.acknowledge(alert_id, actor).to_dict(wall=self.plane.tl.wall_at), alert_id

        return self.plane.mutation("AcknowledgeAlert", actor, alert_id, do)

    def telemetry(self, ref: str, *, scope: str = "chip", metric: str = "temperature_c", range_: str = "realtime",
                  target: int | None = None) -> dict[str, Any]:
        rt, mon = self._mon(ref)
        window = mon.history.raw.get(scope)
        if window is not None and metric not in window.buf and metric in ALL_METRICS:
            # A name the API knows, but not for this scope: that series does not exist.
            raise NotFoundError(f"cluster {rt.rec.name} records no {scope} metric {metric!r}; "
                                f"{scope} metrics: {', '.join(window.buf)}", field="metric", allowed=list(window.buf))
        if window is not None and target is not None and not 0 <= target < window.n:
            raise NotFoundError(f"cluster {rt.rec.name} has {scope}s 0-{window.n - 1}; {scope} {target} does not "
                                "exist", field="target", allowed=f"0-{window.n - 1}")
        out = mon.history.query(scope, metric, range_, self.plane.tl.now, target)
        wall = self.plane.tl.wall_at
        out["t"] = [wall(t) for t in out["t"]]
        return {"cluster_id": rt.id, "scope": scope, "metric": metric, "target": target, **out}

    def health_view(self, ref: str) -> dict[str, Any]:
        _rt, mon = self._mon(ref)
        return {"chips": mon.chip_health(), "links": mon.link_health()}
