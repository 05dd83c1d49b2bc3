"""The Ray fabric's telemetry (``TelemetrySource``): what its actors report, per chip.

Each poll of a rank's actor (runner.py) brings its process's CPU and memory (psutil in
the actor), its host's memory, its heartbeat age and its progress (step time, tokens/s,
and the wall time ``t`` that ``RankSpeed`` turns into each rank's own step time and
samples/s, as fabric/local does). The scan's names (utilization, memory held; NaN for
what no worker slot measures) come from fabric/local/telemetry.py, so health scans read
local and Ray chips alike.

Heartbeat age: an actor that stops answering polls (frozen, its node cut off) is as
silent as one whose heartbeat stopped, so an armed rank's age is ``RankRecord.silent_s``.
A rank still starting (placement, actor start, torch import: often several seconds)
reports 0: it has no step to be late with yet, and the start has its own limits
(``placement_timeout_s``, ``starter.START_TIMEOUT_S``), as local counts a worker's start
against ``startup_timeout_s`` rather than its hang timeout. So the health monitor's
stale-heartbeat alert never fires for a gang that is only starting.

``RankSpeed`` compares report times across ranks: on a Ray cluster of several hosts it
assumes their clocks agree (NTP) to well within a step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from podfleet.fabric.local import telemetry as worker
from podfleet.fabric.local.speed import RankSpeed
from podfleet.fabric.ray.jobs import TERMINAL, RankRecord, RayJob, RayState
from podfleet.fabric.ray.nodes import NodeMap
from podfleet.hardware.topology import Link
from podfleet.training.config import WorkerConfig

# The fabric's own metrics (``chip_metrics`` adds the scan's names); ``pid``: the actor's.
METRICS = ("busy", "cpu_percent", "mem_bytes", "step_time_s", "tokens_per_s", "heartbeat_age_s",
           "own_step_s", "samples_per_s", "mem_capacity_bytes", "pid")
# What a Ray chip really measures: a worker slot's process figures and its rank's speed.
# GPU figures are not sampled on Ray (no NVML in the actor), so they are not claimed.
MEASURED = worker.measured(gpus=False, speed=True)


def speed_for(job: RayJob, cfg0: WorkerConfig) -> RankSpeed | None:
    """A data-parallel gang's per-rank speed meter (the built-in loop, 2+ ranks), as local."""
    n = len(job.ranks)
    if job.spec.entrypoint is not None or n < 2:
        return None
    even = (cfg0.global_batch // n,) * n
    return RankSpeed(n, [(0, tuple(cfg0.shares) or even)])


def on_progress(job: RayJob, r: RankRecord, msg: dict[str, object]) -> None:
    """Feed one progress report to the job's speed meter (runner thread, state lock held)."""
    sp = job.speed
    t, step, step_s = msg.get("t"), msg.get("step"), msg.get("step_time_s")
    if sp is None or not isinstance(t, int | float) or not isinstance(step, int) or not isinstance(step_s, int | float):
        return
    sp.observe(step, r.rank, float(t), float(step_s))


def heartbeat_age(r: RankRecord, now_mono: float) -> float:
    """0 while the rank is starting (see the module's docstring), else how long it is silent."""
    return r.silent_s(now_mono) if r.armed else 0.0


def chip_metrics(state: RayState, nodes: NodeMap, n_chips: int, node_mem: dict[str, float]) -> dict[str, np.ndarray]:
    """Every chip's metrics (idle chips 0; host memory NaN until a worker on its node
    reported it, ``node_mem`` remembers it per node), with the scan's names."""
    out = {m: np.zeros(n_chips) for m in METRICS}
    out["mem_capacity_bytes"][:] = np.nan
    now = time.monotonic()
    with state.lock:
        for job in state.jobs.values():
            if job.state in TERMINAL:
                continue
            sp = job.speed
            for r in job.ranks:
                if r.done:
                    continue
                c = r.chip
                out["busy"][c] = 1.0
                out["cpu_percent"][c] = r.cpu_percent
                out["mem_bytes"][c] = r.mem_bytes
                out["step_time_s"][c] = r.step_time_s
                out["tokens_per_s"][c] = r.tokens_per_s
                out["heartbeat_age_s"][c] = heartbeat_age(r, now)
                out["pid"][c] = float(r.info.get("pid") or 0)
                if sp is not None and sp.own_s is not None and sp.samples_per_s is not None:
                    out["own_step_s"][c] = sp.own_s[r.rank]
                    out["samples_per_s"][c] = sp.samples_per_s[r.rank]
                if r.mem_capacity_bytes and r.info.get("node_id"):
                    node_mem[str(r.info["node_id"])] = r.mem_capacity_bytes
        for c in range(n_chips):
            node_id = nodes.chip_node[c]
            if node_id is not None and node_id in node_mem:
                out["mem_capacity_bytes"][c] = node_mem[node_id]
    return worker.with_scan_metrics(out)


def link_metrics(links: Sequence[Link]) -> dict[str, np.ndarray]:
    """Ray slots' links: what a worker slot can say per link (nothing measured: NaN, up),
    and the pseudo-topology's ends and nominal bandwidth. The health monitor's rollups
    read the worker link view's names (up, state, utilization, ...): without them its
    tick raised KeyError and stopped the engine."""
    return {
        **worker.link_view(len(links)),
        "src": np.array([lk.src for lk in links], dtype=np.int64),
        "dst": np.array([lk.dst for lk in links], dtype=np.int64),
        "nominal_bandwidth_bytes_per_s": np.array([lk.bw_bytes_per_s for lk in links]),
    }
