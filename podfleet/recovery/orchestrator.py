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
after a control-plane restart (``adopt``) finishes what the old one started.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any

import simpy

from podfleet.control.owners import ChipOwners
from podfleet.engine.timeline import Timeline
from podfleet.errors import PodfleetError
from podfleet.fabric.base import ChipState, FabricEvent
from podfleet.hardware.routing import Router
from podfleet.recovery import costs
from podfleet.recovery.home import FOLLOW, REHOME, HomeFlows
from podfleet.recovery.journal import MemoryJournal, RecoveryListener
from podfleet.recovery.links import LinkFlows
from podfleet.recovery.model import (
    DEFAULT_STATE_BYTES_PER_RANK,
    JobPolicy,
    Recovery,
    RecoveryState,
    Step,
    Timings,
)
from podfleet.recovery.spares import choose_spare, free_chips, group_of
from podfleet.wire import JsonObject

ECC_CAUSES = ("hbm-uncorrectable", "sram-uncorrectable")
LIVE_CAUSES = ("thermal-runaway", "predicted-failure", "firmware-update", REHOME, FOLLOW)
# Live moves that can wait for a step to end.
BOUNDARY_CAUSES = ("predicted-failure", "firmware-update", REHOME, FOLLOW)


class RecoveryOrchestrator(LinkFlows, HomeFlows):
    # The twin's fabric (runs, chip states, rank moves); not yet a declared protocol.
    fab: Any

    def __init__(self, fabric: Any, timeline: Timeline, *, owner: ChipOwners | None = None,
                 timings: Timings | None = None, listener: RecoveryListener | None = None,
                 subscribe: bool = True, spares: tuple[int, ...] | None = None) -> None:
        self.fab = fabric
        self.tl = timeline
        # The cluster's chip owners (shared with the job manager; written through its methods).
        self.owner: ChipOwners = owner if owner is not None else ChipOwners()
        self.timings = timings or Timings()
        self.listener: RecoveryListener = listener or MemoryJournal()
        self.spares = frozenset(spares or ())  # the chips ranks move to first
        self.policies: dict[str, JobPolicy] = {}
        self.active: dict[str, Recovery] = {}  # job id -> its open recovery
        self.link_active: dict[int, Recovery] = {}
        self.done: list[Recovery] = []
        self.lost_jobs: dict[str, str] = {}
        self.fenced: dict[int, float] = {}  # chip -> share of HBM fenced
        self.reserved: set[int] = set()  # chips no rank may move to (e.g. being updated)
        self.cordoned: set[int] = set()  # chips the operator cordoned (control.chips): never a target
        self.hold_rehome = False  # a firmware rollout is freeing the pod's chips one by one
        self._procs: list[simpy.Process] = []
        self._wake: simpy.Event = timeline.env.event()
        self._seq = 0
        self._routers: dict[int, Router] = {}  # torus index -> its router
        self._copy_bw: dict[str, float] = {}  # recovery id -> slowest peer-copy path of its moves
        self._state_bytes: dict[tuple[str, int], float] = {}
        self._unsub: Callable[[], None] | None = None
        self._step_end: dict[str, simpy.Event] = {}  # job id -> fires when its next step ends
        self._proc_of: dict[str, simpy.Process] = {}  # recovery id -> its flow
        # Recovery ids whose current pause already paid a planned rank move: the planned
        # moves asked for together (a firmware batch, a drained node) run concurrently,
        # one worker restart per chip, so the pause pays the move once.
        self._moved_in_pause: set[str] = set()
        self._follow_to: dict[str, tuple[int, frozenset[int]]] = {}  # see ``HomeFlows``
        self._origin: dict[tuple[str, int], int] = {}
        if subscribe:
            self._unsub = fabric.subscribe(lambda ev: timeline.call_at(0, lambda: self.handle(ev)))

    # --- jobs ----------------------------------------------------------------------------
    def manage(self, job_id: str, policy: JobPolicy | None = None) -> None:
        """Recover this fabric job from now on; claims its chips."""
        run = self.fab.job(job_id)
        self.owner.assign(job_id, run.chips)
        self.policies[job_id] = policy or JobPolicy()

    def release(self, job_id: str) -> None:
        self._forget_origins(job_id)
        self.owner.release(job_id)
        self.policies.pop(job_id, None)
        self._notify_free()

    def close(self) -> None:
        """Stop this orchestrator's processes (a control-plane crash, in tests)."""
        if self._unsub:
            self._unsub()
        for p in self._procs:
            if p.is_alive:
                p.interrupt("shutdown")
        self._procs.clear()

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
        elif ev.kind == "link-up" and ev.link is not None and (routed := self.router(ev.link)) is not None:
            r, local, _ = routed
            r.restore_link(local)
            self.listener.link_changed(ev.link, "up", Recovery("-", "link", f"link:{ev.link}", "repaired", self.tl.now))
        elif ev.kind == "chip-healthy" or ev.kind in ("job-finished", "job-stopped"):
            if ev.kind == "job-finished" and ev.job_id is not None and ev.job_id in self.policies:
                self.release(ev.job_id)
            self._notify_free()
            self.rehome_all()

    def chip_fault(self, chip: int, cause: str) -> Recovery | None:
        job_id = self.owner.get(chip)
        if job_id is None:
            return self._standalone_chip(chip, cause)
        if job_id not in self.policies:
            return None  # a job this orchestrator does not manage: its owner handles it
        rec = self.active.get(job_id)
        if rec is not None and rec.kind == REHOME and not any(s.name == "move-rank" for s in rec.steps):
            # A move back home that has moved nothing yet (waiting for its step boundary):
            # the fault goes first, with its own detection and flow (a fault never hides
            # inside a planned move); the move home is tried again once it is over.
            self._cancel(rec, f"chip {chip} {cause}: its recovery goes first")
            rec = None
        if rec is not None:  # a second fault during a recovery joins the running flow
            if [chip, cause] not in rec.pending:
                rec.pending.append([chip, cause])
                self._step(rec, "fault-joined", f"chip {chip} {cause} while recovering", chip=chip)
            return rec
        rec = self._new(cause_kind(cause), f"chip:{chip}", f"chip {chip}: {cause}", job_id)
        rec.pending.append([chip, cause])
        delay = costs.detect_delay_s(cause, self.timings, self.tl.rng)
        if delay > 0:
            rec.detected_t = None  # the flow waits ``delay_s`` of its detect step first
            how = "heartbeat silence past the hang timeout" if cause in costs.HARD_CAUSES else \
                "the next telemetry sample and health scan"
            self._step(rec, "detect", f"chip {chip} {cause}: noticed through {how}", chip=chip,
                       delay_s=round(delay, 6))
        self._start(rec)
        return rec

    def drain(self, chip: int, reason: str) -> Recovery | None:
        """Move work off a chip that still works (predicted failure), then isolate it."""
        if self.fab.chip_state(chip) not in (ChipState.HEALTHY, ChipState.DEGRADED):
            return None
        self.tl.emit("drain", chip=chip, reason=reason)
        return self.chip_fault(chip, "predicted-failure")

    def _standalone_chip(self, chip: int, cause: str) -> Recovery | None:
        """A fault on a chip no managed job holds: take it out of service until repaired."""
        if self.fab.chip_state(chip) != ChipState.ISOLATED:
            self.fab.set_chip_state(chip, ChipState.ISOLATED, f"isolated: {cause}")
            self._schedule_repair(chip)
        return None

    # --- the job flow ----------------------------------------------------------------
    def _new(self, kind: str, target: str, reason: str, job_id: str | None) -> Recovery:
        self._seq += 1
        rec = Recovery(f"rc-{self.tl.seed}-{self._seq:06d}", kind, target, reason, self.tl.now, job_id=job_id,
                       detected_t=self.tl.now)
        self.tl.emit("recovery-start", recovery=rec.id, recovery_kind=kind, target=target, reason=reason, job_id=job_id)
        return rec

    def _start(self, rec: Recovery) -> None:
        assert rec.job_id is not None
        self.active[rec.job_id] = rec
        self.listener.recovery_changed(rec)
        proc = self.tl.process(self._job_flow(rec))
        self._procs.append(proc)
        self._proc_of[rec.id] = proc

    def _cancel(self, rec: Recovery, reason: str) -> None:
        """End a move back home that has moved nothing yet: nothing to undo (a pause it
        made is the next flow's to end)."""
        self._step(rec, "cancelled", reason)
        rec.pending.clear()
        proc = self._proc_of.pop(rec.id, None)
        self._finish(rec, RecoveryState.DONE, hand_back=False)
        if proc is not None and proc.is_alive:
            proc.interrupt("cancelled")

    def adopt(self, journal: JsonObject, policy: JobPolicy | None = None) -> Recovery:
        """Continue a recovery journaled by a previous control plane."""
        rec = Recovery.from_dict(journal)
        assert rec.job_id is not None
        if rec.job_id not in self.policies:
            self.manage(rec.job_id, policy)
        if rec.state == RecoveryState.WAITING:
            rec.set_state(RecoveryState.RUNNING)
        self._step(rec, "adopted", "control plane restarted; finishing the recovery from its journal")
        self._start(rec)
        return rec

    def _step(self, rec: Recovery, name: str, reason: str, **detail: Any) -> Step:
        now = self.tl.now
        if rec.steps and rec.steps[-1].t_end is None:
            rec.steps[-1].t_end = now
        st = Step(name, reason, now, detail={k: v for k, v in detail.items() if v is not None})
        rec.steps.append(st)
        self.tl.emit("recovery-step", recovery=rec.id, job_id=rec.job_id, step=name, reason=reason, **st.detail)
        self.listener.recovery_changed(rec)
        return st

    def _job_flow(self, rec: Recovery) -> Generator[simpy.Event, Any, None]:
        job_id = rec.job_id
        assert job_id is not None
        source: str | None = None
        try:
            if rec.detected_t is None:
                first = rec.steps[0] if rec.steps and rec.steps[0].name == "detect" else None
                left = rec.t_start + float(first.detail.get("delay_s", 0.0)) - self.tl.now if first else 0.0
                if left > 0:
                    yield self.tl.env.timeout(left)
                rec.detected_t = self.tl.now
                if first is not None and first.t_end is None:
                    first.t_end = self.tl.now
            while True:
                while rec.pending:
                    got = yield from self._handle_one(rec, job_id)
                    if got is not None:
                        source = self._better(source, got)
                run = self.fab.job(job_id)
                if str(run.state) != "paused":
                    break  # finished, stopped, or a live move that never paused it
                yield from self._restore(rec, source or "replica")
                if rec.pending:
                    continue  # a fault landed during the restore: go round again
                bad = [c for c in run.chips if self.fab.chip_state(c) not in (ChipState.HEALTHY, ChipState.DEGRADED)]
                if bad:
                    rec.pending.extend([c, "chip-failure"] for c in bad)
                    continue
                self._step(rec, "resume", "all ranks on working chips",
                           from_step=run.last_checkpoint if rec.restored_from == "checkpoint" else None)
                yield self.tl.env.timeout(self.timings.resume_s)
                if rec.pending:
                    continue
                self.fab.resume(job_id, from_step=run.last_checkpoint if rec.restored_from == "checkpoint" else None)
                break
            self._finish(rec, RecoveryState.DONE)
        except simpy.Interrupt:
            return  # control plane going away: the journal has what is needed
        except PodfleetError as exc:
            # The fabric refused a step (e.g. the job was stopped under us): the flow ends
            # with the reason; it must never take the engine down.
            self._step(rec, "failed", exc.message)
            self._finish(rec, RecoveryState.FAILED)

    def _handle_one(self, rec: Recovery, job_id: str) -> Generator[simpy.Event, Any, str | None]:
        """Deal with ``rec.pending[0]``; returns where the rank's state must come from."""
        env, tm = self.tl.env, self.timings
        chip, cause = rec.pending[0]
        run = self.fab.job(job_id)
        if str(run.state) in ("stopped", "finished") or chip not in run.chips:
            rec.pending.pop(0)  # done before a restart, or the job is gone
            return None
        rank = run.chips.index(chip)
        live = cause in LIVE_CAUSES and self.fab.chip_state(chip) in (ChipState.HEALTHY, ChipState.DEGRADED)
        if cause == REHOME and (not live or not self._home_free(job_id)):
            # The chip failed meanwhile (its own fault flow moves the rank) or the free
            # chip at home was taken: nothing to bring home now.
            rec.pending.pop(0)
            return None
        if live and cause in BOUNDARY_CAUSES and str(run.state) == "running":
            # A live copy needs the rank's state at a step boundary: the job trains on
            # until its running step ends, and loses nothing. (A runaway chip cannot wait
            # a whole step: it may die first, so its move pays the partial step.)
            yield from self._to_step_boundary(rec, job_id)
            run = self.fab.job(job_id)
            if str(run.state) in ("stopped", "finished") or chip not in run.chips:
                rec.pending.pop(0)
                return None
            live = self.fab.chip_state(chip) in (ChipState.HEALTHY, ChipState.DEGRADED)
            if cause == REHOME and (not live or not self._home_free(job_id)):
                rec.pending.pop(0)
                return None
        if str(run.state) == "running":
            self.fab.pause(job_id, f"recovery {rec.id}: {cause} on chip {chip}")
            self._moved_in_pause.discard(rec.id)
        if cause not in LIVE_CAUSES and self.fab.chip_state(chip) == ChipState.HEALTHY:
            # Failed chips are never healthy again without a repair: this one was replaced
            # in place while the job waited for a chip.
            self._step(rec, "replaced-in-place", f"chip {chip} was repaired; rank {rank} stays", chip=chip)
            rec.pending.pop(0)
            return "checkpoint"
        if cause == "thermal-runaway" and live:
            self._step(rec, "throttle", f"chip {chip} cooling failed: hold its clock down", chip=chip)
            yield env.timeout(tm.throttle_s)
        if not live:
            self._step(rec, "isolate", f"chip {chip} {cause}: fence it out of the group", chip=chip)
            yield env.timeout(tm.isolate_s)
            self._isolate(chip, cause)
        if cause in ECC_CAUSES:
            stays = yield from self._fence(rec, chip, cause)
            if stays:
                rec.pending.pop(0)
                return self._restore_source(job_id, rank, chip)[0]
        concurrent = live and cause in BOUNDARY_CAUSES and rec.id in self._moved_in_pause
        self._step(rec, "select-spare", f"rank {rank} needs a chip near its ring neighbours", rank=rank)
        if not concurrent:
            yield env.timeout(tm.select_s)
        spare = self._pick(job_id, rank, home_only=cause == REHOME,
                           in_group=self._group_target(rec.id, chip))
        if spare is None and cause == REHOME:
            rec.pending.pop(0)
            return "replica"  # paused for nothing: resume as it was
        if spare is None:
            shrunk = yield from self._no_spare(rec, chip, rank)
            return "replica" if shrunk else None
        src, holder = ("replica", chip) if live else self._restore_source(job_id, rank, chip)
        self._step(rec, "move-rank", f"rank {rank}: chip {chip} -> {spare}", rank=rank, from_chip=chip, to_chip=spare,
                   concurrent=concurrent)
        if not concurrent:
            yield env.timeout(tm.move_s)
        if live and cause in BOUNDARY_CAUSES:
            self._moved_in_pause.add(rec.id)
        before = tuple(self.fab.job(job_id).chips)
        try:
            self.fab.move_rank(job_id, rank, spare)
        except PodfleetError as exc:  # the spare failed in the meantime: pick again
            self._step(rec, "retry", f"move to {spare} refused: {exc.message}")
            return None
        self.owner.move(job_id, chip, spare)
        if src == "replica" and holder is not None:
            bw = costs.copy_bw_bytes_per_s(self.fab.topology, holder, spare, tm.replica_bw_bytes_per_s)
            self._copy_bw[rec.id] = min(self._copy_bw.get(rec.id, bw), bw)
        self._moved_between_pods(job_id, rank, before, chip, spare, cause)
        self._follow(rec, before, dict(run.spec.options), chip, spare)
        if live and cause not in ("firmware-update", REHOME, FOLLOW):  # an update needs the chip free, not isolated
            self._isolate(chip, cause)
        rec.pending.pop(0)
        return src

    def step_ended(self, job_id: str) -> None:
        """The fabric reported a finished step of the job (a ``progress`` event)."""
        ev = self._step_end.pop(job_id, None)
        if ev is not None and not ev.triggered:
            ev.succeed()

    def _to_step_boundary(self, rec: Recovery, job_id: str) -> Generator[simpy.Event, Any, None]:
        """Wait (at most one step and a half) for the running step of the job to end: at
        the fabric's progress report of that step (the moment it ends), else at the next
        poll (a fabric that reports progress less often than every step)."""
        run = self.fab.job(job_id)
        st = float(run.step_time_s or 0.0)
        if not st > 0.0:  # no step finished yet (NaN): nothing to wait for
            return
        start, poll = run.step, min(max(st / 400.0, 0.001), 0.25)
        self._step(rec, "step-boundary", f"let step {start + 1} finish: a live copy needs a consistent state",
                   at_step=start)
        end = self.tl.now + 1.5 * st
        env = self.tl.env
        while self.tl.now < end:
            run = self.fab.job(job_id)
            if run.step != start or str(run.state) != "running":
                return
            done = self._step_end.get(job_id)
            if done is None or done.triggered:
                done = self._step_end[job_id] = env.event()
            yield env.any_of([done, env.timeout(poll)])

    def _restore(self, rec: Recovery, source: str) -> Generator[simpy.Event, Any, None]:
        job_id = rec.job_id
        assert job_id is not None
        tm, nbytes = self.timings, self.state_bytes(job_id)
        if source == "checkpoint":
            self._step(rec, "restore", "no live peer replica: load the latest checkpoint", source=source, nbytes=nbytes,
                       bw_bytes_per_s=tm.checkpoint_bw_bytes_per_s)
            yield self.tl.env.timeout(tm.checkpoint_restore_s(nbytes))
        else:
            bw = self._copy_bw.get(rec.id, tm.replica_bw_bytes_per_s)
            self._step(rec, "restore", "copy the rank's state from a live peer", source=source, nbytes=nbytes,
                       bw_bytes_per_s=bw)
            yield self.tl.env.timeout(tm.replica_restore_s(nbytes, bw))
        rec.restored_from = source

    def state_bytes(self, job_id: str) -> float:
        """The state one rank must get back: the policy's figure, else the job's model
        and plan through perf's memory model, else ``DEFAULT_STATE_BYTES_PER_RANK``."""
        given = self.policies[job_id].state_bytes_per_rank
        if given is not None:
            return given
        run = self.fab.job(job_id)
        key = (job_id, len(run.chips))
        if key not in self._state_bytes:
            spec = run.spec
            got = costs.state_bytes_per_rank(str(spec.model), len(run.chips), dict(spec.options), self.fab.topology)
            self._state_bytes[key] = got if got is not None else DEFAULT_STATE_BYTES_PER_RANK
        return self._state_bytes[key]

    def _finish(self, rec: Recovery, state: RecoveryState, *, hand_back: bool = True) -> None:
        if rec.state in (RecoveryState.DONE, RecoveryState.FAILED):
            return
        if rec.steps and rec.steps[-1].t_end is None:
            rec.steps[-1].t_end = self.tl.now
        rec.set_state(state)
        rec.t_end = self.tl.now
        self._proc_of.pop(rec.id, None)
        if rec.job_id is not None:
            if self.active.get(rec.job_id) is rec:
                self.active.pop(rec.job_id)
            if state == RecoveryState.DONE and hand_back:
                self.listener.job_recovered(rec.job_id, tuple(self.fab.job(rec.job_id).chips), rec)
        self._copy_bw.pop(rec.id, None)
        self._moved_in_pause.discard(rec.id)
        self._follow_to.pop(rec.id, None)
        self.listener.recovery_changed(rec)
        self.done.append(rec)
        self.tl.emit("recovery-end", recovery=rec.id, job_id=rec.job_id, state=state.value,
                     duration_s=rec.t_end - rec.t_start, detect_s=(rec.detected_t or rec.t_end) - rec.t_start,
                     restored_from=rec.restored_from)
        if state == RecoveryState.DONE and hand_back and rec.job_id is not None and rec.kind != REHOME:
            # A chip of the job's pod may have come free while it recovered.
            job_id = rec.job_id
            self.tl.call_at(0, lambda: self._rehome_quietly(job_id))

    # --- pieces --------------------------------------------------------------------
    def _isolate(self, chip: int, cause: str) -> None:
        if self.fab.chip_state(chip) != ChipState.ISOLATED:
            self.fab.set_chip_state(chip, ChipState.ISOLATED, f"isolated by recovery: {cause}")
        # A firmware fault clears with a reset (the Neuron runtime's action); the rest
        # need a technician.
        self._schedule_repair(chip, self.timings.reset_s if cause == "firmware-fault" else None)

    def _schedule_repair(self, chip: int, after_s: float | None = None) -> None:
        after_s = after_s if after_s is not None else self.timings.repair_s
        if after_s is None:
            return

        def repair() -> None:
            if self.fab.chip_state(chip) == ChipState.ISOLATED:
                self.fenced.pop(chip, None)
                self.fab.repair_chip(chip, "replaced by a technician")

        self.tl.call_at(after_s, repair)

    def _fence(self, rec: Recovery, chip: int, cause: str) -> Generator[simpy.Event, Any, bool]:
        """Fence the bad partition; the chip returns degraded. True if the rank still fits."""
        tm = self.timings
        part = "HBM stack" if cause == "hbm-uncorrectable" else "SRAM bank (its NeuronCore)"
        self._step(rec, "fence", f"retire the {part} that had the uncorrectable error", chip=chip)
        yield self.tl.env.timeout(tm.fence_s)
        self.fenced[chip] = self.fenced.get(chip, 0.0) + tm.hbm_fence_ratio
        left = 1.0 - self.fenced[chip]
        if self.fab.chip_state(chip) == ChipState.ISOLATED:
            self.fab.set_chip_state(chip, ChipState.HEALTHY, "fenced partition; back in service")
        if self.fab.chip_state(chip) == ChipState.HEALTHY:
            self.fab.set_chip_state(chip, ChipState.DEGRADED, f"degraded: {left:.0%} of HBM usable after fencing")
        assert rec.job_id is not None
        need = self.policies[rec.job_id].hbm_need_ratio
        # SRAM: the fenced core leaves the rank short of compute: it always moves.
        fits = cause == "hbm-uncorrectable" and need <= left
        self._step(rec, "degrade", f"chip {chip} degraded, {left:.0%} HBM left; the rank needs {need:.0%}: "
                   + ("stays" if fits else "migrates"), chip=chip, hbm_left_ratio=round(left, 3))
        if not fits:
            self.fab.set_chip_state(chip, ChipState.ISOLATED, "fenced chip too small for its rank")
            self._schedule_repair(chip)
        return fits

    def _pick(self, job_id: str, rank: int, *, home_only: bool = False, in_group: int | None = None) -> int | None:
        run = self.fab.job(job_id)
        if home_only:
            cand = self._home_free(job_id)
            origin = self._origin.get((job_id, rank))
            if origin in cand:  # the chip it left, so the job's rings keep their one-hop edges
                return origin
        else:
            states = [str(s) for s in self.fab.chip_states()]
            cand = free_chips(states, self.owner, exclude=(*run.chips, *self.reserved, *self.cordoned))
            if in_group is not None:  # a follower goes where its group went, not to a mate's old chip
                cand = [c for c in cand if group_of(self.fab.topology, c) == in_group]
        return choose_spare(self.fab.topology, run.chips, rank, cand, self.spares)

    def _restore_source(self, job_id: str, rank: int, chip: int) -> tuple[str, int | None]:
        """Where the rank's state comes from, and the peer that holds its replica (same
        rank in the next DP group)."""
        pol = self.policies[job_id]
        run = self.fab.job(job_id)
        n = len(run.chips)
        if not pol.peer_replica or pol.dp < 2 or n < 2:
            return "checkpoint", None  # a peer replica lives in another data-parallel replica
        holder = run.chips[(rank + max(n // max(pol.dp, 2), 1)) % n]
        rec = self.active.get(job_id)
        pending = {c for c, _ in rec.pending[1:]} if rec else set()
        ok = holder != chip and holder not in pending and \
            self.fab.chip_state(holder) in (ChipState.HEALTHY, ChipState.DEGRADED)
        return ("replica", holder) if ok else ("checkpoint", None)

    @staticmethod
    def _better(a: str | None, b: str) -> str:
        return "checkpoint" if "checkpoint" in (a, b) else b

    def _no_spare(self, rec: Recovery, chip: int, rank: int) -> Generator[simpy.Event, Any, bool]:
        job_id = rec.job_id
        assert job_id is not None
        pol = self.policies[job_id]
        run = self.fab.job(job_id)
        n = len(run.chips)
        if pol.on_no_spare == "shrink" and pol.dp > pol.min_dp and n % pol.dp == 0:
            g = n // pol.dp
            grp = rank // g
            keep = tuple(c for i, c in enumerate(run.chips) if i // g != grp)
            self._step(rec, "shrink", f"no free chip: drop data-parallel replica {grp} "
                       f"({pol.dp} -> {pol.dp - 1} replicas, {n} -> {len(keep)} chips)", dp=pol.dp - 1)
            yield self.tl.env.timeout(self.timings.move_s)
            step = run.step
            self.fab.stop(job_id)
            spec = dataclasses.replace(run.spec, chips=keep)
            new = self.fab.launch(spec)
            new.step = step
            self.fab.pause(job_id, f"recovery {rec.id}: shrinking")
            for c in run.chips:
                if c not in keep:
                    self.owner.release_chip(c, job_id)
            self.policies[job_id] = dataclasses.replace(pol, dp=pol.dp - 1)
            rec.pending = [p for p in rec.pending if p[0] in keep]
            return True
        if rec.state != RecoveryState.WAITING:
            rec.set_state(RecoveryState.WAITING)
            self._step(rec, "wait", "no free chip and the job's policy is to wait (or it cannot shrink)")
        self._wake = self._wake if not self._wake.triggered else self.tl.env.event()
        yield self._wake
        rec.set_state(RecoveryState.RUNNING)
        return False

    def _notify_free(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()
        self._wake = self.tl.env.event()

def cause_kind(cause: str) -> str:
    if cause in ECC_CAUSES:
        return "ecc"
    if cause == "thermal-runaway":
        return "thermal"
    if cause == "predicted-failure":
        return "drain"
    if cause == "firmware-update":
        return "firmware"
    if cause == REHOME:
        return REHOME
    return "chip-failure"
