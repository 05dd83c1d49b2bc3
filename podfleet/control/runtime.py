"""One cluster's live state on the engine thread, and its hardware snapshot.

``DescribeClusterHardware`` is served from ``hardware_bytes``: the whole pod rendered
to JSON once per telemetry tick (and after a state change), never per request. Readers
on API threads only ever see a complete snapshot: the engine swaps the reference.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from podfleet.control.chipmodes import ChipMode, ChipModes
from podfleet.control.clusterrecord import ClusterRecordOwner
from podfleet.control.lifecycle import ClusterState
from podfleet.control.logbuf import LogBuffer, rfc3339
from podfleet.control.owners import ChipOwners
from podfleet.control.readout import EMPTY_READOUT, FabricReadout, read_fabric
from podfleet.control.scheduling import (
    chip_utilization,
    new_scheduler,
    queue_waits,
    scheduler_metrics,
)
from podfleet.control.snapshot import EMPTY, HardwareSnapshot, link_index, metric_column
from podfleet.control.specs import ClusterSpec
from podfleet.errors import NotFoundError
from podfleet.fabric.base import ChipState, Fabric, WorkerPlacement
from podfleet.hardware.topology import AXIS_NAMES, GridTopology, Topology
from podfleet.scheduler.extension import ShapePlanner
from podfleet.scheduler.jobs import JobPhase
from podfleet.scheduler.state import FREE
from podfleet.store.records import ClusterRecord
from podfleet.wire import JsonObject


class HealthSource(Protocol):
    """Per-chip and per-link health for the snapshot: "ok" | "warning" | "critical"."""

    def chip_health(self) -> list[str]: ...

    def link_health(self) -> list[str]: ...


class Balancer(Protocol):
    """The cluster's load balancer (``control.balancing.ClusterBalancer``), held here so it
    lives as long as the cluster; the runtime never calls it (the timeline ticks it)."""

    def step(self) -> None: ...


# Scheduler figures are kept fresh (each tick, when something changed) for this long of
# timeline time after a read, and otherwise re-computed at most this often, so the first
# read after a quiet spell never sees figures older than that.
METRICS_LEASE_S = 60.0
# A fabric's chip state (the enum or its value) -> the enum.
_AS_CHIP_STATE: dict[object, ChipState] = {**{s: s for s in ChipState}, **{s.value: s for s in ChipState}}
METRICS_IDLE_S = 60.0

DEPLOY_STEPS = ("chip-initialisation", "interconnect-configuration", "storage-mounts", "self-test")


class ClusterRuntime(ClusterRecordOwner):
    def __init__(self, rec: ClusterRecord, spec: ClusterSpec, topology: Topology, fabric: Fabric, *,
                 spares: tuple[int, ...] | None = None, clock: Callable[[], float] | None = None,
                 planner: ShapePlanner | None = None) -> None:
        self.rec = rec
        self.spec = spec
        self.topology = topology
        self.fabric = fabric
        n = topology.n_chips
        # Spares as chosen at create (``scheduling.cluster_spares``: named by the operator,
        # or where they keep the largest blocks free) and persisted with the cluster.
        self.spares: tuple[int, ...] = tuple(spares) if spares is not None else tuple(range(n - spec.spares, n))
        self.spare_mask = np.zeros(n, dtype=bool)
        self.spare_mask[list(self.spares)] = True
        self.owners = ChipOwners()  # chip -> job id holding it (written only through its methods)
        # The operator's cordons and drains (``control.chips``), and what spare accounting
        # needs: the spares the cluster started with, and why it is short of spares.
        self.modes = ChipModes(rec.status.chip_modes)
        self.original_spares: tuple[int, ...] = tuple(rec.status.original_spares or self.spares)
        self.spare_shortfall = ""
        self.settled_key: tuple[Any, ...] | None = None
        # The link states last folded into the scheduler, with its pods' link versions then.
        self.synced_links: tuple[int, list[Any]] | None = None
        self.synced_health: tuple[list[ChipState], tuple[int, ...], np.ndarray] | None = None
        # The ring traffic last folded (a copy), and the fabric's chip states last converted
        # (as it gave them, and as ChipStates): a fleet's sync skips what did not move.
        self.synced_traffic: np.ndarray | None = None
        self._states_seen: tuple[list[Any], list[ChipState]] | None = None
        # The cluster's scheduler (queue, gang placement, preemption): engine thread only.
        self.scheduler = new_scheduler(topology, self.spares, spec.quotas, clock or (lambda: 0.0), planner)
        self.preempting: dict[str, None] = {}  # preemptors whose victims are not all saved yet
        # Victims whose on-demand checkpoint is being written: job id -> (step, when done).
        self.checkpoint_writes: dict[str, tuple[int, float]] = {}
        # DescribeCluster's ``scheduler`` object and the queue waits /metrics shows, computed
        # on the engine thread (readers on API threads only see whole dicts) and only while
        # someone reads them: a read marks them wanted for ``METRICS_LEASE_S`` of timeline
        # time; each tick then re-computes them if anything they derive from moved.
        self._sched_metrics: JsonObject = {}
        self._queue_waits: dict[str, float] = {}
        self._clock = clock or (lambda: 0.0)
        self.metrics_read_at = -float("inf")  # timeline time of the last read
        self.metrics_at = -float("inf")  # timeline time they were last brought up to date
        self._metrics_key: tuple[Any, ...] | None = None
        self.balancer: Balancer | None = None  # on fabrics that declare the telemetry it samples
        self.logs = LogBuffer()
        # The live deployment view (``control.deploy`` moves it); the record has it as of
        # the last save (``set_deployment``).
        self.deployment: JsonObject = rec.status.deployment or {
            "state": "pending",
            "percent": 0,
            "steps": [{"name": s, "state": "pending"} for s in DEPLOY_STEPS],
        }
        if isinstance(topology, GridTopology):
            self._coords = [list(topology.coords(i)) for i in range(n)]
            axis_names = [a.name for a in topology.axes]
        else:
            self._coords = [[i] for i in range(n)]
            axis_names = list(AXIS_NAMES)
        self._links = [
            {"index": lk.index, "src": lk.src, "dst": lk.dst, "axis": axis_names[lk.axis],
             "bw_gbps": round(lk.bw_bytes_per_s / 1e9, 3)}
            for lk in topology.links
        ]
        self._link_src, self._link_by_src = link_index(self._links)
        self.snapshot: HardwareSnapshot = EMPTY
        self._owners_at = -1  # the owners' version the snapshot's copy was taken at
        # Encodings of ``hardware``, made on first read after each render (a fleet's
        # snapshot is read a page or a summary at a time; most ticks nobody wants it whole).
        self._encoded: tuple[object, bytes, bytes] | None = None
        self.rendered_at = -float("inf")  # timeline time of the snapshot
        # Set by readers, cleared by a render: ticks render only a snapshot someone reads,
        # so a simulated day without readers costs no JSON.
        self.wanted = False
        self._placement: tuple[WorkerPlacement, ...] | None = None  # the fabric, if it says where workers are
        # What the Prometheus collectors export (``control.readout``), read on the engine
        # thread when a scrape asks (``ControlPlane.metrics_readouts``).
        self.readout: FabricReadout = EMPTY_READOUT

    @property
    def id(self) -> str:
        return self.rec.id

    @property
    def owner(self) -> Mapping[int, str]:
        """chip -> job id (read only; ``owners`` writes)."""
        return self.owners

    @property
    def state(self) -> ClusterState:
        return ClusterState(self.rec.state)

    def chip_states(self) -> list[ChipState]:
        states: list[Any] = list(self.fabric.chip_states())  # ours: a fabric may keep changing its own
        seen = self._states_seen
        if seen is not None and seen[0] == states:
            # Unchanged since the last call (one C-level compare; the twin's states are
            # ChipState members, compared by identity): a fleet's 65,536 lookups skipped.
            return list(seen[1])
        try:  # one C-level pass (a fleet has 65,536 chips); an unknown value fails as before
            out = list(map(_AS_CHIP_STATE.__getitem__, states))
        except (KeyError, TypeError):
            out = [ChipState(s) for s in states]
        self._states_seen = (states, out)
        return list(out)

    def usable(self) -> np.ndarray:
        """Chips normal placement may use: healthy, not a spare, not held by a job."""
        ok = np.array([s == ChipState.HEALTHY for s in self.chip_states()], dtype=bool)
        ok &= ~self.spare_mask
        if self.owners:
            ok[list(self.owners)] = False
        if self.modes:
            ok[list(self.modes)] = False
        return ok

    def scheduler_holds(self, chip: int) -> bool:
        """True when the scheduler's own arrays give ``chip`` to a job (placed or nominated)."""
        pod, local = self.scheduler.cluster.locate(chip)
        return bool(pod.owner[local] != FREE)

    def check_chip(self, chip: int) -> int:
        """``chip`` when the cluster has it; else a 404 that names the cluster's range (the
        API's schema states only the absolute bound, the largest cluster's)."""
        n = self.topology.n_chips
        if not 0 <= chip < n:
            raise NotFoundError(f"cluster {self.rec.name} has chips 0-{n - 1}; chip {chip} does not exist",
                                field="chip", allowed=f"0-{n - 1}")
        return chip

    def replacement_chips(self) -> list[int]:
        """Chips a recovering rank may move to: free healthy spares first, then any free chip."""
        states = self.chip_states()
        free = [i for i, s in enumerate(states)
                if s == ChipState.HEALTHY and i not in self.owners and i not in self.modes]
        return sorted(free, key=lambda i: (not self.spare_mask[i], i))

    def view(self) -> JsonObject:
        rec = self.rec
        return {
            "id": rec.id,
            "name": rec.name,
            "state": rec.state,
            "type": self.spec.type,
            "fabric": self.spec.fabric,
            "chips": self.topology.n_chips,
            "dims": list(self.topology.dims),
            "chip_type": self.topology.chip_type,
            "spares": list(self.spares),
            "spare_shortfall": self.spare_shortfall,
            "cordoned": self.modes.chips_in(ChipMode.CORDONED),
            "draining": self.modes.chips_in(ChipMode.DRAINING),
            "spec": self.spec.to_dict(),
            "deployment": self.deployment,
            "jobs_running": self.owners.job_count(),
            "scheduler": self.sched_metrics,
            "reason": rec.status.reason,
            "created_at": rfc3339(rec.created_at),
            "updated_at": rfc3339(rec.updated_at),
        }

    # --- scheduler figures --------------------------------------------------------
    @property
    def sched_metrics(self) -> JsonObject:
        """DescribeCluster's ``scheduler`` object as last computed (any thread; marks it wanted)."""
        self.metrics_read_at = self._clock()
        return self._sched_metrics

    @property
    def queue_waits(self) -> dict[str, float]:
        """Total time queued per job, as last computed (any thread; marks it wanted)."""
        self.metrics_read_at = self._clock()
        return self._queue_waits

    def metrics_wanted(self) -> bool:
        """Read lately, or not brought up to date for ``METRICS_IDLE_S`` (bounds how old the
        figures a first read after a quiet spell sees can be)."""
        now = self._clock()
        return now - self.metrics_read_at <= METRICS_LEASE_S or now - self.metrics_at >= METRICS_IDLE_S

    def _metrics_inputs(self) -> tuple[tuple[Any, ...], np.ndarray | None]:
        """What the figures derive from: the scheduler's arrays (pod versions), its jobs'
        phases, the owner map, the fabric's utilization, and the clock while jobs wait."""
        sched = self.scheduler
        util = chip_utilization(self.fabric)
        pods = sched.cluster.pods
        key = (
            self.owners.version,
            sum(p.version for p in pods), sum(p.link_version for p in pods),
            tuple((j, r.phase) for j, r in sched.jobs.items()),
            self._clock() if sched.pending or any(r.phase is JobPhase.NOMINATED for r in sched.jobs.values()) else None,
            util.tobytes() if util is not None else None,
        )
        return key, util

    def refresh_metrics(self, *, force: bool = False) -> bool:
        """Re-compute the scheduler figures if anything they derive from changed since the
        last computation (engine thread). Returns whether it computed."""
        key, util = self._metrics_inputs()
        self.metrics_at = self._clock()  # up to date as of now, computed or not
        if not force and key == self._metrics_key:
            return False
        self._sched_metrics = scheduler_metrics(self.scheduler, self.spares, util)
        self._queue_waits = queue_waits(self.scheduler)
        self._metrics_key = key
        return True

    def tick_metrics(self) -> None:
        """Per telemetry tick (engine thread): compute the figures only if wanted and stale."""
        if self.metrics_wanted():
            self.refresh_metrics()

    # --- the snapshot -------------------------------------------------------------
    def render_hardware(self, now: float, t: float | None = None, health: HealthSource | None = None) -> None:
        """Render the snapshot (engine thread). ``now``: unix time shown; ``t``: timeline
        time; ``health``: the cluster's health monitor, when one scans it."""
        self.wanted = False
        self.tick_metrics()
        if t is not None:
            self.rendered_at = t
        fab = self.fabric
        placement = self._placed()
        hosts: Sequence[str] = ()
        workers: Mapping[int, Mapping[str, Any]] = {}
        if placement is not None:
            hosts, workers = placement.chip_hosts(), placement.chip_workers()
        # Columns as of now; chip and link objects are built from them when read
        # (``control.snapshot``): a fleet is read a page or a summary at a time.
        self.snapshot = HardwareSnapshot(
            head={"cluster_id": self.rec.id, "name": self.rec.name, "state": self.rec.state,
                  "type": self.spec.type, "dims": list(self.topology.dims), "time": rfc3339(now)},
            coords=self._coords,
            states=[str(s) for s in fab.chip_states()],
            spare=self.spare_mask.copy(),
            modes={c: self.modes[c] for c in self.modes},
            owners=self._owners_copy(),
            metrics={k: metric_column(v) for k, v in fab.chip_metrics().items()},
            chip_health=health.chip_health() if health is not None else None,
            link_defs=self._links, link_src=self._link_src, link_by_src=self._link_by_src,
            link_states=list(fab.link_states()),
            link_metrics={k: metric_column(v) for k, v in fab.link_metrics().items() if k not in _LINK_SKIP},
            link_health=health.link_health() if health is not None else None,
            hosts=hosts, workers=workers, placed=placement is not None,
        )

    def _placed(self) -> WorkerPlacement | None:
        """The fabric, if it says where workers are (asked once: a runtime protocol's
        isinstance is not free)."""
        if self._placement is None:
            fab = self.fabric
            self._placement = (fab,) if isinstance(fab, WorkerPlacement) else ()
        return self._placement[0] if self._placement else None

    def publish_readout(self, t: float) -> FabricReadout:
        """Read the fabric for the Prometheus collectors (engine thread); ``t``: timeline time."""
        self.readout = read_fabric(self.fabric, t, self._placed())
        return self.readout

    def _owners_copy(self) -> Mapping[int, str]:
        # Kept while nobody's chips changed: the last snapshot's copy is still right.
        prev = self.snapshot.owners
        if self._owners_at == self.owners.version and self.snapshot is not EMPTY:
            return prev
        self._owners_at = self.owners.version
        return self.owners.copy()

    @property
    def hardware(self) -> JsonObject:
        """The whole snapshot as a dict (built once per render, on first use)."""
        return self.snapshot.as_dict()

    def _encode(self) -> tuple[object, bytes, bytes]:
        snap = self.snapshot  # replaced whole by each render: a reader keeps the one it took
        enc = self._encoded
        if enc is None or enc[0] is not snap:
            raw = json.dumps(snap.as_dict(), separators=(",", ":")).encode()
            # Compressed once per snapshot too: most clients accept gzip, and 6x fewer bytes
            # per response is less work for both ends of every read.
            enc = (snap, raw, gzip.compress(raw, compresslevel=5, mtime=0))
            self._encoded = enc
        return enc

    @property
    def hardware_bytes(self) -> bytes:
        """The whole snapshot as JSON (encoded once per rendered snapshot, on first read)."""
        return self._encode()[1]

    @property
    def hardware_gzip(self) -> bytes:
        return self._encode()[2]

    def chip_json(self, chip: int) -> bytes:
        """One chip of the snapshot as JSON."""
        snap = self.snapshot
        if not 0 <= chip < snap.n_chips:
            raise IndexError(chip)
        return json.dumps(snap.chip(chip), separators=(",", ":")).encode()


# Link metrics that are already fields of the link (or static) are not repeated per tick.
_LINK_SKIP = frozenset({"src", "dst", "state", "nominal_bandwidth_bytes_per_s", "latency_s"})
