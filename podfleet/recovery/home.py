"""Back-home flows of the recovery orchestrator: a job that fits one pod but had a rank
moved to another pod (its own pod had no free chip) talks over the network tier until
the rank is back, so once a chip of its pod is free again (repaired, updated, released)
the rank moves home at a step boundary (a live copy, one short pause). A firmware
rollout holds these moves (``hold_rehome``) until it ends: it frees the pod's chips one
after another, so each rank moves once."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from typing import Any

from podfleet.control.owners import ChipOwners
from podfleet.errors import PodfleetError
from podfleet.fabric.base import ChipState
from podfleet.recovery.model import JobPolicy, Recovery
from podfleet.recovery.spares import free_chips, group_of, home_group, tp_group

REHOME = "rehome"  # a rank in another pod moving back to a free chip of its job's pod


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

    @abstractmethod
    def _new(self, kind: str, target: str, reason: str, job_id: str | None) -> Recovery: ...

    @abstractmethod
    def _start(self, rec: Recovery) -> None: ...

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
        seen: set[int] = set()
        for c in away:
            if c in seen:
                continue
            group = [x for x in tp_group(run.chips, run.spec.options, c) if x in away] or [c]
            seen.update(group)
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
