"""Baseline batch schedulers for trace replay: FIFO first-fit and FIFO with EASY backfill.

A small pure event simulation (no timeline, no control plane) that ``bench/trace_replay.py``
runs beside podfleet on the same trace and the same chips:

* ``Policy.FIFO``: strict first come, first served. The head of the queue starts as soon
  as its chips are free; nothing behind it may start first.
* ``Policy.EASY``: FIFO with EASY backfill, what Slurm does by default. When the head
  does not fit, it gets a reservation at its earliest start (the *shadow time*, from the
  end times of running jobs) on named chips. A later job may start now if it fits now
  and either ends by the shadow time or uses none of the reserved chips, so the head is
  never delayed.

Both know each job's exact run time: a real EASY scheduler only has the user's time
limit, usually an overestimate, so this is the baseline's best case.

Chips are either counted (``topology=None``: any free chips will do, lowest index
first) or placed as contiguous blocks of a ``GridTopology`` (the constraint podfleet's
gangs have), first free block by lowest chip index. With ``pods=N`` the chips are N such
grids (a fleet): a job of at most a pod takes a block of one pod (lowest pod first), a
larger one whole free pods (the lowest-numbered), as podfleet's whole-pod gangs do.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from podfleet.hardware.topology import GridTopology


class Policy(StrEnum):
    FIFO = "fifo"
    EASY = "easy"


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: when it arrives, how many chips, how long it runs alone."""

    job_id: str
    submit_s: float
    chips: int
    run_s: float
    priority: int = 0
    team: str = "default"


@dataclass(frozen=True)
class Run:
    """Where and when a baseline ran one job."""

    job: TraceJob
    start_s: float
    chips: tuple[int, ...]

    @property
    def end_s(self) -> float:
        return self.start_s + self.job.run_s

    @property
    def wait_s(self) -> float:
        return self.start_s - self.job.submit_s

    @property
    def jct_s(self) -> float:
        return self.end_s - self.job.submit_s


@dataclass(frozen=True)
class _Reservation:
    shadow_s: float
    chips: frozenset[int]


class _Pod:
    """Free chips and how a job of ``n`` chips may be placed on them."""

    def __init__(self, n_chips: int, topology: GridTopology | None, pods: int = 1) -> None:
        if topology is not None and topology.n_chips * pods != n_chips:
            raise ValueError(f"{pods} pod(s) of {topology.n_chips} chips are not {n_chips} chips")
        if topology is None and pods != 1:
            raise ValueError("pods need a topology (each pod's grid)")
        self.n_chips, self.topology, self.pods = n_chips, topology, pods
        self.free = np.ones(n_chips, dtype=bool)

    def check(self, job: TraceJob) -> None:
        if not 1 <= job.chips <= self.n_chips:
            raise ValueError(f"{job.job_id} asks {job.chips} chips; the pod has {self.n_chips}")
        per = self.n_chips // self.pods
        if self.topology is not None and job.chips > per and job.chips % per:
            raise ValueError(f"{job.job_id} asks {job.chips} chips; more than a pod takes whole pods of {per}")
        if self.topology is not None and job.chips <= per and not self.topology.shapes(job.chips):
            raise ValueError(f"{job.job_id} asks {job.chips} chips; no block of that size fits {self.topology.dims}")
        if job.run_s < 0:
            raise ValueError(f"{job.job_id} has a negative run time")

    def candidates(self, n: int, free: np.ndarray) -> list[tuple[int, ...]]:
        """Placements of ``n`` chips within ``free``, preferred first (lowest chip index)."""
        if self.topology is None:
            idx = np.flatnonzero(free)
            return [tuple(int(c) for c in idx[:n])] if idx.size >= n else []
        if self.pods == 1:
            blocks = self.topology.free_blocks(n, free)
            return sorted((b.chips for b in blocks), key=lambda c: (min(c), c))
        per = self.topology.n_chips
        by_pod = free.reshape(self.pods, per)
        if n > per:
            whole = np.flatnonzero(by_pod.all(axis=1))[: n // per]
            if whole.size < n // per:
                return []
            return [tuple(int(p) * per + c for p in whole for c in range(per))]
        out: list[tuple[int, ...]] = []
        for p in np.flatnonzero(by_pod.sum(axis=1) >= n).tolist():
            got = self.topology.free_blocks(n, by_pod[p])
            out.extend(tuple(p * per + c for c in b.chips) for b in got)
        return sorted(out, key=lambda c: (min(c), c))


def simulate(jobs: Iterable[TraceJob], n_chips: int, policy: Policy | str = Policy.FIFO,
             topology: GridTopology | None = None, pods: int = 1) -> list[Run]:
    """Replay ``jobs`` on ``n_chips`` under ``policy``; one ``Run`` per job, in trace order.
    ``pods``: the chips are that many ``topology`` grids (a fleet)."""
    policy = Policy(policy)
    order = list(jobs)
    pod = _Pod(n_chips, topology, pods)
    for j in order:
        pod.check(j)
    arrivals = deque(sorted(order, key=lambda j: j.submit_s))
    queue: deque[TraceJob] = deque()
    running: list[tuple[float, int, Run]] = []  # (end, seq, run): a heap
    done: dict[str, Run] = {}
    seq = 0

    def start(job: TraceJob, chips: tuple[int, ...], now: float) -> None:
        nonlocal seq
        pod.free[list(chips)] = False
        r = Run(job, now, chips)
        heapq.heappush(running, (r.end_s, seq, r))
        seq += 1
        done[job.job_id] = r

    while arrivals or queue:
        now = min(arrivals[0].submit_s if arrivals else np.inf, running[0][0] if running else np.inf)
        if now == np.inf:
            raise RuntimeError("jobs are queued but none is running or arriving")  # check() rules this out
        while running and running[0][0] <= now:
            pod.free[list(heapq.heappop(running)[2].chips)] = True
        while arrivals and arrivals[0].submit_s <= now:
            queue.append(arrivals.popleft())
        while queue:  # FIFO: start the head while it fits
            got = pod.candidates(queue[0].chips, pod.free)
            if not got:
                break
            start(queue.popleft(), got[0], now)
        if policy is Policy.EASY and len(queue) > 1:
            res = _reserve(pod, queue[0], [r for _, _, r in running])
            for job in list(queue)[1:]:
                chips = _backfill(pod, job, now, res)
                if chips is not None:
                    queue.remove(job)
                    start(job, chips, now)
    return [done[j.job_id] for j in order]


def _reserve(pod: _Pod, head: TraceJob, running: Sequence[Run]) -> _Reservation:
    """The head's earliest start, from the end times of running jobs, and the chips it
    will take then (those busy now first, so backfill keeps the most chips free now)."""
    free = pod.free.copy()
    busy_now = ~pod.free
    ends = sorted(running, key=lambda r: r.end_s)
    i = 0
    while i < len(ends):
        t = ends[i].end_s
        while i < len(ends) and ends[i].end_s <= t:
            free[list(ends[i].chips)] = True
            i += 1
        got = pod.candidates(head.chips, free)
        if got:
            if pod.topology is None:
                idx = np.flatnonzero(free)
                pick = sorted(idx, key=lambda c: (not busy_now[c], c))[: head.chips]
                return _Reservation(t, frozenset(int(c) for c in pick))
            best = max(got, key=lambda c: int(busy_now[list(c)].sum()))
            return _Reservation(t, frozenset(best))
    raise RuntimeError(f"{head.job_id} cannot fit even on an empty pod")  # check() rules this out


def _backfill(pod: _Pod, job: TraceJob, now: float, res: _Reservation) -> tuple[int, ...] | None:
    """Chips ``job`` may take now without delaying the reservation, or None."""
    if now + job.run_s <= res.shadow_s:
        got = pod.candidates(job.chips, pod.free)  # gone before the head needs anything
        return got[0] if got else None
    outside = pod.free.copy()
    outside[list(res.chips)] = False
    got = pod.candidates(job.chips, outside)
    return got[0] if got else None


@dataclass(frozen=True)
class Figures:
    """What trace replay reports for one policy (the same definitions for all of them)."""

    utilization: float  # useful chip-seconds / (chips x makespan)
    mean_jct_s: float
    p95_wait_s: float
    max_wait_s: float
    makespan_s: float

    def as_dict(self) -> dict[str, float]:
        return {"utilization": self.utilization, "mean_jct_s": self.mean_jct_s, "p95_wait_s": self.p95_wait_s,
                "max_wait_s": self.max_wait_s, "makespan_s": self.makespan_s}


def figures(useful_chip_s: float, n_chips: int, submit_s: Sequence[float], end_s: Sequence[float],
            wait_s: Sequence[float], origin_s: float = 0.0) -> Figures:
    """Utilization over the makespan (``origin_s`` to the last end), mean completion time
    (end - submit) and queue waits: the one definition every policy is measured by."""
    end = np.asarray(end_s, dtype=float)
    makespan = float(end.max()) - origin_s
    waits = np.asarray(wait_s, dtype=float)
    return Figures(
        utilization=useful_chip_s / (n_chips * makespan),
        mean_jct_s=float(np.mean(end - np.asarray(submit_s, dtype=float))),
        p95_wait_s=float(np.percentile(waits, 95)),
        max_wait_s=float(waits.max()),
        makespan_s=makespan,
    )


def run_figures(runs: Sequence[Run], n_chips: int, origin_s: float = 0.0) -> Figures:
    """``figures`` of a baseline's runs: every chip-second a baseline runs is useful
    (it never preempts, so nothing is redone)."""
    useful = sum(r.job.chips * r.job.run_s for r in runs)
    return figures(useful, n_chips, [r.job.submit_s for r in runs], [r.end_s for r in runs],
                   [r.wait_s for r in runs], origin_s)
