"""Scheduler metrics: load-balance degree, pod utilization, fragmentation, queue wait.

* load-balance degree of a job = mean / max chip utilization over its chips (1.0 = even)
* pod utilization = chips held by jobs / non-spare chips
* fragmentation = 1 - largest free block / free chips (0 = one contiguous hole)
* queue wait = time jobs spent pending (p50 / p95 over jobs seen)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from podfleet.scheduler.jobs import JobPhase
from podfleet.scheduler.plugins.fragmentation import fragmentation

if TYPE_CHECKING:
    from podfleet.scheduler.scheduler import Scheduler


def balance_degree(utilization: np.ndarray | Sequence[float]) -> float:
    """mean / max over a job's chips (1.0 when idle everywhere: nothing is unbalanced)."""
    u = np.asarray(utilization, dtype=float)
    if u.size == 0 or u.max() <= 0:
        return 1.0
    return float(u.mean() / u.max())


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


def pod_metrics(sched: Scheduler) -> list[dict[str, Any]]:
    out = []
    fw = sched.framework
    counts = fw.free_counts()
    for pod in sched.cluster.pods:
        non_spare = int((~pod.spare).sum())
        held = int((pod.owner >= 0).sum())
        largest = fw.largest_free_shape(pod.index)
        largest_n = int(np.prod(largest)) if largest else 0
        free_n = int(counts[pod.index])
        out.append({
            "pod": pod.index,
            "utilization": held / non_spare if non_spare else 0.0,
            "free_chips": free_n,
            "largest_free_block": list(largest) if largest else [],
            "fragmentation": round(fragmentation(largest_n, free_n), 4),
            "spares": int(pod.spare.sum()),
            "unhealthy": int((~pod.healthy).sum()),
        })
    return out


def cluster_metrics(sched: Scheduler, now_s: float | None = None, utilization: np.ndarray | None = None) -> dict[str, Any]:
    """For DescribeCluster and /metrics. ``utilization`` (per chip, 0-1) adds balance degrees."""
    now = sched.time(now_s)
    pods = pod_metrics(sched)
    waits = [
        r.wait_s + (now - r.enqueued_s if r.phase in (JobPhase.PENDING, JobPhase.NOMINATED) else 0.0)
        for r in sched.jobs.values() if r.phase is not JobPhase.REJECTED
    ]
    out: dict[str, Any] = {
        "pods": pods,
        "utilization": float(np.mean([p["utilization"] for p in pods])),
        "fragmentation": float(np.mean([p["fragmentation"] for p in pods])),
        "pending_jobs": sum(r.phase is JobPhase.PENDING for r in sched.jobs.values()),
        "running_jobs": sum(r.phase is JobPhase.RUNNING for r in sched.jobs.values()),
        "queue_wait_p50_s": percentile(waits, 50),
        "queue_wait_p95_s": percentile(waits, 95),
    }
    if utilization is not None:
        u = np.asarray(utilization, dtype=float)
        out["balance_degree"] = {
            j: round(balance_degree(u[list(p.chips)]), 4) for j, p in sched.allocations().items()
        }
    return out
