"""Rebalancing a real 4-worker data-parallel job with one slow worker (local fabric).

Four real worker processes on this host train the ``tiny`` preset (gloo, global batch
``GLOBAL_BATCH`` x 64 tokens). One rank is slowed with the fabric's
``rank_step_delay_s`` launch option: it sleeps ``SLOWDOWN`` x the clean step time after
each step at an even share, scaled by its share (slow per sample, like a slow chip).

Nothing below tells the balancer which rank is slow. Per-rank speed comes from what the
workers report: the local fabric turns every rank's step end time and step time into
its own time per step and samples/s (``fabric/local/speed.py``, chip metric
``samples_per_s``). Each new measured step is one sample of the scheduler's
``LoadMonitor``; ``Rebalancer.step`` (``scheduler/balance.py``: water-filling of the
global batch's samples over the ranks' measured speeds, acting when the slowest rank's
time is more than ``TOLERANCE`` over the best split's) decides, and the decision goes
to the fabric's ``set_work_split``; rank 0 adopts it at its next step and every rank
weights its loss so the update equals the even split's (``training/loop``).

Two launches: the same 4 workers with none slowed (the reference), then with the slow
rank: measured first without rebalancing, then with it (after ``SETTLE_S`` to converge).
tokens/s = completed steps x tokens per step / wall time over each window.
``tokens_per_s_ratio`` = with rebalancing / the reference; goal >= 0.90. The ceiling
for a rank ``1 + SLOWDOWN`` times slower per sample, with compute that scales with the
samples a rank gets, is ``(3 + 1 / (1 + SLOWDOWN)) / 4`` (``ideal_ratio``); the
workers here share the host's cores, so compute does not scale that simply and the
measured figure can sit on either side of it.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import numpy as np

from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.local import LocalFabric
from podfleet.scheduler.balance import DPJob, LoadMonitor, Rebalancer

NAME = "balance-real"
DESCRIPTION = "4 real DP workers, one slowed: tokens/s with rebalancing (split from measured speeds) vs none slowed"

RANKS = 4
SLOW_RANK = 2  # the emulated slow worker; the balancer only sees the workers' reports
SLOWDOWN = 0.5  # the slow rank's extra time per step at an even share, x the clean step time
GLOBAL_BATCH = 48  # samples per step: 12 per rank at an even split (the split's granularity)
SEQ_LEN = 64
TOLERANCE = 0.05  # per-step speed readings are noisy on a shared host
MONITOR_WINDOW = 8  # steps


def _launch(fab: LocalFabric, job_id: str, delays: dict[int, float]) -> None:
    opts: dict[str, Any] = {"global_batch": GLOBAL_BATCH, "seq_len": SEQ_LEN, "threads": 1,
                            "encrypt_checkpoints": False}
    if delays:
        opts["rank_step_delay_s"] = delays
    fab.launch(WorkerGroupSpec(job_id, tuple(range(RANKS)), "tiny", 10**7, options=opts))


def _window(fab: LocalFabric, job_id: str, seconds: float, tick: Any = None) -> tuple[float, int]:
    """tokens/s and steps over ``seconds`` of wall time; ``tick()`` runs every poll."""
    st = fab.job_status(job_id)
    s0, t0 = st.step, time.monotonic()
    while time.monotonic() - t0 < seconds:
        if tick is not None:
            tick()
        time.sleep(0.01)
    st = fab.job_status(job_id)
    if st.state.value != "running":
        raise RuntimeError(f"job {job_id} is {st.state.value}: {st.reason}")
    steps = st.step - s0
    return steps * GLOBAL_BATCH * SEQ_LEN / (time.monotonic() - t0), steps


class Balancer:
    """The scheduler's monitor and rebalancer over the fabric's per-rank speed readout."""

    def __init__(self, fab: LocalFabric, job_id: str) -> None:
        self.fab, self.job_id = fab, job_id
        self.monitor = LoadMonitor(RANKS, window=MONITOR_WINDOW)
        self.rebalancer = Rebalancer(self.monitor, (RANKS,), tolerance=TOLERANCE, swap_after=2**62)
        self.job = DPJob(job_id, tuple(range(RANKS)), np.full(RANKS, GLOBAL_BATCH // RANKS, dtype=np.int64))
        self.seen = 0
        self.act = False  # watch only (the window without rebalancing), then act
        self.splits: list[list[int]] = []

    def tick(self) -> None:
        step = self.fab.job_status(self.job_id).step
        if step <= self.seen:
            return
        self.seen = step
        speed = np.asarray(self.fab.chip_metrics()["samples_per_s"], float)[list(self.job.chips)]
        if (speed <= 0).any():
            return  # no complete measurement yet
        self.monitor.sample(time.monotonic(), speed / speed.max())
        if not self.act or self.monitor.n < MONITOR_WINDOW:
            return
        if self.rebalancer.step(self.job):
            shares = [int(x) for x in self.job.microbatches]
            self.fab.set_work_split(self.job_id, shares)
            self.splits.append(shares)


def run(quick: bool = False) -> dict[str, Any]:
    warm_steps, measure_s, settle_s = (4, 3.0, 2.0) if quick else (20, 20.0, 15.0)
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-balance-") as wd:
        fab = LocalFabric(RANKS, workdir=wd, hang_timeout_s=30)
        try:
            _launch(fab, "clean", {})
            fab.wait("clean", 300, until=lambda s: s.step >= warm_steps)
            startup_s = time.monotonic() - t_start
            clean_tps, clean_steps = _window(fab, "clean", measure_s)
            fab.stop("clean")
            fab.wait("clean", 30)
            step_s = GLOBAL_BATCH * SEQ_LEN / clean_tps
            delay = SLOWDOWN * step_s
            _launch(fab, "slow", {SLOW_RANK: delay})
            fab.wait("slow", 300, until=lambda s: s.step >= warm_steps)
            bal = Balancer(fab, "slow")
            stuck_tps, stuck_steps = _window(fab, "slow", measure_s, bal.tick)
            bal.act = True
            _window(fab, "slow", settle_s, bal.tick)
            fixed_tps, fixed_steps = _window(fab, "slow", measure_s, bal.tick)
            speeds = bal.monitor.mean_speed()
            fab.stop("slow")
            fab.wait("slow", 30)
        finally:
            fab.close()
    return {
        "tokens_per_s_ratio": round(fixed_tps / clean_tps, 4),
        "tokens_per_s_ratio_without_rebalancing": round(stuck_tps / clean_tps, 4),
        "ideal_ratio": round((RANKS - 1 + 1 / (1 + SLOWDOWN)) / RANKS, 4),
        "tokens_per_s_rebalanced": round(fixed_tps, 1),
        "tokens_per_s_without_rebalancing": round(stuck_tps, 1),
        "tokens_per_s_none_slowed": round(clean_tps, 1),
        "steps_measured": [clean_steps, stuck_steps, fixed_steps],
        "clean_step_s": round(step_s, 4),
        "slow_rank_delay_s": round(delay, 4),
        "slowest_measured_rank": int(np.argmin(speeds)),
        "measured_relative_speed": [round(float(x), 3) for x in speeds / speeds.max()],
        "splits_applied": len(bal.splits),
        "final_split": bal.splits[-1] if bal.splits else [GLOBAL_BATCH // RANKS] * RANKS,
        "goal_tokens_per_s_ratio": 0.90,
        "first_launch_to_warm_s": round(startup_s, 1),
        "setup": f"tiny preset, {RANKS} ranks, gloo, global batch {GLOBAL_BATCH} x {SEQ_LEN} tokens; "
                 f"rank {SLOW_RANK} slowed {1 + SLOWDOWN:.2f}x per sample",
    }
