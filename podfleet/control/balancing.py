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
event. Swapping a straggler for a spare is left to recovery, which owns rank moves.
The job's load-balance degree (mean / max chip utilization over its chips, over the
monitor's window) is kept in its ``scheduling`` status for DescribeTrainingJob.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from podfleet.control.jobtable import Job
from podfleet.control.lifecycle import JobState
from podfleet.fabric.base import Fabric, TelemetrySource
from podfleet.hardware.topology import GridTopology
from podfleet.scheduler.balance import DPJob, LoadMonitor, Rebalancer
from podfleet.scheduler.metrics import balance_degree

if TYPE_CHECKING:
    from podfleet.control.plane import ControlPlane
    from podfleet.control.runtime import ClusterRuntime

_NEEDS = ("clock_mhz", "neuroncore_utilization", "hbm_bw_bytes_per_s")


class ClusterBalancer:
    def __init__(self, plane: ControlPlane, rt: ClusterRuntime, interval_s: float, window: int = 40) -> None:
        self.plane, self.rt = plane, rt
        lm = rt.fabric.link_metrics()
        self.monitor = LoadMonitor(rt.topology.n_chips, len(lm["src"]), window=window)
        grid = rt.topology if isinstance(rt.topology, GridTopology) else None
        self.rebalancer = Rebalancer(
            self.monitor, tuple(grid.dims) if grid else (rt.topology.n_chips,),
            links=(np.asarray(lm["src"]), np.asarray(lm["dst"])) if grid else None,
            swap_after=2**62, emit=self._emit, window=min(20, window),
        )
        self.block_ok = grid is not None
        self.jobs: dict[str, DPJob] = {}
        self.monitor.attach(plane.tl, rt.fabric, interval_s)
        plane.tl.every(interval_s, self.step)

    @staticmethod
    def supported(fabric: Fabric) -> bool:
        """The fabric declares the telemetry the monitor samples (the twin, neuron)."""
        if not isinstance(fabric, TelemetrySource) or not set(_NEEDS) <= fabric.telemetry_metrics():
            return False
        lm = fabric.link_metrics()
        return isinstance(lm, Mapping) and "bandwidth_bytes_per_s" in lm and "src" in lm

    def _emit(self, kind: str, **fields: object) -> None:
        self.plane.tl.emit(kind, cluster_id=self.rt.id, **fields)

    def step(self) -> None:
        rt, table = self.rt, self.plane.jobs.table
        if rt.id not in self.plane.clusters or self.monitor.n == 0:
            return
        running = rt.owners.jobs()
        for gone in set(self.jobs) - set(running):
            del self.jobs[gone]
        rows = slice(0, min(self.monitor.n, self.monitor.window))
        util = self.monitor.util[rows].mean(axis=0)
        for job_id in running:
            rec = table.find(job_id)
            if rec is None or rec.state != JobState.RUNNING:
                continue
            chips = rec.chips
            if not chips or set(chips) != set(running[job_id]):
                continue  # being moved by recovery: wait for its new allocation
            job = self.jobs.get(job_id)
            if job is None or set(job.chips) != set(chips):
                job = self.jobs[job_id] = self._track(rec, chips)
            st = rec.status.scheduling
            for a in self.rebalancer.step(job):
                st.rebalances += 1
                st.last_rebalance = {"action": a.kind, "reason": a.reason}
                table.log(rec, f"rebalance ({a.kind}): {a.reason}")
                table.refresh(rec)
            degree = round(balance_degree(util[list(chips)]), 4)
            if st.balance_degree != degree:
                st.balance_degree = degree
                table.refresh(rec)

    def _track(self, rec: Job, chips: tuple[int, ...]) -> DPJob:
        plan = rec.status.plan or {}
        per_rank = max(1, int(plan.get("num_micro_batches") or 8))
        alloc = rec.status.allocation or {}
        shape, offset = tuple(alloc.get("shape") or ()), tuple(alloc.get("offset") or ())
        block = None
        if self.block_ok and len(shape) == len(self.rebalancer.dims) and len(offset) == len(shape) \
                and int(alloc.get("pod", 0)) == 0:
            block = (offset, shape)
        return DPJob(rec.id, chips, np.full(len(chips), per_rank, dtype=np.int64), block=block)
