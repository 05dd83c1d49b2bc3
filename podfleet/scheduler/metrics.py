"""Scheduler metrics: load-balance degree, pod utilization, fragmentation, queue wait.

* load-balance degree of a job = mean / max chip utilization over its chips (1.0 = even)
* pod utilization = chips held by jobs / non-spare chips
* fragmentation = 1 - largest free block / free chips (0 = one contiguous hole)
* queue wait = time jobs spent pending (p50 / p95 over jobs seen)
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
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
    """``np.percentile`` (0.0 for no values). The cluster figures ask it at every telemetry
    tick for queue waits that rarely move: the last answer per ``q`` is kept, for the
    very same values (bit for bit)."""
    if not len(values):
        return 0.0
    a = np.asarray(values, dtype=np.float64)
    key = a.tobytes()
    hit = _percentiles.get(q)
    if hit is not None and hit[0] == key:
        return hit[1]
    v = float(np.percentile(a, q))
    _percentiles[q] = (key, v)
    return v


# q -> (the values as bytes, their percentile): the last ``percentile`` answer per q.
_percentiles: dict[float, tuple[bytes, float]] = {}


def pod_metrics(sched: Scheduler) -> list[dict[str, Any]]:
    """Per pod: utilization, free chips, largest free block, fragmentation, spares,
    unhealthy chips. Counted over all pods at once (a fleet has 1,024); the largest free
    block is kept per pod until the pod changes (its ``version``, which is also when the
    framework re-derives its free blocks)."""
    fw = sched.framework
    counts = fw.free_counts().tolist()
    pods = sched.cluster.pods
    if not pods:
        return []
    arrays = sched.cluster.arrays  # [pods, chips]: every pod's rows at once
    spare = arrays.spare
    n_spare = spare.sum(axis=1).tolist()
    non_spare = (spare.shape[1] - spare.sum(axis=1)).tolist()
    held = (arrays.owner >= 0).sum(axis=1).tolist()
    unhealthy = (~arrays.healthy).sum(axis=1).tolist()
    cache = _largest.get(fw)
    if cache is None or len(cache) != len(pods):
        cache = _largest[fw] = [(-1, None, 0)] * len(pods)
    out = []
    for i, pod in enumerate(pods):
        hit = cache[i]
        if hit[0] != pod.version:
            largest = fw.largest_free_shape(pod.index)
            hit = cache[i] = (pod.version, largest, int(np.prod(largest)) if largest else 0)
        largest, largest_n = hit[1], hit[2]
        ns, free_n = non_spare[i], int(counts[pod.index])
        out.append({
            "pod": pod.index,
            "utilization": held[i] / ns if ns else 0.0,
            "free_chips": free_n,
            "largest_free_block": list(largest) if largest else [],
            "fragmentation": round(fragmentation(largest_n, free_n), 4),
            "spares": n_spare[i],
            "unhealthy": unhealthy[i],
        })
    return out


# framework -> per pod (pod version, largest free block shape, its chips)
_largest: weakref.WeakKeyDictionary[Any, list[tuple[int, tuple[int, ...] | None, int]]] = weakref.WeakKeyDictionary()


def balance_degrees(utilization: np.ndarray, chips_of: Mapping[str, Sequence[int] | np.ndarray]) -> dict[str, float]:
    """``balance_degree`` of each job's chips, jobs of one size at a time (the same sums,
    in the same order, as one job at a time)."""
    degree = grouped_balance_degrees(utilization, degree_groups(chips_of))
    return {j: degree[j] for j in chips_of}


def degree_groups(chips_of: Mapping[str, Sequence[int] | np.ndarray]) -> list[tuple[list[str], np.ndarray]]:
    """Jobs of one size together: (job ids, their chips as a [jobs, size] index)."""
    by_size: dict[int, list[str]] = {}
    for j, chips in chips_of.items():
        by_size.setdefault(len(chips), []).append(j)
    out = []
    for n, jobs in by_size.items():
        if n == 0:
            out.append((jobs, np.zeros((len(jobs), 0), dtype=np.int64)))
            continue
        idx = np.concatenate([np.asarray(chips_of[j], dtype=np.int64) for j in jobs]) if len(jobs) > 1 \
            else np.asarray(chips_of[jobs[0]], dtype=np.int64)
        out.append((jobs, idx.reshape(len(jobs), n)))
    return out


def grouped_balance_degrees(utilization: np.ndarray, groups: Sequence[tuple[list[str], np.ndarray]]) -> dict[str, float]:
    """``balance_degree`` per job from ``degree_groups`` (which a caller may keep while
    its jobs' chips stay the same)."""
    u = np.asarray(utilization, dtype=float)
    degree: dict[str, float] = {}
    for jobs, idx in groups:
        n = idx.shape[1]
        if n == 0:
            degree.update((j, 1.0) for j in jobs)
            continue
        rows = u[idx]
        top = np.maximum.reduce(rows, axis=1)  # ``rows.max(axis=1)`` without the wrapper
        _put_degrees(degree, jobs, np.add.reduce(rows, axis=1), top, n)
    return degree


def _put_degrees(degree: dict[str, float], jobs: list[str], total: np.ndarray, top: np.ndarray, n: int) -> None:
    """``degree[job] = (total / n) / top`` per job of one size, as ``balance_degree``:
    idle (max <= 0) is 1.0; a NaN max gives NaN."""
    if len(jobs) <= 64:
        # A handful of jobs (a pod): mean / max per job in Python, IEEE float64 divisions
        # with the same values as numpy's, which for so few cost more as array calls.
        degree.update((j, 1.0 if t <= 0 else (s / n) / t)
                      for j, s, t in zip(jobs, total.tolist(), top.tolist(), strict=True))
        return
    mean = total / n
    if np.minimum.reduce(top) > 0:  # every job busy (the common case; False with a NaN)
        d = mean / top
    else:
        busy = ~(top <= 0)
        d = np.where(busy, mean / np.where(busy, top, 1.0), 1.0)
    degree.update(zip(jobs, d.tolist(), strict=True))


class DegreePlan:
    """``degree_groups`` laid out for ``planned_balance_degrees``: every job's chips in one
    index (group after group), where each job's chips start, and per group its slice of
    it. Made once while the jobs' chips stay the same (the balancer keeps it)."""

    __slots__ = ("groups", "idx", "starts")

    def __init__(self, groups: Sequence[tuple[list[str], np.ndarray]]) -> None:
        parts: list[np.ndarray] = []
        self.groups: list[tuple[list[str], int, int]] = []  # (jobs, offset in idx, chips per job)
        off = 0
        for jobs, idx in groups:
            n = idx.shape[1]
            self.groups.append((jobs, off, n))
            if n:
                parts.append(idx.reshape(-1))
                off += len(jobs) * n
        self.idx = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        self.starts = np.concatenate([np.arange(o, o + len(jobs) * n, n) for jobs, o, n in self.groups if n]) \
            if parts else np.zeros(0, np.int64)


def planned_balance_degrees(utilization: np.ndarray, plan: DegreePlan) -> dict[str, float]:
    """``grouped_balance_degrees`` with one gather of all jobs' chips and one ``reduceat`` for
    their maxima (the maximum is the same in any order); the sums stay one reduction per
    group of jobs of one size, as there (the same summation order, so the same values)."""
    v = np.asarray(utilization, dtype=float)[plan.idx]
    tops_all = np.maximum.reduceat(v, plan.starts) if plan.starts.size else v
    degree: dict[str, float] = {}
    i = 0
    for jobs, off, n in plan.groups:
        k = len(jobs)
        if n == 0:
            degree.update((j, 1.0) for j in jobs)
            continue
        _put_degrees(degree, jobs, np.add.reduce(v[off:off + k * n].reshape(k, n), axis=1), tops_all[i:i + k], n)
        i += k
    return degree


def _mean(xs: list[float]) -> float:
    """``float(np.mean(xs))``; one value (a pod) is its own mean (divided by one)."""
    return float(xs[0]) if len(xs) == 1 else float(np.mean(xs))


def cluster_metrics(sched: Scheduler, now_s: float | None = None, utilization: np.ndarray | None = None) -> dict[str, Any]:
    """For DescribeCluster and /metrics. ``utilization`` (per chip, 0-1) adds balance degrees."""
    now = sched.time(now_s)
    pods = pod_metrics(sched)
    waits = []
    pending = running = 0
    for r in sched.jobs.values():
        phase = r.phase
        if phase is JobPhase.REJECTED:
            continue
        waiting = phase in (JobPhase.PENDING, JobPhase.NOMINATED)
        waits.append(r.wait_s + (now - r.enqueued_s if waiting else 0.0))
        pending += phase is JobPhase.PENDING
        running += phase is JobPhase.RUNNING
    out: dict[str, Any] = {
        "pods": pods,
        "utilization": _mean([p["utilization"] for p in pods]),
        "fragmentation": _mean([p["fragmentation"] for p in pods]),
        "pending_jobs": pending,
        "running_jobs": running,
        "queue_wait_p50_s": percentile(waits, 50),
        "queue_wait_p95_s": percentile(waits, 95),
    }
    if utilization is not None:
        degrees = balance_degrees(utilization, {j: p.chips for j, p in sched.allocations().items()})
        out["balance_degree"] = {j: round(d, 4) for j, d in degrees.items()}
    return out
