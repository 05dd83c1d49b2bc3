"""Reclaim and PostFilter: a queue takes back the nominal quota it lent to its cohort.

Runs for a job admitted within its queue's nominal quota when that quota is lent out
(Reclaim, before any block is taken), or when no block is free for it (PostFilter, after
priority preemption found nothing). Victims are running, preemptible jobs of other
queues of the cohort that borrow now, as the reclaiming queue's policy allows
(``reclaim: never | lower-priority | any``): first the holders of the cheapest block
(``preemption.cheapest_block``), then, while the cohort still lends more than its
lenders may, more borrowing jobs, lowest priority and newest first
(``queues.plan_reclaim``). Each goes with a checkpoint and is requeued, like any
preemption victim, with the reclaim as its reason. When no block can be freed by
preempting borrowers alone, the jobs within quota in the chosen block are moved out of
it (``Nomination.moves``: checkpoint on demand and relaunch, never a preemption) or,
when they cannot be, awaited (``Reclaim._reserve``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.jobs import JobPhase
from podfleet.scheduler.plugins.preemption import evictable_blocks
from podfleet.scheduler.queues import Holder, plan_reclaim
from podfleet.scheduler.state import FREE
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest, Move, Nomination

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
            held = self._reserve(job, holders)
            if held is not None:
                return st.SUCCESS, held
            why = "would not free a block" if not tried else "would preempt a job of a queue within its nominal quota"
            return st.unschedulable(f"{diagnosis}; reclaiming borrowed chips {why}"), None
        p, block, chips = pick
        lenders = sorted({h.jobs[v].request.queue for v in victims})
        why = f"queue {job.queue!r} reclaims chips lent to queue {', '.join(map(repr, lenders))}"
        return st.SUCCESS, Nomination(p, block, tuple(int(c) for c in chips), victims, reason=why)


    def _reserve(self, job: JobRequest, holders: dict[int, Holder]) -> Nomination | None:
        """No block can be freed by preemption alone: jobs of queues within their nominal
        quota (never preempted) sit in every block, because which of a queue's jobs count
        as borrowed moves as jobs end. Then, per block, its borrowers a quota lets go are
        preempted and its jobs within quota are either

        * **moved** (``Nomination.moves``, when each is ``movable``: its fabric checkpoints
          on demand and relaunches from that step) onto other chips of the pod that are
          free or that more borrowers free (the same quota rule); the job keeps its work
          and its quota, and the owner starts once they are relaunched there; or
        * **awaited** (``Nomination.awaited``): the block is held, its freed chips are not
          lent out again, and the owner starts when those jobs end.

        A block whose jobs within quota can all be moved goes first (fewest chips moved,
        then fewest victims); else the block whose awaited jobs were all started longest
        ago. Without the hold the freed chips went back to borrowers and the owner waited
        for a free block by chance (the ``tenancy`` benchmark's p99 of 1,651 s); with the
        hold only, it waited for the rest of a job's run (961.9 s)."""
        h = self.handle
        book = h.queues
        idx = h.cluster.blocks
        sids = idx.shape_ids_for(job.chips, job.shape)
        now = h.now_s()
        denied = h.reservations.denied(job, now, len(h.cluster.pods)) if h.reservations else None
        best: tuple[tuple[int, float, int, int], int, int, np.ndarray, tuple[str, ...], tuple[str, ...],
                    tuple[Move, ...]] | None = None
        for pod in h.cluster.pods:
            mask = pod.healthy & ~pod.spare & (pod.nominated == FREE) & (pod.hbm_bytes >= job.hbm_bytes_per_chip)
            if denied is not None:
                mask &= ~denied[pod.index]
            free = idx.free(mask)
            ids = np.concatenate([np.flatnonzero(free[idx.shapes[s].start : idx.shapes[s].stop]) + idx.shapes[s].start
                                  for s in sids])
            for b in ids[:MAX_TRIES]:
                chips = idx.chips(int(b))
                owners = {int(o) for o in pod.owner[chips] if o != FREE}
                ours = sorted((o for o in owners if o in holders),
                              key=lambda o: (holders[o].priority, -holders[o].started_s))
                # Take the block's borrowers a quota lets go; the rest of its holders are moved or awaited.
                taken, used = self._takeable(job, [holders[o] for o in ours])
                first = [holders[o] for o in ours if holders[o].job_id in taken]
                rest = [x for sl, x in holders.items() if sl not in owners]
                waiting = tuple(sorted(h.slots[o] for o in owners if h.slots[o] not in taken))
                if not waiting:
                    continue  # would have been found by the search above
                planned = self._moves(job, pod.index, chips, waiting, holders, owners, used)
                if planned is not None:
                    moves, extra = planned
                    got = plan_reclaim(book, job.queue, job.chips, job.priority, first + extra,
                                       [x for x in rest if x not in extra])
                    if got is not None:
                        cost = (0, 0.0, sum(len(m.local_chips) for m in moves), len(got))
                        if best is None or cost < best[0]:
                            best = (cost, pod.index, int(b), chips, got, (), moves)
                        continue
                got = plan_reclaim(book, job.queue, job.chips, job.priority, first, rest)
                if got is None:
                    continue
                # The wait is the longest of the awaited jobs' remaining runs, which the
                # scheduler does not know: the block whose latest-started one started
                # earliest, then the fewest chips left waiting, then the fewest victims.
                latest = max(h.jobs[j].started_s or 0.0 for j in waiting)
                cost = (1, latest, int(sum(1 for c in chips if pod.owner[c] != FREE
                                           and h.slots[int(pod.owner[c])] in waiting)), len(got))
                if best is None or cost < best[0]:
                    best = (cost, pod.index, int(b), chips, got, waiting, ())
        if best is None:
            return None
        _, p, block, chips, victims, waiting, moves = best
        lenders = sorted({h.jobs[v].request.queue for v in victims})
        why = (f"queue {job.queue!r} reclaims chips lent to queue {', '.join(map(repr, lenders))}" if lenders
               else f"queue {job.queue!r} reclaims its nominal quota")
        return Nomination(p, block, tuple(int(c) for c in chips), victims, reason=why, awaited=waiting,
                          moves=moves)

    def _moves(self, job: JobRequest, p: int, block: np.ndarray, movers: tuple[str, ...],
               holders: dict[int, Holder], in_block: set[int], used: dict[str, int]
               ) -> tuple[tuple[Move, ...], list[Holder]] | None:
        """Where each of ``movers`` (jobs within quota in ``block``) goes: a block of its own
        shape on pod ``p`` outside ``block``, of chips free now or held by borrowers that may
        go as well (``used``: the queues' chips once the block's own victims are gone, so
        each extra victim's queue still borrows when it is taken). None when one cannot
        move (not ``movable``, across pods, a policy that does not let the job's queue
        touch it, or no room)."""
        h = self.handle
        book = h.queues
        idx = h.cluster.blocks
        pod = h.cluster.pods[p]
        owner = pod.owner.copy()
        usable = pod.healthy & ~pod.spare & (pod.nominated == FREE)
        usable[block] = False
        used = dict(used)
        spare_holders = {sl: hd for sl, hd in holders.items() if sl not in in_block}
        moves: list[Move] = []
        extra: list[Holder] = []
        now = h.now_s()
        for jid in sorted(movers, key=lambda j: -h.jobs[j].request.chips):
            mr = h.jobs[jid]
            req, pl = mr.request, mr.placement
            if not req.movable or mr.phase is not JobPhase.RUNNING or pl is None or pl.all_pods != (p,) \
                    or not book.may_reclaim(job.queue, req.queue, job.priority, req.priority):
                return None
            ok = usable & (pod.hbm_bytes >= req.hbm_bytes_per_chip)
            if h.reservations:
                denied = h.reservations.denied(req, now, len(h.cluster.pods))
                if denied is not None:
                    ok &= ~denied[p]
            ok &= (owner == FREE) | np.isin(owner, np.fromiter(spare_holders, dtype=np.int64))
            free = idx.free(ok)
            # Fewest extra victims, then fewest of their chips, then the shape it runs on
            # (its plan was chosen with it) before another it may have.
            same = set(idx.shape_ids_for(req.chips, pl.shape))
            pick: tuple[tuple[int, int, int], int, np.ndarray, list[Holder], dict[str, int]] | None = None
            for sid in idx.shape_ids_for(req.chips, req.shape):
                sh = idx.shapes[sid]
                for b in np.flatnonzero(free[sh.start : sh.stop]) + sh.start:
                    chips = idx.chips(int(b))
                    own = sorted({int(o) for o in owner[chips] if o != FREE},
                                 key=lambda o: (spare_holders[o].priority, -spare_holders[o].started_s))
                    cost = (len(own), int(sum(spare_holders[o].chips for o in own)), int(sid not in same))
                    if pick is not None and cost >= pick[0]:
                        continue
                    trial = dict(used)
                    for o in own:
                        hd = spare_holders[o]
                        spec = book.get(hd.queue)
                        if spec is None or spec.borrowed(trial.get(hd.queue, 0)) <= 0:
                            break
                        trial[hd.queue] = trial.get(hd.queue, 0) - hd.chips
                    else:
                        pick = (cost, int(b), chips, [spare_holders[o] for o in own], trial)
            if pick is None:
                return None
            _, target, chips, victims, used = pick
            for hd in victims:
                slot = h.jobs[hd.job_id].slot
                owner[owner == slot] = FREE  # preempted: its other chips are free for the next mover
                spare_holders.pop(slot, None)
            extra.extend(victims)
            usable[chips] = False
            moves.append(Move(jid, tuple(int(c) for c in chips), target))
        return tuple(moves), extra

    def _takeable(self, job: JobRequest, first: list[Holder]) -> tuple[set[str], dict[str, int]]:
        """Of ``first`` (in preemption order), the jobs that can go without taking any
        queue below its nominal quota (``plan_reclaim``'s rule, one at a time), and each
        queue's chips once they have gone."""
        book = self.handle.queues
        used = dict(book.used)
        out: set[str] = set()
        for hd in first:
            other = book.get(hd.queue)
            if other is None or not book.may_reclaim(job.queue, hd.queue, job.priority, hd.priority):
                continue
            if other.borrowed(used.get(hd.queue, 0)) <= 0:
                continue
            used[hd.queue] = used.get(hd.queue, 0) - hd.chips
            out.add(hd.job_id)
        return out, used


def factory(handle: Handle, args: dict[str, Any]) -> Reclaim:
    return Reclaim(handle, **args)
