"""Reclaim and PostFilter: a queue takes back the nominal quota it lent to its cohort.

Runs for a job admitted within its queue's nominal quota when that quota is lent out
(Reclaim, before any block is taken), or when no block is free for it (PostFilter, after
priority preemption found nothing). Victims are running, preemptible jobs of other
queues of the cohort that borrow now, as the reclaiming queue's policy allows
(``reclaim: never | lower-priority | any``): first the holders of the cheapest block
(``preemption.cheapest_block``), then, while the cohort still lends more than its
lenders may, more borrowing jobs, lowest priority and newest first
(``queues.plan_reclaim``). Each goes with a checkpoint and is requeued, like any
preemption victim, with the reclaim as its reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.plugins.preemption import evictable_blocks
from podfleet.scheduler.queues import Holder, plan_reclaim
from podfleet.scheduler.state import FREE
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest, Nomination

NAME = "reclaim"
MAX_TRIES = 256  # candidate blocks per pod whose victims are checked against the quota rule


class Reclaim:
    name = NAME

    def __init__(self, handle: Handle, min_run_s: float = 0.0) -> None:
        self.handle = handle
        self.min_run_s = min_run_s

    def reclaim(self, state: CycleState, job: JobRequest, diagnosis: str) -> tuple[Status, Nomination | None]:
        return self._nominate(state, job, diagnosis)

    def post_filter(self, state: CycleState, job: JobRequest, diagnosis: str) -> tuple[Status, Nomination | None]:
        book = self.handle.queues
        spec = book.get(job.queue)
        if spec is None or spec.cohort is None or spec.nominal is None \
                or book.usage(job.queue) + job.chips > spec.nominal:
            return st.SKIP, None  # only a queue within its nominal quota reclaims
        return self._nominate(state, job, diagnosis)

    def _nominate(self, state: CycleState, job: JobRequest, diagnosis: str) -> tuple[Status, Nomination | None]:
        h = self.handle
        book = h.queues
        now = float(state.get("now_s", h.now_s()))
        holders = {
            r.slot: Holder(r.job_id, r.request.queue, r.request.chips, r.request.priority, r.started_s or 0.0)
            for r in h.running.values()
            if r.request.preemptible and now - (r.started_s or 0.0) >= self.min_run_s
            and book.borrowed(r.request.queue) > 0
            and book.may_reclaim(job.queue, r.request.queue, job.priority, r.request.priority)
        }
        policy = book.get(job.queue)
        if not holders:
            why = "its reclaim policy is never" if policy is not None and policy.reclaim == "never" else \
                "no job of a borrowing queue of its cohort may be preempted"
            return st.unschedulable(f"{diagnosis}; cannot reclaim: {why}"), None
        victims: tuple[str, ...] | None = None
        pick: tuple[int, int, np.ndarray] | None = None
        tried = 0
        for p, ids, chips in evictable_blocks(h, job, holders):
            owner = h.cluster.pods[p].owner[chips]  # [n, size]
            # Fewest victims first, then fewest victim chips: a row's distinct holders.
            srt = np.sort(owner, axis=1)
            distinct = ((srt[:, 1:] != srt[:, :-1]) & (srt[:, 1:] != FREE)).sum(axis=1) + (srt[:, 0] != FREE)
            held = (owner != FREE).sum(axis=1)
            for row in np.lexsort((held, distinct))[:MAX_TRIES]:
                tried += 1
                owners = sorted({int(o) for o in owner[row] if o != FREE},
                                key=lambda o: (holders[o].priority, -holders[o].started_s))
                got = plan_reclaim(book, job.queue, job.chips, job.priority, [holders[o] for o in owners],
                                   [x for s, x in holders.items() if s not in owners])
                if got is not None and (victims is None or len(got) < len(victims)):
                    victims, pick = got, (p, int(ids[row]), chips[row])
                    break
        if pick is None or victims is None:
            why = "would not free a block" if not tried else "would preempt a job of a queue within its nominal quota"
            return st.unschedulable(f"{diagnosis}; reclaiming borrowed chips {why}"), None
        p, block, chips = pick
        lenders = sorted({h.jobs[v].request.queue for v in victims})
        why = f"queue {job.queue!r} reclaims chips lent to queue {', '.join(map(repr, lenders))}"
        return st.SUCCESS, Nomination(p, block, tuple(int(c) for c in chips), victims, reason=why)


def factory(handle: Handle, args: dict[str, Any]) -> Reclaim:
    return Reclaim(handle, **args)
