"""Jobs on the twin: one SimPy process per job, advancing step by step.

To keep a day of virtual time cheap, a job advances in batches of whole steps that
last at most one telemetry interval and never cross a checkpoint, so conditions
(throttling, link state) are re-read at least once per tick. An interrupt (a chip of
the job failed, pause, stop) keeps the steps completed so far and loses the partial
one.

Rebalancing (``Rebalanceable``): ``set_work_split`` gives each rank a share of the
work and ``set_ring_order`` the gradient ring's order; the next batch of steps uses
them (``workload.rebalanced_compute``: the slowest rank's share over its clock sets the
compute phase; the ring's slowest live link sets the exposed communication), and each
chip's utilization shows its own busy share of the step, so the load monitor sees the
imbalance, and its removal, in telemetry.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import simpy

from podfleet.errors import ConflictError, InvalidInputError, NotFoundError
from podfleet.fabric.base import ChipState, RunState, RunStatus, WorkerGroupSpec
from podfleet.fabric.sim.board import Board
from podfleet.fabric.sim.congestion import Congestion
from podfleet.fabric.sim.context import SimContext, StepModel
from podfleet.fabric.sim.workload import (
    JobRun,
    StepTimeFn,
    check_shares,
    default_step_time,
    loss_at,
    rebalanced_compute,
    step_breakdown,
    tokens_per_step,
)

_UTIL = 0.95  # busy share of a compute phase, as neuron-monitor would show it
MIN_COMM_SHARE = 0.1  # overlapped gradient traffic: links busy even when comm is hidden
DEFAULT_COMPUTE_SHARE = 0.8  # share of a step spent computing when the model does not say
_STOP = "stop"
LOG_TAIL = 20


class JobRunner:
    """The twin's jobs: one SimPy process per job on the ``Board``'s chips.

    Step-time functions read the ``Board`` (a ``StepModel``: chip spec, topology, link
    and clock health), never the ``SimFabric`` that composes this runner.
    """

    def __init__(self, ctx: SimContext, board: Board, *, step_time_fn: StepTimeFn,
                 progress_every_steps: int) -> None:
        self.ctx, self.board = ctx, board
        self.model: StepModel = board
        self.step_time_fn = step_time_fn
        self.progress_every_steps = progress_every_steps
        self.jobs: dict[str, JobRun] = {}
        # Link sharing between running jobs (max-min fair): stretches their exposed comm.
        self.congestion = Congestion(ctx.topology, ctx.links.n)
        self._cap_seen: np.ndarray | None = None
        self._pair_link: dict[frozenset[int], int] | None = None  # chip pair -> link, built on first use

    # --- public ----------------------------------------------------------------------
    def launch(self, group: WorkerGroupSpec) -> JobRun:
        """Start a job on ``group.chips`` (rank r on chips[r]), from ``options["start_step"]``
        (default 0; a restart from a checkpoint), its last checkpoint ``options["checkpoint_step"]``
        (default the start step)."""
        if group.job_id in self.jobs and self.jobs[group.job_id].state in (RunState.RUNNING, RunState.PAUSED):
            raise ConflictError(f"job {group.job_id} is already running", field="job_id")
        if not group.chips:
            raise InvalidInputError("a job needs at least one chip", field="chips")
        if group.steps < 1:
            raise InvalidInputError(f"steps must be >= 1, got {group.steps}", field="steps")
        self._check_gang(group)
        start_step = int(group.options.get("start_step", 0))
        if not 0 <= start_step < group.steps:
            raise InvalidInputError(f"start_step must be 0-{group.steps - 1}, got {start_step}", field="start_step")
        # A gang relaunched from the step its peers hold (a shrink) keeps its last checkpoint.
        ckpt = min(int(group.options.get("checkpoint_step", start_step)), start_step)
        run = JobRun(spec=group, started_t=self.ctx.now, step=start_step, last_checkpoint=ckpt)
        run.extra["launch_chips"] = tuple(int(c) for c in group.chips)
        self.jobs[group.job_id] = run
        for c in group.chips:
            self.board.claim(int(c), group.job_id)
        resumed = {"start_step": start_step} if start_step else {}
        self._note(run, "job-started", job_id=group.job_id, chips=len(group.chips), model=group.model,
                   steps=group.steps, **resumed)
        self.congestion.set_job(group.job_id, group.chips)
        run.process = self.ctx.tl.process(self._job_loop(run))
        return run

    def job(self, job_id: str) -> JobRun:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise NotFoundError(f"job {job_id} does not exist on this fabric", field="job_id") from None

    def stop(self, job_id: str) -> None:
        run = self.job(job_id)
        if run.state in (RunState.STOPPED, RunState.FINISHED):
            return
        run.state = RunState.STOPPED
        self._release(run)
        if run.process is not None and run.process.is_alive:
            run.process.interrupt(_STOP)
        self._note(run, "job-stopped", job_id=job_id, step=run.step)

    def pause(self, job_id: str, reason: str = "paused by command") -> None:
        run = self.job(job_id)
        if run.state == RunState.PAUSED:
            return  # already holding its state (``RankMoves``: unchanged)
        if run.state != RunState.RUNNING:
            raise ConflictError(f"job {job_id} is {run.state.value}, not running", field="job_id")
        self.pause_job(job_id, reason)

    def resume(self, job_id: str, *, from_step: int | None = None) -> None:
        """Resume a paused job, optionally rolled back to ``from_step`` (a checkpoint)."""
        run = self.job(job_id)
        if run.state == RunState.RUNNING:
            return  # running already (``RankMoves``: unchanged)
        if run.state != RunState.PAUSED:
            raise ConflictError(f"job {job_id} is {run.state.value}, not paused", field="job_id")
        for c in run.chips:
            st = self.board.chip_state(c)
            if st not in (ChipState.HEALTHY, ChipState.DEGRADED):
                raise ConflictError(f"chip {c} of job {job_id} is {st.value}; move its rank first", field="chips")
        if from_step is not None:
            if not 0 <= from_step <= run.step:
                raise InvalidInputError(f"from_step must be 0-{run.step}, got {from_step}", field="from_step")
            run.step = from_step
            # Rolled back: report progress from here on (not only once past the old step).
            run.last_progress_step = min(run.last_progress_step, run.step)
        run.state = RunState.RUNNING
        run.pause_reason = None
        self.congestion.set_job(job_id, run.ring or run.chips)
        self._note(run, "job-resumed", job_id=job_id, step=run.step)
        if run.resume_evt is not None and not run.resume_evt.triggered:
            run.resume_evt.succeed()

    def move_rank(self, job_id: str, rank: int, new_chip: int) -> None:
        """Run rank ``rank`` of the job on ``new_chip`` from now on."""
        run = self.job(job_id)
        if run.state in (RunState.STOPPED, RunState.FINISHED):
            raise ConflictError(f"job {job_id} is {run.state.value}", field="job_id")
        if not 0 <= rank < len(run.chips):
            raise InvalidInputError(f"rank must be 0-{len(run.chips) - 1}, got {rank}", field="rank")
        new_chip = self.board.check_chip(new_chip)
        if new_chip in run.chips:
            raise ConflictError(f"chip {new_chip} is in use by job {job_id} (rank {run.chips.index(new_chip)})",
                                field="new_chip")
        self._check_free(new_chip, job_id)
        old = run.chips[rank]
        chips = list(run.chips)
        chips[rank] = new_chip
        self._set_load(run, 0.0, 0.0, 0.0)
        self.board.release(old, job_id)
        self.board.claim(new_chip, job_id)
        run.spec = dataclasses.replace(run.spec, chips=tuple(chips))
        # The communicator is rebuilt over the new chips, and collective libraries lay
        # their rings along the topology, not in rank order: once the job is back on the
        # chips it was placed on (ranks shuffled among them by moves out and home again)
        # its ring is the placement's again. Otherwise the rank order (the old ring named
        # the old chip; the balancer may set a better one).
        launch = run.extra.get("launch_chips", ())
        run.ring = launch if launch != run.chips and set(launch) == set(run.chips) else ()
        if run.state == RunState.RUNNING:
            self.congestion.set_job(job_id, run.ring or run.chips)
        self._note(run, "rank-moved", job_id=job_id, rank=rank, from_chip=old, to_chip=new_chip)

    def set_work_split(self, job_id: str, shares: Sequence[int]) -> None:
        """Rank r does ``shares[r] / mean(shares)`` of an even share from the next step on."""
        run = self.job(job_id)
        arr = check_shares(shares, len(run.chips))
        run.shares = None if (arr == arr[0]).all() else arr
        run.log.append(f"t={self.ctx.now:.1f}s work split {arr.tolist()}")

    def set_ring_order(self, job_id: str, ring: Sequence[int]) -> None:
        """The gradient ring visits ``ring`` (the job's chips, reordered) from the next step on."""
        run = self.job(job_id)
        order = tuple(int(c) for c in ring)
        if sorted(order) != sorted(run.chips):
            raise InvalidInputError("a ring order must list the job's chips exactly once", field="ring")
        run.ring = order
        if run.state == RunState.RUNNING:
            self.congestion.set_job(job_id, order)
        run.log.append(f"t={self.ctx.now:.1f}s ring order set ({len(order)} chips)")

    def checkpoint_now(self, job_id: str) -> int | None:
        """On the twin a job's whole training state is its step counter: the steps
        completed so far are exactly what a checkpoint taken now holds. No event: the
        caller records the checkpoint (a ``checkpoint`` event would restart a preemption)."""
        run = self.jobs.get(job_id)
        if run is None or run.state not in (RunState.RUNNING, RunState.PAUSED):
            return None
        run.last_checkpoint = run.step
        run.log.append(f"t={self.ctx.now:.1f}s checkpoint on demand at step {run.step}")
        return run.step

    def run_status(self, job_id: str) -> RunStatus | None:
        run = self.jobs.get(job_id)
        if run is None:
            return None
        return RunStatus(
            job_id=job_id, state=run.state, chips=tuple(run.chips), step=run.step,
            loss=None if math.isnan(run.loss) else run.loss, reason=run.pause_reason,
            checkpoint_step=run.last_checkpoint, log_tail=tuple(list(run.log)[-LOG_TAIL:]),
            step_time_s=float(run.step_time_s) if run.step_time_s > 0 else None,
        )

    def run_logs(self, job_id: str) -> list[str]:
        run = self.jobs.get(job_id)
        return list(run.log) if run is not None else []

    # --- internals ---------------------------------------------------------------------
    def _note(self, run: JobRun, kind: str, **detail: Any) -> None:
        """Publish a job event; every one but progress also goes to the run's log."""
        if kind != "progress":
            what = " ".join(f"{k}={v}" for k, v in detail.items() if k != "job_id")
            run.log.append(f"t={self.ctx.now:.1f}s {kind}" + (f" {what}" if what else ""))
        self.ctx.bus.event(kind, **detail)

    def _check_gang(self, group: WorkerGroupSpec) -> None:
        """All chips exist, are distinct, usable and free (vectorized: gangs can be 4,096)."""
        arr = np.asarray(group.chips)
        if arr.dtype.kind not in "iu" or arr.ndim != 1:
            raise InvalidInputError(f"chips must be integers, got {list(group.chips)[:8]}", field="chips")
        if arr.min() < 0 or arr.max() >= self.ctx.n_chips:
            bad = int(arr[(arr < 0) | (arr >= self.ctx.n_chips)][0])
            self.board.check_chip(bad)
        if np.unique(arr).size != arr.size:
            raise InvalidInputError("a chip appears twice in the job's chips", field="chips")
        bad_state = ~self.board.usable_mask()[arr]
        taken = [c for c in group.chips if (self.board.job_on(int(c)) or group.job_id) != group.job_id]
        if bad_state.any() or taken:
            chip = int(arr[bad_state][0]) if bad_state.any() else int(taken[0])
            self._check_free(chip, group.job_id)

    def _check_free(self, chip: int, job_id: str) -> None:
        other = self.board.job_on(chip)
        if other is not None and other != job_id:
            raise ConflictError(f"chip {chip} is in use by job {other}", field="chips")
        st = self.board.chip_state(chip)
        if st not in (ChipState.HEALTHY, ChipState.DEGRADED):
            raise ConflictError(f"chip {chip} is {st.value}; jobs need healthy or degraded chips", field="chips")

    def _release(self, run: JobRun) -> None:
        self.congestion.drop_job(run.job_id)
        self._set_load(run, 0.0, 0.0, 0.0)
        for c in run.chips:
            self.board.release(c, run.job_id)

    def _rebalanced(self, run: JobRun, compute_s: float, exposed_s: float) -> tuple[float, float, np.ndarray]:
        """(compute s, exposed comm s, per-rank busy s) under the run's split and ring."""
        chips = np.asarray(run.chips, dtype=np.int64)
        clocks = np.asarray(self.ctx.telemetry.clock_factor, float)[chips]
        compute_s, busy = rebalanced_compute(compute_s, self.model.gang_clock_factor(run.chips), clocks, run.shares)
        if run.ring and exposed_s > 0:
            ring_bw = self._ring_bw(run.ring)
            gang_bw = self.model.job_link_bw(run.chips)
            if ring_bw > 0:
                exposed_s *= gang_bw / ring_bw
        return compute_s, exposed_s, busy

    def _ring_bw(self, ring: tuple[int, ...]) -> float:
        """Per-direction bandwidth of the ring's slowest link (0 when one is down or missing)."""
        pair_link = self._pair_link
        lt = self.ctx.links
        if pair_link is None:
            pair_link = self._pair_link = {frozenset((int(a), int(b))): k
                                           for k, (a, b) in enumerate(zip(lt.src, lt.dst, strict=True))}
        bw = self.board.link_bw_eff
        worst = math.inf
        for i, a in enumerate(ring):
            k = pair_link.get(frozenset((a, ring[(i + 1) % len(ring)])))
            if k is None:
                return 0.0
            worst = min(worst, float(bw[k]))
        return worst

    def _congestion(self, run: JobRun) -> float:
        """The job's communication slowdown from how its ring lies on the links and from
        the links it shares with other jobs (>= 1; ``congestion``)."""
        cong = self.congestion
        bw = self.board.link_bw_eff
        if bw is not self._cap_seen:
            cong.set_capacity(bw, np.flatnonzero(bw <= 0).tolist())
            self._cap_seen = bw
        # The bandwidth the step time already assumed: the ring's slowest link when a ring
        # order is set (``_rebalanced`` stretched the comm by it), else the gang's.
        ring_bw = self._ring_bw(run.ring) if run.ring else 0.0
        return cong.slowdown(run.job_id, ring_bw if ring_bw > 0 else self.model.job_link_bw(run.chips))

    def _set_load(self, run: JobRun, load: float | np.ndarray, comm: float, hbm: float) -> None:
        key = (np.asarray(load).round(4).tobytes(), comm, hbm, run.chips)
        if run.extra.get("load") == key:
            return  # unchanged: keep the telemetry's derived arrays
        run.extra["load"] = key
        idx = list(run.chips)
        t = self.ctx.telemetry
        t.load[idx] = load
        t.comm_load[idx] = comm
        t.hbm_fraction[idx] = hbm
        t.dirty = True

    def pause_job(self, job_id: str, reason: str) -> None:
        run = self.jobs.get(job_id)
        if run is None or run.state != RunState.RUNNING:
            return
        run.state = RunState.PAUSED
        run.pause_reason = reason
        self.congestion.drop_job(job_id)
        self._set_load(run, 0.0, 0.0, float(run.spec.options.get("hbm_fraction", 0.85)))
        if run.process is not None and run.process.is_alive:
            run.process.interrupt("pause")
        self._note(run, "job-paused", job_id=job_id, step=run.step, reason=reason)

    def _job_loop(self, run: JobRun):  # type: ignore[no-untyped-def]
        env, rng, spec0 = self.ctx.tl.env, self.ctx.tl.rng, run.spec
        hbm = float(spec0.options.get("hbm_fraction", 0.85))
        tokens = tokens_per_step(spec0, self.model)
        window = self.ctx.telemetry_interval_s
        while run.step < run.spec.steps:
            if run.state == RunState.PAUSED:
                run.resume_evt = env.event()
                try:
                    yield run.resume_evt
                except simpy.Interrupt as irq:
                    if irq.cause == _STOP:
                        return
                continue
            load: float | np.ndarray
            if self.step_time_fn is default_step_time:
                compute_s, exposed_s, st = step_breakdown(run.spec, self.model)
                compute_frac = compute_s / st
                load = _UTIL * compute_frac
                if run.shares is not None or run.ring or self.ctx.telemetry.any_throttled:
                    # Per-rank busy shares: a throttled or overloaded rank is busy, the rest wait.
                    compute_s, exposed_s, busy = self._rebalanced(run, compute_s, exposed_s)
                    st = compute_s + exposed_s
                    compute_frac = compute_s / st
                    load = _UTIL * busy / st
                slow = self._congestion(run)
                if slow > 1.0:  # links shared with other jobs: the same compute in a longer step
                    st_alone = st
                    exposed_s *= slow
                    st = compute_s + exposed_s
                    load = load * (st_alone / st)
                    compute_frac = compute_s / st
                self.congestion.set_duty(run.job_id, max(1.0 - compute_frac, MIN_COMM_SHARE))
            else:  # a pluggable model gives only the step time
                st = float(self.step_time_fn(run.spec, self.model))
                compute_frac = DEFAULT_COMPUTE_SHARE
                load = _UTIL * compute_frac
            if not st > 0 or math.isinf(st):
                raise ValueError(f"step_time_fn returned {st} for job {run.job_id}")
            ci = run.spec.checkpoint_interval
            left = run.spec.steps - run.step
            if ci:
                left = min(left, ci - run.step % ci)
            k = max(1, min(left, int(window // st)))
            # The step time in force now, not the last batch's: a rank just moved across
            # pods stretches the steps, and a wait for the next step boundary must know.
            run.step_time_s = st
            # Communication hidden behind compute still moves bytes: keep the links loaded.
            self._set_load(run, load, max(1.0 - compute_frac, MIN_COMM_SHARE), hbm)
            start = env.now
            try:
                yield env.timeout(k * st)
            except simpy.Interrupt as irq:
                run.step += int((env.now - start) // st)
                if irq.cause == _STOP:
                    return
                continue
            run.step += k
            run.step_time_s = st
            run.tokens_per_s = tokens / st
            run.loss = loss_at(run.step, float(rng.standard_normal()))
            self._after_steps(run)
        run.state = RunState.FINISHED
        self._release(run)
        self._note(run, "job-finished", job_id=run.job_id, step=run.step, loss=round(run.loss, 5),
                    duration_s=env.now - run.started_t)

    def _after_steps(self, run: JobRun) -> None:
        ci = run.spec.checkpoint_interval
        if ci and run.step % ci == 0:
            run.last_checkpoint = run.step
            self._note(run, "checkpoint", job_id=run.job_id, step=run.step)
        due_steps = run.step - run.last_progress_step >= self.progress_every_steps
        due_time = self.ctx.now - run.last_progress_t >= self.ctx.telemetry_interval_s
        if (due_steps and due_time) or run.step >= run.spec.steps:
            run.last_progress_step, run.last_progress_t = run.step, self.ctx.now
            self._note(run, "progress", job_id=run.job_id, **self._progress(run))

    @staticmethod
    def _progress(run: JobRun) -> dict[str, Any]:
        return {
            "step": run.step,
            "loss": round(run.loss, 5),
            "tokens_per_s": round(run.tokens_per_s, 3),
            "step_time_s": round(run.step_time_s, 6),
        }
