"""Dynamic load balancing in the live control plane: the scheduler's ``LoadMonitor`` on
a cluster's fabric, straggler detection and rebalancing, one ``ClusterBalancer`` each.

The monitor samples per-chip speed (clock / nominal), utilization and HBM bandwidth and
per-link slowdown every ``interval_s`` of timeline time. The issue's figure is 5 ms of
twin time; the control plane samples at its telemetry interval instead (1 s by default),
because the twin refreshes its telemetry arrays only once per its own interval (2 s): a
5 ms sampler would read the same arrays 400 times and, paced in real time, cost 200
engine wake-ups a second per cluster. ``ControlPlane(balance_interval_s=0.005)`` gives
the 5 ms figure in virtual time (``bench/balance.py`` measures balancing that way).

Each sample, every running job is checked by ``Rebalancer.step``; each action (move
micro-batches, re-partition layers, re-route the ring) is logged on the job with its
reason, counted in its ``scheduling`` status and emitted as a ``rebalance`` timeline
event. A fabric that declares ``Rebalanceable`` is then given the job's new per-rank
split (``set_work_split``, shares in rank order) and ring order (``set_ring_order``),
and the job's ``scheduling.work_split`` shows what it was given (``applied: false`` on
a fabric that cannot take it: the action is then advice only). Swapping a straggler
for a spare is left to recovery, which owns rank moves (a twin rank move pauses the
job; not worth it for a chip the split already works around).
The job's load-balance degree (mean / max chip utilization over its chips, over the
monitor's window) is kept in its ``scheduling`` status for DescribeTrainingJob.

Speed has two sources, chosen from what the fabric declares it measures
(``TelemetrySource.telemetry_metrics``): the chip's clock over the fastest clock where
the fabric reports clocks (the twin), or each rank's measured samples/s over the
fastest rank's where it reports those (worker fabrics: local and Ray, from the times
their workers report, ``fabric/local/speed.py``; a rank's samples/s does not depend on
the split it was given, so splits compare). Everything after the sample -- the window,
``Rebalancer.step``, the actions, ``set_work_split`` -- is the same code for both. A
measured speed is noisy (one step's timings), so a split is only changed when the
current one is more than ``MEASURED_TOLERANCE`` slower than the ideal; a chip with no
measurement yet (a gang that has not finished two steps) counts as full speed.

Cheap per sample: the owner map is re-read only when its ``version`` moved, a job is
re-tracked only when its allocation changed, degrees are computed for all jobs at once
from the utilization window of their chips only (a fleet's jobs hold a sixteenth of its
chips), and ``Rebalancer.step`` is skipped for a job whose last step took no action while
the window means it decides from (chip speed, which links are slow) are unchanged: it
would decide nothing again. (Its straggler counter then stands still; the balancer never
swaps for a spare, which is all that counter decides.) Those means are recomputed only
when the window changed: a fabric's metric arrays are replaced, never written in place
(read-only on the twin), so while the clock and the link bandwidths are the same arrays
every sample writes the row it replaces again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from podfleet.control.jobtable import Job
from podfleet.control.lifecycle import JobState
from podfleet.control.ports import PlaneCore
from podfleet.control.runtime import ClusterRuntime
from podfleet.fabric.base import Fabric, Rebalanceable, TelemetrySource
from podfleet.hardware.topology import GridTopology
from podfleet.scheduler.balance import DPJob, LoadMonitor, Rebalancer
from podfleet.scheduler.metrics import DegreePlan, degree_groups, planned_balance_degrees
from podfleet.scheduler.samples import same_frozen, util_ratio

_NEEDS = ("clock_mhz", "neuroncore_utilization", "hbm_bw_bytes_per_s")
_MEASURED_NEEDS = ("samples_per_s",)
# How much slower than the ideal split the current one must be before a measured speed
# moves work (the twin's clocks are exact: 1%). Per-step timings of worker processes
# jitter by a few percent on a shared host; 5% keeps the split from chasing that noise.
MEASURED_TOLERANCE = 0.05
# Samples in the window a measured speed is averaged over (at the telemetry interval: 1 s
# by default): long enough to average a few steps' jitter, short enough that a worker
# slowed now is rebalanced within seconds rather than after the twin's 40 samples.
MEASURED_WINDOW = 8


class ClusterBalancer:
    def __init__(self, plane: PlaneCore, rt: ClusterRuntime, interval_s: float, window: int = 40) -> None:
        self.plane, self.rt = plane, rt
        lm = rt.fabric.link_metrics()
        # Measured per-rank speed (worker fabrics) where the fabric reports no clocks.
        self.measured = not _declares(rt.fabric, _NEEDS)
        if self.measured:
            window = min(window, MEASURED_WINDOW)
        # A benchmark's no-rebalancing arm (and an operator's hold) pauses the actions; the
        # monitor still samples and the balance degree stays current.
        self.paused = False
        has_links = not self.measured and "src" in lm
        self.monitor = LoadMonitor(rt.topology.n_chips, len(lm["src"]) if has_links else 0, window=window)
        grid = rt.topology if isinstance(rt.topology, GridTopology) and has_links else None
        self.rebalancer = Rebalancer(
            self.monitor, tuple(grid.dims) if grid else (rt.topology.n_chips,),
            links=(np.asarray(lm["src"]), np.asarray(lm["dst"])) if grid else None,
            swap_after=2**62, emit=self._emit, window=min(20, window),
            tolerance=MEASURED_TOLERANCE if self.measured else 0.01,
        )
        self.block_ok = grid is not None
        self.jobs: dict[str, _Tracked] = {}
        # Per job, the inputs of its last ``Rebalancer.step`` when that step took no action.
        self._settled: dict[str, tuple[bytes, bytes]] = {}
        self._owners_version = -1
        self._running: dict[str, frozenset[int]] = {}
        self._speed = _Derived()  # clock -> relative speed, and its window
        self._slow = _Derived()  # link bandwidths -> slowdown, and its window
        self._inputs: tuple[tuple[int, int], tuple[bytes, bytes]] | None = None
        # The checked jobs' chips as one index, and each job's positions in it.
        self._gather: tuple[tuple[tuple[str, int], ...], np.ndarray, DegreePlan, DegreePlan] | None = None
        plane.tl.every(interval_s, self.tick)

    def tick(self) -> None:
        """One sample, then one balancing step on it (one timeline process for both)."""
        self.sample()
        self.step()

    def sample(self) -> None:
        """The monitor's sample (what ``LoadMonitor.attach`` reads, the same arrays):
        relative speed (clock / fastest clock), utilization (mean over cores), HBM
        bandwidth, link slowdown (nominal / measured bandwidth)."""
        fab, mon = self.rt.fabric, self.monitor
        m = fab.chip_metrics()
        if self.measured:
            mon.sample(self.plane.tl.now, _measured_speed(m["samples_per_s"]), util_ratio(m))
            return
        lm = fab.link_metrics()
        clock = m["clock_mhz"]
        speed = self._speed.get((clock,), _speed, mon.window)
        # The health monitor's ratio (``mean(axis=1) / 100``, the same sum and divisions),
        # computed once per fabric sample for both of them.
        util = util_ratio(m)
        bw, nominal = lm["bandwidth_bytes_per_s"], lm["nominal_bandwidth_bytes_per_s"]
        slow = self._slow.get((bw, nominal), _slowdown, mon.window)
        mon.sample(self.plane.tl.now, speed, util, np.asarray(m["hbm_bw_bytes_per_s"], float), slow)

    def _decision_inputs(self) -> tuple[bytes, bytes]:
        """What ``Rebalancer.step`` decides from, as bytes: the window means of speed and
        which links are slow (recomputed only when a window changed)."""
        mon = self.monitor
        key = (self._speed.window_gen(), self._slow.window_gen())
        if self._inputs is None or key != self._inputs[0] or -1 in key:
            inputs = (mon.mean_speed().tobytes(), (mon.mean_link_slowdown() > self.rebalancer.slow_link).tobytes())
            self._inputs = (key, inputs)
        return self._inputs[1]

    @staticmethod
    def supported(fabric: Fabric) -> bool:
        """The fabric declares the telemetry the monitor samples: clocks and link
        bandwidths (the twin), or measured per-rank samples/s on a fabric that takes a
        new split (``Rebalanceable``: local, Ray)."""
        if _declares(fabric, _MEASURED_NEEDS) and isinstance(fabric, Rebalanceable):
            return True
        if not _declares(fabric, _NEEDS):
            return False
        lm = fabric.link_metrics()
        return isinstance(lm, Mapping) and "bandwidth_bytes_per_s" in lm and "src" in lm

    def _emit(self, kind: str, **fields: object) -> None:
        self.plane.tl.emit(kind, cluster_id=self.rt.id, **fields)

    def step(self) -> None:
        rt, table, mon = self.rt, self.plane.table, self.monitor
        if rt.id not in self.plane.clusters or mon.n == 0:
            return
        if rt.owners.version != self._owners_version:  # chip -> job, re-derived only when it moved
            self._running = {j: frozenset(c) for j, c in rt.owners.jobs().items()}
            self._owners_version = rt.owners.version
            # Jobs are tracked only while in ``running`` (below): one can leave only now.
            for gone in [j for j in self.jobs if j not in self._running]:
                del self.jobs[gone]
                self._settled.pop(gone, None)
        running = self._running
        # What ``Rebalancer.step`` decides from (window means of speed and link slowdown):
        # a job whose last step changed nothing, on the same inputs, would change nothing again.
        inputs = self._decision_inputs()
        checked: list[tuple[Job, _Tracked]] = []
        for job_id, held in running.items():
            rec = table.find(job_id)
            if rec is None or rec.state != JobState.RUNNING:
                continue
            job = self.jobs.get(job_id)
            # The allocation is replaced, never changed in place: the same one, the same chips.
            alloc = rec.status.allocation
            chips = job.chips_in if job is not None and job.alloc is alloc else rec.chips
            # Unchanged since last seen (same rank order, owner map not moved): no set work.
            if job is None or job.held is not held or job.chips_in != chips:
                if not chips or frozenset(chips) != held:
                    continue  # being moved by recovery: wait for its new allocation
                if job is None or frozenset(job.dp.chips) != held:
                    job = self.jobs[job_id] = _Tracked(self._track(rec, chips))
                    self._settled.pop(job_id, None)
                    if rec.status.scheduling.work_split is not None:
                        self._apply(rec, chips, job.dp, ring=False)  # new chips: start again from an even split
                job.seen(chips, held)
            job.alloc = alloc
            if self._settled.get(job_id) != inputs and not self.paused:
                actions = self.rebalancer.step(job.dp)
                for a in actions:
                    table.scheduled(rec, rebalance=(a.kind, a.reason), view="none")
                    table.log(rec, f"rebalance ({a.kind}): {a.reason}")
                    # An automatic action: in the audit trail, by the system, like an operator's.
                    self.plane.audit("system:balancer", "Rebalance", rec.id, "ok",
                                     {"action": a.kind, "reason": a.reason})
                if actions:
                    self._settled.pop(job_id, None)
                    self._apply(rec, chips, job.dp,
                                ring={a.kind for a in actions} & {"reroute-ring", "swap-straggler"} != set())
                    table.refresh(rec)
                else:
                    self._settled[job_id] = inputs
            checked.append((rec, job))
        # Load-balance degrees of all checked jobs at once (jobs of one size together), from
        # the window mean of their chips' utilization (per chip the same sum as over all chips).
        gkey = tuple([(rec.id, id(job.idx)) for rec, job in checked])
        if self._gather is None or self._gather[0] != gkey:
            idx = np.concatenate([job.idx for _, job in checked]) if checked else np.zeros(0, np.int64)
            pos: dict[str, np.ndarray] = {}
            off = 0
            for rec, job in checked:
                pos[rec.id] = np.arange(off, off + len(job.idx))
                off += len(job.idx)
            # Each job's chips as positions in ``idx`` (the gathered columns) and as chips.
            self._gather = (gkey, idx, DegreePlan(degree_groups(pos)),
                            DegreePlan(degree_groups({rec.id: job.idx for rec, job in checked})))
        _, idx, groups, chip_groups = self._gather
        rows = slice(0, min(mon.n, mon.window))
        window = mon.util[rows]
        # Per chip the same sum either way: over the jobs' chips only where they are few
        # (a fleet), over all chips where they are most of them (a pod; the degrees then
        # index the chips directly, no gather of the jobs' chips first).
        k = window.shape[0]  # window means as ``mean(axis=0)``: the same sum, divided by the rows
        if 2 * len(idx) < window.shape[1]:
            degrees = planned_balance_degrees(np.add.reduce(window.take(idx, axis=1), axis=0) / k, groups)
        else:
            degrees = planned_balance_degrees(np.add.reduce(window, axis=0) / k, chip_groups)
        for rec, _ in checked:
            degree = round(degrees[rec.id], 4)
            if rec.status.scheduling.balance_degree != degree:
                # The degree alone moved: only the scheduling part of the view is re-rendered.
                table.scheduled(rec, balance_degree=degree, view="scheduling")

    def _apply(self, rec: Job, chips: tuple[int, ...], job: DPJob, *, ring: bool) -> None:
        """Hand the job's new split (rank order) and ring to the fabric, if it can take them."""
        share_of = {int(c): int(m) for c, m in zip(job.chips, job.microbatches, strict=True)}
        shares = [share_of[int(c)] for c in chips]
        fabric = self.rt.fabric
        applied = isinstance(fabric, Rebalanceable)
        if isinstance(fabric, Rebalanceable):
            fabric.set_work_split(rec.id, shares)
            if ring:
                fabric.set_ring_order(rec.id, job.chips)
        split: dict[str, object] = {"shares": shares, "applied": applied, "t": round(self.plane.tl.now, 3)}
        if ring:
            split["ring"] = [int(c) for c in job.chips]
        self.plane.table.scheduled(rec, work_split=split, view="none")

    def _track(self, rec: Job, chips: tuple[int, ...]) -> DPJob:
        # The split's unit is one sequence of the global batch (a rank can take any whole
        # number of them): micro_batch x num_micro_batches per rank at an even split.
        plan, alloc = rec.status.plan, rec.status.allocation
        per_rank = max(1, ((plan and plan.micro_batch) or 1) * ((plan and plan.num_micro_batches) or 8))
        shape = alloc.shape if alloc is not None else ()
        offset = (alloc.offset or ()) if alloc is not None else ()
        block = None
        if self.block_ok and len(shape) == len(self.rebalancer.dims) and len(offset) == len(shape) \
                and alloc is not None and not alloc.pod:
            block = (offset, shape)
        return DPJob(rec.id, chips, np.full(len(chips), per_rank, dtype=np.int64), block=block)


def _declares(fabric: Fabric, names: tuple[str, ...]) -> bool:
    return isinstance(fabric, TelemetrySource) and set(names) <= fabric.telemetry_metrics()


def _measured_speed(samples_per_s: np.ndarray) -> np.ndarray:
    """Each chip's samples/s over the fastest measured chip's; 1.0 where none is measured yet."""
    s = np.nan_to_num(np.asarray(samples_per_s, float))
    top = float(s.max()) if s.size else 0.0
    if top <= 0:
        return np.ones_like(s)
    out: np.ndarray = np.where(s > 0, s / top, 1.0)
    return out


def _speed(clock: np.ndarray) -> np.ndarray:
    c = np.asarray(clock, float)
    out: np.ndarray = c / c.max() if c.max() > 0 else c
    return out


def _slowdown(bw: np.ndarray, nominal: np.ndarray) -> np.ndarray:
    b = np.asarray(bw, float)
    out: np.ndarray = np.where(b > 0, np.asarray(nominal, float) / np.maximum(b, 1e-9), np.inf)
    return out


class _Derived:
    """An array derived from fabric metric arrays, derived again only when they are other
    arrays (or could have been written: not read-only), and the generation of the monitor
    window it is sampled into: ``window_gen()`` stays the same while every row of the
    window holds the same derived array (-1 until the window is all one array)."""

    __slots__ = ("_gen", "_run", "_sources", "_value", "_window")

    def __init__(self) -> None:
        self._sources: tuple[np.ndarray, ...] = ()
        self._value: np.ndarray | None = None
        self._gen = 0
        self._run = 0  # consecutive samples of the same derived array (at most the window)
        self._window = 1

    def get(self, sources: tuple[np.ndarray, ...], derive: Callable[..., np.ndarray], window: int) -> np.ndarray:
        """The derived array: ``derive(*sources)``, called again only when they changed."""
        value = self._value
        if value is None or not same_frozen(sources, self._sources):
            self._sources, self._value = sources, derive(*sources)
            value = self._value
            self._gen += 1
            self._run = 0
        self._window = window
        self._run = min(self._run + 1, window)
        return value

    def window_gen(self) -> int:
        return self._gen if self._run >= self._window else -1


class _Tracked:
    """A job the balancer follows: the rebalancer's ``DPJob``, and the job's chips in rank
    order as last seen (with their index array, for the balance degree) and the allocation
    they were read from."""

    __slots__ = ("alloc", "chips_in", "dp", "held", "idx")

    def __init__(self, dp: DPJob) -> None:
        self.dp = dp
        self.chips_in: tuple[int, ...] = ()
        self.idx = np.zeros(0, dtype=np.int64)
        self.held: frozenset[int] = frozenset()
        self.alloc: object = None

    def seen(self, chips: tuple[int, ...], held: frozenset[int]) -> None:
        self.chips_in, self.idx, self.held = chips, np.asarray(chips, dtype=np.int64), held
