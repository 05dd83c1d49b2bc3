"""The recovery flows, run as SimPy processes on the timeline.

Flows (each step a ``recovery-step`` timeline event with its reason, and a ``Step`` in
the job's ``Recovery`` journal, which the listener persists and shows on the job):

* chip failure: isolate -> select a spare (closest to the rank's ring neighbours) ->
  move the rank -> restore (peer replica if its holder is alive, else checkpoint) ->
  resume;
* uncorrectable ECC (HBM / SRAM): isolate -> fence the bad partition -> the chip comes
  back degraded with less memory -> if the rank still fits it restores in place, else
  it migrates as above;
* thermal runaway: throttle -> migrate the rank while the chip still works (a live copy)
  -> isolate the chip for service;
* predicted failure (``drain``): migrate the rank while the chip works -> isolate;
* link down / flap: reroute around the link (``hardware.routing.Router``) -> mark it
  degraded -> tell the scheduler (listener ``link_changed``); jobs keep running;
* no free chip: ``shrink`` drops the failed rank's data-parallel replica and goes on
  with the rest, or ``wait`` parks the flow until a chip is repaired (per job policy);
* back home (``rehome``): a job that fits one pod but had a rank moved to another pod
  (its own pod had no free chip) talks over the network tier until the rank is back, so
  once a chip of its pod is free again (repaired, updated) the rank moves home at a
  step boundary (a live copy, one short pause), unless a firmware rollout holds moves
  (``hold_rehome``: it frees the pod's chips one after another and brings ranks home
  at its end).

Every flow of a fault starts with ``detect``: the time until the control plane can know
(``recovery.costs.detect_delay_s``, drawn from the timeline's seeded RNG: the heartbeat
hang timeout for a hard failure, the next telemetry sample and health scan for a
degradation). Restore times scale the measured costs in ``recovery.model`` by the rank's
state (perf's memory model) and the copy path's bandwidth (``recovery.costs``).

A second failure in a job already recovering joins its flow (``pending``). Every step
is idempotent against the fabric's state, so an orchestrator rebuilt from the journal
after a control-plane restart finishes what the old one started: ``adopt`` where the
fabric still runs the job (its workers outlived the plane), ``adopt_relaunch`` where it
does not (the twin dies with its plane): the flow's chips are isolated and the job comes
back from its checkpoint through the job manager's relaunch, which ends the flow.

The fabric is any that declares ``RankMoves`` (``fabric.base``): the twin, whose moves
take no time of their own (``ResumableRuns``: each step waits its modelled cost), or a
process fabric, whose detection, moves and restores take real time (the flows wait on
its run state; no modelled cost is added). ``RecoveryOrchestrator`` composes three
collaborators on one ``RecoveryContext`` (``recovery.context``): ``JobFlows``
(``recovery.jobflows``, with its ``ChipSteps``, ``recovery.chipsteps``), ``LinkFlows``
(``recovery.links``) and ``HomeFlows`` (``recovery.home``).
"""

from __future__ import annotations

from collections.abc import Callable

from podfleet.control.owners import ChipOwners
from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import ChipState, FabricEvent, ResumableRuns
from podfleet.recovery import costs
from podfleet.recovery.context import RecoveryContext, RecoveryFabric
from podfleet.recovery.home import REHOME, HomeFlows
from podfleet.recovery.jobflows import JobFlows, cause_kind
from podfleet.recovery.journal import MemoryJournal, RecoveryListener
from podfleet.recovery.links import LinkFlows
from podfleet.recovery.model import JobPolicy, Recovery, RecoveryState, Timings
from podfleet.wire import JsonObject

__all__ = ["RecoveryOrchestrator", "cause_kind"]


class RecoveryOrchestrator:
    """One cluster's recovery: the flows, composed on one shared ``RecoveryContext``."""

    def __init__(self, fabric: RecoveryFabric, timeline: Timeline, *, owner: ChipOwners | None = None,
                 timings: Timings | None = None, listener: RecoveryListener | None = None,
                 subscribe: bool = True, spares: tuple[int, ...] | None = None) -> None:
        self.ctx = ctx = RecoveryContext(
            fab=fabric, tl=timeline, owner=owner if owner is not None else ChipOwners(),
            timings=timings or Timings(), listener=listener or MemoryJournal(),
            modelled=isinstance(fabric, ResumableRuns), spares=frozenset(spares or ()))
        self.fab, self.tl = fabric, timeline
        self.home = HomeFlows(ctx, self._start)
        self.jobs = JobFlows(ctx, self.home)
        self.links = LinkFlows(ctx)
        self._unsub: Callable[[], object] | None = None
        if subscribe:
            got = fabric.subscribe(lambda ev: timeline.call_at(0, lambda: self.handle(ev)))
            self._unsub = got if callable(got) else None

    def _start(self, rec: Recovery) -> None:
        self.jobs.start(rec)

    # --- the shared state, as callers read and set it --------------------------------------
    @property
    def owner(self) -> ChipOwners:
        return self.ctx.owner

    @property
    def timings(self) -> Timings:
        return self.ctx.timings

    @property
    def listener(self) -> RecoveryListener:
        return self.ctx.listener

    @property
    def policies(self) -> dict[str, JobPolicy]:
        return self.ctx.policies

    @property
    def active(self) -> dict[str, Recovery]:
        return self.ctx.active

    @property
    def link_active(self) -> dict[int, Recovery]:
        return self.ctx.link_active

    @property
    def done(self) -> list[Recovery]:
        return self.ctx.done

    @property
    def fenced(self) -> dict[int, float]:
        return self.ctx.fenced

    @property
    def spares(self) -> frozenset[int]:
        return self.ctx.spares

    @spares.setter
    def spares(self, chips: frozenset[int]) -> None:
        self.ctx.spares = frozenset(chips)

    @property
    def reserved(self) -> set[int]:
        return self.ctx.reserved

    @reserved.setter
    def reserved(self, chips: set[int]) -> None:
        self.ctx.reserved = set(chips)

    @property
    def cordoned(self) -> set[int]:
        return self.ctx.cordoned

    @cordoned.setter
    def cordoned(self, chips: set[int]) -> None:
        self.ctx.cordoned = set(chips)

    @property
    def hold_rehome(self) -> bool:
        return self.ctx.hold_rehome

    @hold_rehome.setter
    def hold_rehome(self, hold: bool) -> None:
        self.ctx.hold_rehome = hold

    # --- jobs ----------------------------------------------------------------------------
    def manage(self, job_id: str, policy: JobPolicy | None = None) -> None:
        """Recover this fabric job from now on; claims its chips."""
        self.ctx.owner.assign(job_id, self.ctx.run(job_id).chips)
        self.ctx.policies[job_id] = policy or JobPolicy()

    def release(self, job_id: str) -> None:
        self.home.forget_origins(job_id)
        self.ctx.owner.release(job_id)
        self.ctx.policies.pop(job_id, None)
        self.jobs.notify_free()

    def close(self) -> None:
        """Stop this orchestrator's processes (a control-plane crash, in tests)."""
        if self._unsub:
            self._unsub()
        for p in self.ctx.procs:
            if p.is_alive:
                p.interrupt("shutdown")
        self.ctx.procs.clear()

    def state_bytes(self, job_id: str) -> float:
        return self.jobs.state_bytes(job_id)

    def step_ended(self, job_id: str) -> None:
        """The fabric reported a finished step of the job (a ``progress`` event)."""
        self.jobs.step_ended(job_id)

    # --- events ----------------------------------------------------------------------
    def handle(self, ev: FabricEvent) -> None:
        if ev.kind == "progress":
            if ev.job_id is not None:
                self.step_ended(ev.job_id)
            return
        d = dict(ev.detail)
        if ev.kind == "chip-failed" and ev.chip is not None:
            self.chip_fault(ev.chip, str(d.get("cause") or d.get("reason") or "chip-failure"))
        elif ev.kind == "chip-degraded" and ev.chip is not None and str(d.get("reason", "")).startswith("thermal-runaway"):
            self.chip_fault(ev.chip, "thermal-runaway")
        elif ev.kind in ("link-down", "link-degraded") and ev.link is not None:
            self.link_fault(ev.link, ev.kind.removeprefix("link-"), str(d.get("reason", "")))
        elif ev.kind == "link-up" and ev.link is not None:
            self.links.link_up(ev.link)
        elif ev.kind == "chip-healthy" or ev.kind in ("job-finished", "job-stopped"):
            if ev.kind == "job-finished" and ev.job_id is not None and ev.job_id in self.ctx.policies:
                self.release(ev.job_id)
            self.jobs.notify_free()
            self.rehome_all()

    def link_fault(self, link: int, state: str, reason: str) -> Recovery | None:
        return self.links.link_fault(link, state, reason)

    def chip_fault(self, chip: int, cause: str) -> Recovery | None:
        ctx = self.ctx
        job_id = ctx.owner.get(chip)
        if job_id is None:
            return self._standalone_chip(chip, cause)
        if job_id not in ctx.policies:
            return None  # a job this orchestrator does not manage: its owner handles it
        rec = ctx.active.get(job_id)
        if rec is not None and rec.kind == REHOME and not any(s.name == "move-rank" for s in rec.steps):
            # A move back home that has moved nothing yet (waiting for its step boundary):
            # the fault goes first, with its own detection and flow (a fault never hides
            # inside a planned move); the move home is tried again once it is over.
            self.jobs.cancel(rec, f"chip {chip} {cause}: its recovery goes first")
            rec = None
        if rec is not None:  # a second fault during a recovery joins the running flow
            if [chip, cause] not in rec.pending:
                rec.pending.append([chip, cause])
                ctx.step(rec, "fault-joined", f"chip {chip} {cause} while recovering", chip=chip)
            return rec
        rec = ctx.new(cause_kind(cause), f"chip:{chip}", f"chip {chip}: {cause}", job_id)
        rec.pending.append([chip, cause])
        # A process fabric's fault event comes after its own detection (heartbeats, exit
        # codes): only the twin's has a modelled detection delay to wait.
        delay = costs.detect_delay_s(cause, ctx.timings, ctx.tl.rng) if ctx.modelled else 0.0
        if delay > 0:
            rec.detected_t = None  # the flow waits ``delay_s`` of its detect step first
            how = "heartbeat silence past the hang timeout" if cause in costs.HARD_CAUSES else \
                "the next telemetry sample and health scan"
            ctx.step(rec, "detect", f"chip {chip} {cause}: noticed through {how}", chip=chip,
                     delay_s=round(delay, 6))
        self.jobs.start(rec)
        return rec

    def drain(self, chip: int, reason: str) -> Recovery | None:
        """Move work off a chip that still works (predicted failure), then isolate it."""
        if not self.ctx.usable(chip):
            return None
        self.ctx.tl.emit("drain", chip=chip, reason=reason)
        return self.chip_fault(chip, "predicted-failure")

    def _standalone_chip(self, chip: int, cause: str) -> Recovery | None:
        """A fault on a chip no managed job holds: take it out of service until repaired,
        or (a firmware fault) until its reset, as under a job (``ChipSteps.isolate``)."""
        if self.ctx.chip_state(chip) != ChipState.ISOLATED:
            self.jobs.chips.isolate(chip, cause)
        return None

    def adopt(self, journal: JsonObject, policy: JobPolicy | None = None) -> Recovery:
        """Continue a recovery journaled by a previous control plane."""
        rec = Recovery.from_dict(journal)
        assert rec.job_id is not None
        if rec.job_id not in self.ctx.policies:
            self.manage(rec.job_id, policy)
        if rec.state == RecoveryState.WAITING:
            rec.set_state(RecoveryState.RUNNING)
        self.ctx.step(rec, "adopted", "control plane restarted; finishing the recovery from its journal")
        self.jobs.start(rec)
        return rec

    def adopt_relaunch(self, journal: JsonObject) -> Recovery:
        """Continue a journaled recovery whose job this fabric no longer runs: its chips
        are dealt with now, the job manager relaunches the job from its checkpoint, and the
        flow ends at the job's ``job-started`` (``relaunched``)."""
        rec = Recovery.from_dict(journal)
        assert rec.job_id is not None
        self.jobs.adopt_relaunch(rec)
        return rec

    def relaunched(self, job_id: str) -> None:
        self.jobs.relaunched(job_id)

    def relaunching(self, job_id: str) -> bool:
        return job_id in self.jobs.relaunching

    def relaunching_jobs(self) -> tuple[str, ...]:
        """The jobs of adopted flows waiting for their relaunch."""
        return tuple(self.jobs.relaunching)

    def abandon(self, job_id: str, reason: str) -> None:
        self.jobs.abandon(job_id, reason)

    # --- moves home ------------------------------------------------------------------------
    def away(self, job_id: str) -> list[int]:
        return self.home.away(job_id)

    def rehome(self, job_id: str) -> Recovery | None:
        return self.home.rehome(job_id)

    def rehome_all(self) -> list[Recovery]:
        return self.home.rehome_all()
