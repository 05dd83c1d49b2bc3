"""The job flows of the recovery orchestrator: a chip fault (or a planned move) of a
managed job, from detection to resume, as one SimPy process per recovery on the
shared ``RecoveryContext``. What each flow does is in ``recovery.orchestrator``.

The fabric is driven only through ``RankMoves`` (pause, move a rank, resume) and the
``Fabric`` chip states. On the twin (``ResumableRuns``) those calls take no time, so each
step waits its modelled cost; on a process fabric they take real time, so the flow
waits, polling ``run_status``, for the state each call leads to (PAUSED after a pause,
RUNNING after a resume), and the job shows RECOVERING throughout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any

import simpy

from podfleet.errors import ConflictError, PodfleetError
from podfleet.fabric.base import ChipState, ResumableRuns, RunState, RunStatus
from podfleet.recovery import costs
from podfleet.recovery.chipsteps import ChipSteps
from podfleet.recovery.context import RecoveryContext
from podfleet.recovery.home import FOLLOW, REHOME, HomeFlows
from podfleet.recovery.model import DEFAULT_STATE_BYTES_PER_RANK, Recovery, RecoveryState, Step
from podfleet.recovery.spares import choose_spare, free_chips, group_of, tp_group

ECC_CAUSES = ("hbm-uncorrectable", "sram-uncorrectable")
LIVE_CAUSES = ("thermal-runaway", "predicted-failure", "firmware-update", REHOME, FOLLOW)
# Live moves that can wait for a step to end.
BOUNDARY_CAUSES = ("predicted-failure", "firmware-update", REHOME, FOLLOW)
# How often a flow looks at a process fabric's run while it waits for a pause or a
# resume to take effect, and how long it waits at most.
FABRIC_POLL_S = 0.05
FABRIC_WAIT_S = 300.0


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


class JobFlows:
    """The job flows of a recovery orchestrator, on its shared ``RecoveryContext``."""

    def __init__(self, ctx: RecoveryContext, home: HomeFlows) -> None:
        self.ctx = ctx
        self.home = home
        self.chips = ChipSteps(ctx)
        self.wake: simpy.Event = ctx.tl.env.event()  # fires when a chip may have come free
        self._copy_bw: dict[str, float] = {}  # recovery id -> slowest peer-copy path of its moves
        self._state_bytes: dict[tuple[str, int], float] = {}
        self._step_end: dict[str, simpy.Event] = {}  # job id -> fires when its next step ends
        self._proc_of: dict[str, simpy.Process] = {}  # recovery id -> its flow
        # job id -> a flow a previous control plane was cut off in, adopted by this one
        # while the job manager relaunches the job (``adopt_relaunch``).
        self.relaunching: dict[str, Recovery] = {}

    # --- starting and ending flows ---------------------------------------------------------
    def start(self, rec: Recovery) -> None:
        ctx = self.ctx
        assert rec.job_id is not None
        ctx.active[rec.job_id] = rec
        ctx.listener.recovery_changed(rec)
        proc = ctx.tl.process(self._job_flow(rec))
        ctx.procs.append(proc)
        self._proc_of[rec.id] = proc

    def cancel(self, rec: Recovery, reason: str) -> None:
        """End a move back home that has moved nothing yet: nothing to undo (a pause it
        made is the next flow's to end)."""
        self.ctx.step(rec, "cancelled", reason)
        rec.pending.clear()
        proc = self._proc_of.pop(rec.id, None)
        self.finish(rec, RecoveryState.DONE, hand_back=False)
        if proc is not None and proc.is_alive:
            proc.interrupt("cancelled")

    def finish(self, rec: Recovery, state: RecoveryState, *, hand_back: bool = True) -> None:
        ctx = self.ctx

        def ended() -> None:
            self._proc_of.pop(rec.id, None)
            if rec.job_id is not None:
                if ctx.active.get(rec.job_id) is rec:
                    ctx.active.pop(rec.job_id)
                if state == RecoveryState.DONE and hand_back:
                    ctx.listener.job_recovered(rec.job_id, ctx.run(rec.job_id).chips, rec)
            self._copy_bw.pop(rec.id, None)
            ctx.moved_in_pause.discard(rec.id)
            ctx.follow_to.pop(rec.id, None)

        if ctx.close(rec, state, ended) and state == RecoveryState.DONE and hand_back \
                and rec.job_id is not None and rec.kind != REHOME:
            # A chip of the job's pod may have come free while it recovered.
            job_id = rec.job_id
            ctx.tl.call_at(0, lambda: self.home.rehome_quietly(job_id))

    # --- flows a previous control plane was cut off in ----------------------------------------
    def adopt_relaunch(self, rec: Recovery) -> None:
        """Finish a flow whose job the fabric no longer runs (the twin died with the old
        plane): what the flow still had to do to its chips is done now (a faulty chip is
        isolated, so the relaunch cannot land on it; a firmware fault gets its reset), and
        the job's state comes from its checkpoint through the job manager's relaunch. The
        flow ends when the fabric runs the job again (``relaunched``)."""
        ctx = self.ctx
        assert rec.job_id is not None
        now = ctx.tl.now
        if rec.detected_t is None:  # the fault is in the journal: known now, if not before
            rec.detected_t = now
        if rec.state == RecoveryState.WAITING:
            rec.set_state(RecoveryState.RUNNING)
        ctx.step(rec, "adopted", "control plane restarted and the fabric no longer runs the job: finishing the "
                 "recovery from its journal; the job restarts from its checkpoint")
        for chip, cause in rec.pending:
            if cause in (REHOME, FOLLOW, "firmware-update") or ctx.chip_state(int(chip)) == ChipState.ISOLATED:
                continue  # a planned move needs nothing of its chip; an isolated chip is done
            ctx.step(rec, "isolate", f"chip {chip} {cause}: fence it out before the relaunch", chip=int(chip))
            self.chips.isolate(int(chip), str(cause))
        rec.pending.clear()
        self.relaunching[rec.job_id] = rec

    def relaunched(self, job_id: str) -> None:
        """The fabric runs an adopted flow's job again (its ``job-started``): the flow
        ends, restored from the checkpoint. The journal is closed without another step
        shown as in progress (the job manager has handed the job back already)."""
        rec = self.relaunching.pop(job_id, None)
        if rec is None:
            return
        ctx = self.ctx
        now = ctx.tl.now
        run = ctx.fab.run_status(job_id)
        if rec.steps and rec.steps[-1].t_end is None:
            rec.steps[-1].t_end = now
        step = run.checkpoint_step if run is not None else None
        rec.steps.append(Step("restore", "relaunched from the latest checkpoint by the job manager", now, now,
                              {"source": "checkpoint", "from_step": step}))
        ctx.tl.emit("recovery-step", recovery=rec.id, job_id=job_id, step="restore", source="checkpoint")
        rec.restored_from = "checkpoint"
        ctx.close(rec, RecoveryState.DONE)

    def abandon(self, job_id: str, reason: str) -> None:
        """An adopted flow whose job ended before it ran again."""
        rec = self.relaunching.pop(job_id, None)
        if rec is not None:
            self.ctx.step(rec, "failed", reason)
            self.ctx.close(rec, RecoveryState.FAILED)

    # --- a fabric's steps ---------------------------------------------------------------------
    def step_ended(self, job_id: str) -> None:
        """The fabric reported a finished step of the job (a ``progress`` event)."""
        ev = self._step_end.pop(job_id, None)
        if ev is not None and not ev.triggered:
            ev.succeed()

    def _until(self, job_id: str, done: Callable[[RunStatus], bool], what: str,
               run: RunStatus) -> Generator[simpy.Event, Any, RunStatus]:
        """Wait for the run to reach what ``done`` says (or end): the twin is there at
        once; a process fabric gets there in the background (``RankMoves``)."""
        ctx = self.ctx
        deadline = ctx.tl.now + FABRIC_WAIT_S
        while run.live and not done(run):
            if ctx.tl.now >= deadline:
                raise ConflictError(f"job {job_id} did not {what} within {FABRIC_WAIT_S:g} s "
                                    f"(it is {run.state.value})")
            yield ctx.tl.env.timeout(FABRIC_POLL_S)
            run = ctx.run(job_id)
        return run

    def _pause(self, job_id: str, reason: str) -> Generator[simpy.Event, Any, RunStatus]:
        run = self.ctx.fab.pause(job_id, reason)
        return (yield from self._until(job_id, lambda r: r.state is RunState.PAUSED, "pause", run))

    # --- the job flow ----------------------------------------------------------------------
    def _job_flow(self, rec: Recovery) -> Generator[simpy.Event, Any, None]:
        ctx = self.ctx
        job_id = rec.job_id
        assert job_id is not None
        source: str | None = None
        try:
            if rec.detected_t is None:
                first = rec.steps[0] if rec.steps and rec.steps[0].name == "detect" else None
                left = rec.t_start + float(first.detail.get("delay_s", 0.0)) - ctx.tl.now if first else 0.0
                if left > 0:
                    yield ctx.tl.env.timeout(left)
                rec.detected_t = ctx.tl.now
                if first is not None and first.t_end is None:
                    first.t_end = ctx.tl.now
            while True:
                while rec.pending:
                    got = yield from self._handle_one(rec, job_id)
                    if got is not None:
                        source = self._better(source, got)
                run = ctx.run(job_id)
                if run.state is not RunState.PAUSED:
                    break  # finished, stopped, or a live move that never paused it
                yield from self._restore(rec, source or "replica")
                if rec.pending:
                    continue  # a fault landed during the restore: go round again
                bad = [c for c in run.chips if not ctx.usable(c)]
                if bad:
                    rec.pending.extend([c, "chip-failure"] for c in bad)
                    continue
                from_step = run.checkpoint_step if rec.restored_from == "checkpoint" else None
                ctx.step(rec, "resume", "all ranks on working chips", from_step=from_step)
                yield ctx.cost(ctx.timings.resume_s)
                if rec.pending:
                    continue
                resumed = ctx.fab.resume(job_id, from_step=from_step)
                # A process fabric re-forms its process group first (RECOVERING): the job
                # is recovering until the gang trains again.
                yield from self._until(job_id, lambda r: r.state is RunState.RUNNING, "resume", resumed)
                break
            self.finish(rec, RecoveryState.DONE)
        except simpy.Interrupt:
            return  # control plane going away: the journal has what is needed
        except PodfleetError as exc:
            # The fabric refused a step (e.g. the job was stopped under us): the flow ends
            # with the reason; it must never take the engine down.
            ctx.step(rec, "failed", exc.message)
            self.finish(rec, RecoveryState.FAILED)

    def _handle_one(self, rec: Recovery, job_id: str) -> Generator[simpy.Event, Any, str | None]:
        """Deal with ``rec.pending[0]``; returns where the rank's state must come from."""
        ctx, home = self.ctx, self.home
        tm = ctx.timings
        chip, cause = rec.pending[0]
        run = ctx.run(job_id)
        if not run.live or chip not in run.chips:
            rec.pending.pop(0)  # done before a restart, or the job is gone
            return None
        rank = run.chips.index(chip)
        live = cause in LIVE_CAUSES and ctx.usable(chip)
        if cause == REHOME and (not live or not home.home_free(job_id)):
            # The chip failed meanwhile (its own fault flow moves the rank) or the free
            # chip at home was taken: nothing to bring home now.
            rec.pending.pop(0)
            return None
        if live and cause in BOUNDARY_CAUSES and run.state is RunState.RUNNING:
            # A live copy needs the rank's state at a step boundary: the job trains on
            # until its running step ends, and loses nothing. (A runaway chip cannot wait
            # a whole step: it may die first, so its move pays the partial step.)
            yield from self._to_step_boundary(rec, job_id)
            run = ctx.run(job_id)
            if not run.live or chip not in run.chips:
                rec.pending.pop(0)
                return None
            live = ctx.usable(chip)
            if cause == REHOME and (not live or not home.home_free(job_id)):
                rec.pending.pop(0)
                return None
        if run.state in (RunState.RUNNING, RunState.RECOVERING):
            run = yield from self._pause(job_id, f"recovery {rec.id}: {cause} on chip {chip}")
            ctx.moved_in_pause.discard(rec.id)
            if not run.live or chip not in run.chips:
                rec.pending.pop(0)
                return None
        if cause not in LIVE_CAUSES and ctx.chip_state(chip) == ChipState.HEALTHY:
            # Failed chips are never healthy again without a repair: this one was replaced
            # in place while the job waited for a chip.
            ctx.step(rec, "replaced-in-place", f"chip {chip} was repaired; rank {rank} stays", chip=chip)
            rec.pending.pop(0)
            return "checkpoint"
        if cause == "thermal-runaway" and live:
            ctx.step(rec, "throttle", f"chip {chip} cooling failed: hold its clock down", chip=chip)
            yield ctx.cost(tm.throttle_s)
        if not live:
            ctx.step(rec, "isolate", f"chip {chip} {cause}: fence it out of the group", chip=chip)
            yield ctx.cost(tm.isolate_s)
            self.chips.isolate(chip, cause)
        if cause in ECC_CAUSES:
            stays = yield from self.chips.fence(rec, chip, cause)
            if stays:
                rec.pending.pop(0)
                return self._restore_source(job_id, rank, chip)[0]
        concurrent = live and cause in BOUNDARY_CAUSES and rec.id in ctx.moved_in_pause
        ctx.step(rec, "select-spare", f"rank {rank} needs a chip near its ring neighbours", rank=rank)
        if not concurrent:
            yield ctx.cost(tm.select_s)
        spare = self._pick(job_id, rank, home_only=cause == REHOME, in_group=home.group_target(rec.id, chip))
        if spare is None and cause == REHOME:
            rec.pending.pop(0)
            return "replica"  # paused for nothing: resume as it was
        if spare is None:
            shrunk = yield from self._no_spare(rec, chip, rank)
            return "replica" if shrunk else None
        src, holder = ("replica", chip) if live else self._restore_source(job_id, rank, chip)
        ctx.step(rec, "move-rank", f"rank {rank}: chip {chip} -> {spare}", rank=rank, from_chip=chip, to_chip=spare,
                 concurrent=concurrent)
        if not concurrent:
            yield ctx.cost(tm.draw_move_s(ctx.tl.rng))
        if live and cause in BOUNDARY_CAUSES:
            ctx.moved_in_pause.add(rec.id)
        before = ctx.run(job_id).chips
        try:
            ctx.fab.move_rank(job_id, rank, spare)
        except PodfleetError as exc:  # the spare failed in the meantime: pick again
            ctx.step(rec, "retry", f"move to {spare} refused: {exc.message}")
            return None
        ctx.owner.move(job_id, chip, spare)
        if src == "replica" and holder is not None:
            bw = costs.copy_bw_bytes_per_s(ctx.fab.topology, holder, spare, tm.replica_bw_bytes_per_s)
            self._copy_bw[rec.id] = min(self._copy_bw.get(rec.id, bw), bw)
        home.moved_between_pods(job_id, rank, before, chip, spare, cause)
        home.follow(rec, before, ctx.spec(job_id).options, chip, spare)
        if live and cause not in ("firmware-update", REHOME, FOLLOW):  # an update needs the chip free, not isolated
            self.chips.isolate(chip, cause)
        rec.pending.pop(0)
        return src

    def _to_step_boundary(self, rec: Recovery, job_id: str) -> Generator[simpy.Event, Any, None]:
        """Wait (at most one step and a half) for the running step of the job to end: at
        the fabric's progress report of that step (the moment it ends), else at the next
        poll (a fabric that reports progress less often than every step)."""
        ctx = self.ctx
        run = ctx.run(job_id)
        st = float(run.step_time_s or 0.0)
        if not st > 0.0:  # no step finished yet: nothing to wait for
            return
        start, poll = run.step, min(max(st / 400.0, 0.001), 0.25)
        ctx.step(rec, "step-boundary", f"let step {start + 1} finish: a live copy needs a consistent state",
                 at_step=start)
        end = ctx.tl.now + 1.5 * st
        env = ctx.tl.env
        while ctx.tl.now < end:
            run = ctx.run(job_id)
            if run.step != start or run.state is not RunState.RUNNING:
                return
            done = self._step_end.get(job_id)
            if done is None or done.triggered:
                done = self._step_end[job_id] = env.event()
            yield env.any_of([done, env.timeout(poll)])

    def _restore(self, rec: Recovery, source: str) -> Generator[simpy.Event, Any, None]:
        ctx = self.ctx
        job_id = rec.job_id
        assert job_id is not None
        tm, nbytes = ctx.timings, self.state_bytes(job_id)
        if source == "checkpoint":
            ctx.step(rec, "restore", "no live peer replica: load the latest checkpoint", source=source, nbytes=nbytes,
                     bw_bytes_per_s=tm.checkpoint_bw_bytes_per_s)
            yield ctx.cost(tm.checkpoint_restore_s(nbytes, ctx.tl.rng))
        else:
            bw = self._copy_bw.get(rec.id, tm.replica_bw_bytes_per_s)
            ctx.step(rec, "restore", "copy the rank's state from a live peer", source=source, nbytes=nbytes,
                     bw_bytes_per_s=bw)
            yield ctx.cost(tm.replica_restore_s(nbytes, bw))
        rec.restored_from = source

    def state_bytes(self, job_id: str) -> float:
        """The state one rank must get back: the policy's figure, else the job's model
        and plan through perf's memory model, else ``DEFAULT_STATE_BYTES_PER_RANK``."""
        ctx = self.ctx
        given = ctx.policies[job_id].state_bytes_per_rank
        if given is not None:
            return given
        spec = ctx.spec(job_id)
        key = (job_id, len(spec.chips))
        if key not in self._state_bytes:
            got = costs.state_bytes_per_rank(str(spec.model), len(spec.chips), dict(spec.options), ctx.fab.topology)
            self._state_bytes[key] = got if got is not None else DEFAULT_STATE_BYTES_PER_RANK
        return self._state_bytes[key]

    # --- pieces --------------------------------------------------------------------------
    def _pick(self, job_id: str, rank: int, *, home_only: bool = False, in_group: int | None = None) -> int | None:
        ctx = self.ctx
        topo = ctx.fab.topology
        chips = ctx.run(job_id).chips
        if home_only:
            cand = self.home.home_free(job_id)
            origin = ctx.origin.get((job_id, rank))
            if origin in cand:  # the chip it left, so the job's rings keep their one-hop edges
                return origin
        else:
            states = [str(s) for s in ctx.fab.chip_states()]
            cand = free_chips(states, ctx.owner, exclude=(*chips, *ctx.reserved, *ctx.cordoned))
            if in_group is not None:  # a follower goes where its group went, not to a mate's old chip
                cand = [c for c in cand if group_of(topo, c) == in_group]
        # Its tensor-parallel mates: a rank stays in the pod its group sits in (``spares``).
        mates = tp_group(chips, ctx.spec(job_id).options, chips[rank])
        return choose_spare(topo, chips, rank, cand, ctx.spares, mates=mates)

    def _restore_source(self, job_id: str, rank: int, chip: int) -> tuple[str, int | None]:
        """Where the rank's state comes from, and the peer that holds its replica (same
        rank in the next DP group)."""
        ctx = self.ctx
        pol = ctx.policies[job_id]
        chips = ctx.run(job_id).chips
        n = len(chips)
        if not pol.peer_replica or pol.dp < 2 or n < 2:
            return "checkpoint", None  # a peer replica lives in another data-parallel replica
        holder = chips[(rank + max(n // max(pol.dp, 2), 1)) % n]
        rec = ctx.active.get(job_id)
        pending = {c for c, _ in rec.pending[1:]} if rec else set()
        ok = holder != chip and holder not in pending and ctx.usable(holder)
        return ("replica", holder) if ok else ("checkpoint", None)

    @staticmethod
    def _better(a: str | None, b: str) -> str:
        return "checkpoint" if "checkpoint" in (a, b) else b

    def _no_spare(self, rec: Recovery, chip: int, rank: int) -> Generator[simpy.Event, Any, bool]:
        ctx = self.ctx
        job_id = rec.job_id
        assert job_id is not None
        pol = ctx.policies[job_id]
        run, spec = ctx.run(job_id), ctx.spec(job_id)
        n = len(run.chips)
        # Shrinking relaunches the gang on fewer chips from the step it holds: the twin
        # (``ResumableRuns``: its launch starts at ``start_step``). A process fabric waits.
        if pol.on_no_spare == "shrink" and pol.dp > pol.min_dp and n % pol.dp == 0 \
                and isinstance(ctx.fab, ResumableRuns):
            g = n // pol.dp
            grp = rank // g
            keep = tuple(c for i, c in enumerate(run.chips) if i // g != grp)
            ctx.step(rec, "shrink", f"no free chip: drop data-parallel replica {grp} "
                     f"({pol.dp} -> {pol.dp - 1} replicas, {n} -> {len(keep)} chips)", dp=pol.dp - 1)
            yield ctx.cost(ctx.timings.draw_move_s(ctx.tl.rng))
            ctx.fab.stop(job_id)
            ctx.fab.launch(dataclasses.replace(spec, chips=keep, options={
                **spec.options, "start_step": run.step, "checkpoint_step": run.checkpoint_step or 0}))
            ctx.fab.pause(job_id, f"recovery {rec.id}: shrinking")
            for c in run.chips:
                if c not in keep:
                    ctx.owner.release_chip(c, job_id)
            ctx.policies[job_id] = dataclasses.replace(pol, dp=pol.dp - 1)
            rec.pending = [p for p in rec.pending if p[0] in keep]
            return True
        if rec.state != RecoveryState.WAITING:
            rec.set_state(RecoveryState.WAITING)
            ctx.step(rec, "wait", "no free chip and the job's policy is to wait (or it cannot shrink)")
        self.wake = self.wake if not self.wake.triggered else ctx.tl.env.event()
        yield self.wake
        rec.set_state(RecoveryState.RUNNING)
        return False

    def notify_free(self) -> None:
        """A chip may have come free: waiting flows look again."""
        if not self.wake.triggered:
            self.wake.succeed()
        self.wake = self.ctx.tl.env.event()
