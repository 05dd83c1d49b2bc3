"""Advance reservations (Slurm's ``scontrol create reservation``): N chips of a cluster
held for one queue (or for nobody) during a window.

A reservation's chips are chosen once, when it is made (as Slurm picks its nodes), so
the scheduler can keep other work off them ahead of the window: before the start a job
may use them only if its time limit ends by then (backfill never delays a reservation);
during the window only jobs of the reservation's queue may; after the end they are free.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from podfleet.scheduler.state import FREE, SchedulerView
from podfleet.scheduler.types import JobRequest
from podfleet.timespec import fmt_duration


@dataclass(frozen=True)
class Reservation:
    name: str
    chips: tuple[int, ...]  # global chip indices
    start_s: float  # the scheduler clock's time (virtual on a twin)
    end_s: float
    queue: str | None = None  # None: held for nobody during the window

    def active(self, now: float) -> bool:
        return self.start_s <= now < self.end_s

    def allows(self, job: JobRequest, now: float) -> bool:
        """The rule: may ``job``, placed at ``now``, hold this reservation's chips?"""
        if now >= self.end_s:
            return True
        if now >= self.start_s:
            return self.queue is not None and job.queue == self.queue
        # Before the window: only a job certain to be gone by its start (Slurm backfill).
        return job.time_limit_s is not None and now + job.time_limit_s <= self.start_s


@dataclass
class ReservationBook:
    """A cluster's reservations, by name, and which of their chips sit on which pod."""

    items: dict[str, Reservation] = field(default_factory=dict)
    chips_per_pod: int = 0

    def put(self, r: Reservation) -> None:
        self.items[r.name] = r

    def remove(self, name: str) -> None:
        self.items.pop(name, None)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __iter__(self) -> Iterator[Reservation]:
        return iter(self.items.values())

    def expire(self, now: float) -> list[str]:
        """Forget reservations whose window ended; their names."""
        gone = [n for n, r in self.items.items() if now >= r.end_s]
        for n in gone:
            del self.items[n]
        return gone

    def denied(self, job: JobRequest, now: float, n_pods: int) -> np.ndarray | None:
        """bool [pods, chips per pod]: chips ``job`` may not take at ``now``; None when none."""
        out: np.ndarray | None = None
        for r in self.items.values():
            if r.allows(job, now):
                continue
            if out is None:
                out = np.zeros((n_pods, self.chips_per_pod), dtype=bool)
            c = np.asarray(r.chips, dtype=np.int64)
            out[c // self.chips_per_pod, c % self.chips_per_pod] = True
        return out

    def explain(self, job: JobRequest, now: float) -> str:
        """Why reservations keep ``job`` off chips now ("" when none does): for its reason."""
        parts = []
        for r in self.items.values():
            if r.allows(job, now):
                continue
            if now >= r.start_s:
                whom = f"queue {r.queue!r}" if r.queue else "nobody"
                parts.append(f"{len(r.chips)} chips held by reservation {r.name!r} for {whom} for "
                             f"{fmt_duration(r.end_s - now)} more")
            else:
                limit = "has no time limit" if job.time_limit_s is None else \
                    f"time limit {fmt_duration(job.time_limit_s)} would cross it"
                parts.append(f"{len(r.chips)} chips reserved by {r.name!r} starting in "
                             f"{fmt_duration(r.start_s - now)} (the job {limit})")
        return "; ".join(parts)

    def view(self, name: str, now: float) -> dict[str, Any]:
        r = self.items[name]
        state = "active" if r.active(now) else ("pending" if now < r.start_s else "ended")
        return {"name": r.name, "chips": len(r.chips), "chip_ids": list(r.chips), "queue": r.queue,
                "start_s": r.start_s, "end_s": r.end_s, "state": state}


def choose_chips(view: SchedulerView, n: int, taken: set[int] | None = None) -> tuple[int, ...]:
    """``n`` chips for a new reservation: a contiguous block of ``n`` when the pod has one
    (so one job of ``n`` chips can use them all), the one with the fewest chips held now
    and none spare or already reserved; otherwise the ``n`` least busy such chips, in
    index order. Raises ValueError when fewer than ``n`` chips can be reserved."""
    taken = taken or set()
    idx = view.blocks
    cpp = view.chips_per_pod
    reserved = np.zeros((len(view.pods), cpp), dtype=bool)
    for c in taken:
        reserved[c // cpp, c % cpp] = True
    if n <= cpp and idx.shape_ids_for(n, None):
        _, chips = idx.blocks_for(n, None)
        best: tuple[int, int, np.ndarray] | None = None
        for pod in view.pods:
            bad = pod.spare[chips] | reserved[pod.index][chips]
            ok = ~bad.any(axis=1)
            if not ok.any():
                continue
            busy = ((pod.owner[chips] != FREE) | (pod.nominated[chips] != FREE)).sum(axis=1)
            busy = np.where(ok, busy, np.iinfo(np.int64).max)
            row = int(np.argmin(busy))
            if best is None or busy[row] < best[0]:
                best = (int(busy[row]), pod.index, chips[row])
        if best is not None:
            return tuple(sorted(view.global_chips(best[1], best[2])))
    spare = view.arrays.spare.reshape(-1)
    busy = ((view.arrays.owner != FREE) | (view.arrays.nominated != FREE)).reshape(-1)
    ok = np.flatnonzero(~spare & ~reserved.reshape(-1))
    if len(ok) < n:
        raise ValueError(f"only {len(ok)} chips can be reserved (not spare, not reserved already)")
    order = ok[np.argsort(busy[ok], kind="stable")][:n]
    return tuple(sorted(int(c) for c in order))
