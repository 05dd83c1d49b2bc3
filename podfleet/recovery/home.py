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
from abc import ABC, abstractmethod
from typing import Any

from podfleet.control.owners import ChipOwners
from podfleet.errors import PodfleetError
from podfleet.fabric.base import ChipState
from podfleet.recovery.model import JobPolicy, Recovery
from podfleet.recovery.spares import free_chips, group_of, home_group, tp_group, whole_groups
from podfleet.wire import JsonObject

REHOME = "rehome"  # a rank in another pod moving back to a free chip of its job's pod
FOLLOW = "tp-group-follow"  # a healthy rank following its tensor-parallel group mate out of a full pod


class HomeFlows(ABC):
    """The back-home half of a recovery orchestrator (``RecoveryOrchestrator`` is the one
    subclass): it sets the attributes below and runs the flows (``_new``, ``_start``)."""

    fab: Any  # the twin fabric: ``job()``, ``chip_states()``, ``topology``
    owner: ChipOwners
    policies: dict[str, JobPolicy]
    active: dict[str, Recovery]  # job id -> its open recovery
    reserved: set[int]
    cordoned: set[int]
    hold_rehome: bool
    # Recovery ids whose current pause already paid a planned rank move.
    _moved_in_pause: set[str]
    # Recovery id -> (the pod a tensor-parallel group is moving to, the group's chips).
    _follow_to: dict[str, tuple[int, frozenset[int]]]
    # (job id, rank) -> the home-pod chip a rank left for another pod.
    _origin: dict[tuple[str, int], int]

    @abstractmethod
    def _new(self, kind: str, target: str, reason: str, job_id: str | None) -> Recovery: ...

    @abstractmethod
    def _step(self, rec: Recovery, name: str, reason: str, **detail: Any) -> Any: ...

    @abstractmethod
    def _start(self, rec: Recovery) -> None: ...

    # --- leaving the pod ----------------------------------------------------------------
    def _moved_between_pods(self, job_id: str, rank: int, before: tuple[int, ...], chip: int, spare: int,
                            cause: str) -> None:
        """Remember the home chip a rank left for another pod (its way back); forget it
        once the rank is home."""
        topo = self.fab.topology
        home = home_group(topo, before)
        if home is not None and group_of(topo, chip) == home != group_of(topo, spare):
            self._origin.setdefault((job_id, rank), chip)
        elif cause == REHOME:
            self._origin.pop((job_id, rank), None)

    def _forget_origins(self, job_id: str) -> None:
        for key in [k for k in self._origin if k[0] == job_id]:
            self._origin.pop(key)

    def _follow(self, rec: Recovery, chips: tuple[int, ...], options: JsonObject, chip: int,
                spare: int) -> None:
        """A rank that had to leave its job's pod takes its tensor-parallel group along:
        alone in another pod it would put the group's all-reduces (the heaviest traffic,
        every layer) on the network tier and slow every step several times over; the
        whole group there keeps them on NeuronLink, and only pipeline sends and the
        gradient reduction cross. The mates move in the same pause, alongside the first
        move (one worker restart each, concurrently), as live copies of their own state;
        their chips stay free for the group's way home (``rehome`` moves whole groups)."""
        topo = self.fab.topology
        home = home_group(topo, chips)
        if home is None or group_of(topo, spare) == home or group_of(topo, chip) != home:
            return
        queued = {c for c, _ in rec.pending}
        mates = [m for m in tp_group(chips, options, chip)
                 if m != chip and m not in queued and group_of(topo, m) == home
                 and self.fab.chip_state(m) in (ChipState.HEALTHY, ChipState.DEGRADED)]
        if not mates:
            return
        self._step(rec, "group-follows", f"rank on chip {chip} left the pod: its tensor-parallel group "
                   f"{mates} follows to keep its all-reduces on NeuronLink", chips=mates)
        rec.pending[1:1] = [[m, FOLLOW] for m in mates]
        self._follow_to[rec.id] = (group_of(topo, spare), frozenset(tp_group(chips, options, chip)))
        self._moved_in_pause.add(rec.id)

    def _group_target(self, rec_id: str, chip: int) -> int | None:
        """The pod a rank on ``chip`` must go to because its tensor-parallel group is
        moving there (a follower, or a mate queued by the same batch): None if free to
        go anywhere. A mate must not take a chip a follower just left at home."""
        got = self._follow_to.get(rec_id)
        return got[0] if got is not None and chip in got[1] else None

    # --- coming home ------------------------------------------------------------------
    def away(self, job_id: str) -> list[int]:
        """Chips of a job outside its home pod (empty when it fits none or sits in one)."""
        run = self.fab.job(job_id)
        home = home_group(self.fab.topology, run.chips)
        if home is None:
            return []
        return [c for c in run.chips if group_of(self.fab.topology, c) != home]

    def _home_free(self, job_id: str) -> list[int]:
        run = self.fab.job(job_id)
        home = home_group(self.fab.topology, run.chips)
        if home is None:
            return []
        states = [str(s) for s in self.fab.chip_states()]
        cand = free_chips(states, self.owner, exclude=(*run.chips, *self.reserved, *self.cordoned))
        return [c for c in cand if group_of(self.fab.topology, c) == home]

    def rehome(self, job_id: str) -> Recovery | None:
        """Move the job's ranks that sit in another pod back to free chips of its pod (as
        many as there are free ones); a live move at a step boundary. None when there is
        nothing to do (in one pod, no free chip at home, a recovery already running)."""
        if job_id not in self.policies or job_id in self.active or self.hold_rehome:
            return None
        run = self.fab.job(job_id)
        if str(run.state) != "running":
            return None
        away = [c for c in self.away(job_id)
                if self.fab.chip_state(c) in (ChipState.HEALTHY, ChipState.DEGRADED)]
        if not away:
            return None  # the common case, without a look at every chip
        free = self._home_free(job_id)
        if not free:
            return None
        moving = self._whole_groups(run, away, len(free))
        if not moving:
            return None  # not enough free chips at home for a whole tensor-parallel group yet
        rec = self._new(REHOME, f"chip:{moving[0]}", f"ranks on {moving} are outside the job's pod; "
                        f"{len(free)} chip(s) free there", job_id)
        rec.pending.extend([c, REHOME] for c in moving)
        self._start(rec)
        return rec

    @staticmethod
    def _whole_groups(run: Any, away: list[int], free: int) -> list[int]:
        """The away chips to bring home, whole tensor-parallel groups at a time (at most
        ``free``): a group split between pods runs its all-reduces over the network
        tier, slower than the whole group away (``_follow`` in the orchestrator)."""
        moving: list[int] = []
        for group in whole_groups(away, lambda c: tp_group(run.chips, run.spec.options, c)):
            if len(moving) + len(group) <= free:
                moving.extend(group)
        return moving

    def rehome_all(self) -> list[Recovery]:
        """``rehome`` every managed job that has ranks away from its pod."""
        if self.hold_rehome:
            return []
        out = []
        for job_id in list(self.policies):
            try:
                rec = self.rehome(job_id)
            except PodfleetError:
                continue  # the fabric no longer knows the job: nothing to bring home
            if rec is not None:
                out.append(rec)
        return out

    def _rehome_quietly(self, job_id: str) -> None:
        with contextlib.suppress(PodfleetError):  # the job is gone
            self.rehome(job_id)
