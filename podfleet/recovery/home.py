"""Cross-pod moves of the recovery orchestrator.

A job that fits one pod but had ranks moved to another pod (its own pod had no free
chip) talks over the network tier until they are back:

* a rank that must leave the pod takes its tensor-parallel group along (``_follow``):
  alone there it would put the group's all-reduces on the network tier;
* once chips of its pod are free again (repaired, updated, released), whole groups move
  home at a step boundary (a live copy, one short pause), each rank to the chip it left
  when that is free. A firmware rollout holds these moves (``hold_rehome``) until it
  ends: it frees the pod's chips one after another, so each rank moves once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence

from podfleet.errors import PodfleetError
from podfleet.fabric.base import RunState
from podfleet.recovery.context import RecoveryContext
from podfleet.recovery.model import Recovery
from podfleet.recovery.spares import free_chips, group_of, home_group, tp_group, whole_groups

REHOME = "rehome"  # a rank in another pod moving back to a free chip of its job's pod
FOLLOW = "tp-group-follow"  # a healthy rank following its tensor-parallel group mate out of a full pod


class HomeFlows:
    """The cross-pod moves of a recovery orchestrator, on its shared ``RecoveryContext``;
    ``start`` runs a recovery's job flow (the orchestrator's ``JobFlows.start``)."""

    def __init__(self, ctx: RecoveryContext, start: Callable[[Recovery], None]) -> None:
        self.ctx = ctx
        self._start = start

    # --- leaving the pod ----------------------------------------------------------------
    def moved_between_pods(self, job_id: str, rank: int, before: tuple[int, ...], chip: int, spare: int,
                            cause: str) -> None:
        """Remember the home chip a rank left for another pod (its way back); forget it
        once the rank is home."""
        topo, origin = self.ctx.fab.topology, self.ctx.origin
        home = home_group(topo, before)
        if home is not None and group_of(topo, chip) == home != group_of(topo, spare):
            origin.setdefault((job_id, rank), chip)
        elif cause == REHOME:
            origin.pop((job_id, rank), None)

    def forget_origins(self, job_id: str) -> None:
        origin = self.ctx.origin
        for key in [k for k in origin if k[0] == job_id]:
            origin.pop(key)

    def follow(self, rec: Recovery, chips: tuple[int, ...], options: Mapping[str, object], chip: int,
               spare: int) -> None:
        """A rank that had to leave its job's pod takes its tensor-parallel group along:
        alone in another pod it would put the group's all-reduces (the heaviest traffic,
        every layer) on the network tier and slow every step several times over; the
        whole group there keeps them on NeuronLink, and only pipeline sends and the
        gradient reduction cross. The mates move in the same pause, alongside the first
        move (one worker restart each, concurrently), as live copies of their own state;
        their chips stay free for the group's way home (``rehome`` moves whole groups)."""
        ctx = self.ctx
        topo = ctx.fab.topology
        home = home_group(topo, chips)
        if home is None or group_of(topo, spare) == home or group_of(topo, chip) != home:
            return
        queued = {c for c, _ in rec.pending}
        mates = [m for m in tp_group(chips, options, chip)
                 if m != chip and m not in queued and group_of(topo, m) == home and ctx.usable(m)]
        if not mates:
            return
        ctx.step(rec, "group-follows", f"rank on chip {chip} left the pod: its tensor-parallel group "
                   f"{mates} follows to keep its all-reduces on NeuronLink", chips=mates)
        rec.pending[1:1] = [[m, FOLLOW] for m in mates]
        ctx.follow_to[rec.id] = (group_of(topo, spare), frozenset(tp_group(chips, options, chip)))
        ctx.moved_in_pause.add(rec.id)

    def group_target(self, rec_id: str, chip: int) -> int | None:
        """The pod a rank on ``chip`` must go to because its tensor-parallel group is
        moving there (a follower, or a mate queued by the same batch): None if free to
        go anywhere. A mate must not take a chip a follower just left at home."""
        got = self.ctx.follow_to.get(rec_id)
        return got[0] if got is not None and chip in got[1] else None

    # --- coming home ------------------------------------------------------------------
    def away(self, job_id: str) -> list[int]:
        """Chips of a job outside its home pod (empty when it fits none or sits in one)."""
        topo = self.ctx.fab.topology
        chips = self.ctx.run(job_id).chips
        home = home_group(topo, chips)
        if home is None:
            return []
        return [c for c in chips if group_of(topo, c) != home]

    def home_free(self, job_id: str) -> list[int]:
        ctx = self.ctx
        topo = ctx.fab.topology
        chips = ctx.run(job_id).chips
        home = home_group(topo, chips)
        if home is None:
            return []
        states = [str(s) for s in ctx.fab.chip_states()]
        cand = free_chips(states, ctx.owner, exclude=(*chips, *ctx.reserved, *ctx.cordoned))
        return [c for c in cand if group_of(topo, c) == home]

    def rehome(self, job_id: str) -> Recovery | None:
        """Move the job's ranks that sit in another pod back to free chips of its pod (as
        many as there are free ones); a live move at a step boundary. None when there is
        nothing to do (in one pod, no free chip at home, a recovery already running)."""
        ctx = self.ctx
        if job_id not in ctx.policies or job_id in ctx.active or ctx.hold_rehome:
            return None
        run = ctx.run(job_id)
        if run.state is not RunState.RUNNING:
            return None
        away = [c for c in self.away(job_id) if ctx.usable(c)]
        if not away:
            return None  # the common case, without a look at every chip
        free = self.home_free(job_id)
        if not free:
            return None
        moving = self._whole_groups(run.chips, ctx.spec(job_id).options, away, len(free))
        if not moving:
            return None  # not enough free chips at home for a whole tensor-parallel group yet
        rec = ctx.new(REHOME, f"chip:{moving[0]}", f"ranks on {moving} are outside the job's pod; "
                        f"{len(free)} chip(s) free there", job_id)
        rec.pending.extend([c, REHOME] for c in moving)
        self._start(rec)
        return rec

    @staticmethod
    def _whole_groups(chips: Sequence[int], options: Mapping[str, object], away: list[int],
                      free: int) -> list[int]:
        """The away chips to bring home, whole tensor-parallel groups at a time (at most
        ``free``): a group split between pods runs its all-reduces over the network
        tier, slower than the whole group away (``_follow`` in the orchestrator)."""
        moving: list[int] = []
        for group in whole_groups(away, lambda c: tp_group(chips, options, c)):
            if len(moving) + len(group) <= free:
                moving.extend(group)
        return moving

    def rehome_all(self) -> list[Recovery]:
        """``rehome`` every managed job that has ranks away from its pod."""
        if self.ctx.hold_rehome:
            return []
        out = []
        for job_id in list(self.ctx.policies):
            try:
                rec = self.rehome(job_id)
            except PodfleetError:
                continue  # the fabric no longer knows the job: nothing to bring home
            if rec is not None:
                out.append(rec)
        return out

    def rehome_quietly(self, job_id: str) -> None:
        with contextlib.suppress(PodfleetError):  # the job is gone
            self.rehome(job_id)
