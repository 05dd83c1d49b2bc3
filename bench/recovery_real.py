"""Recovery of a real 2-worker training job from kill -9 (local fabric, real processes).

Two scenarios on the same host:
* peer replicas + warm standbys (the default design): kill -9 rank 1 from outside;
  the survivor saves its replica, the gang restarts on a spare from warm standbys.
* checkpoint only, cold start: replicas off, no warm standbys; restore from the last
  committed checkpoint (interval ``CKPT_EVERY`` steps), every rank imports torch again.

resume_s: wall time from the kill to the first step after resume completed by every rank
(detect_s: kill -> exit noticed; relaunch_s: kill -> new gang spawned).
steps_lost: completed steps that had to be redone.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time

from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.local import LocalFabric

NAME = "recovery-real"
DESCRIPTION = "kill -9 of a real DP worker: resume_s (kill -> first step after resume) and steps_lost"
CKPT_EVERY = 10


def _scenario(replicas: bool, quick: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as wd:
        fab = LocalFabric(3, spares=(2,), workdir=wd, warm_workers=2 if replicas else 0, refill_delay_s=0.5)
        try:
            fab.launch(WorkerGroupSpec("job-bench", (0, 1), "tiny", 100_000, checkpoint_interval=CKPT_EVERY,
                                       options={"global_batch": 16, "replica_peer": replicas}))
            warm_at = 25 if quick else 45
            fab.wait("job-bench", 300, until=lambda s: s.step >= warm_at)
            while replicas and fab.warm_ready() < 2:
                time.sleep(0.05)
            # Land the kill mid-interval so the checkpoint-only case shows its typical loss.
            fab.wait("job-bench", 120, until=lambda s: s.step % CKPT_EVERY == CKPT_EVERY // 2)
            pid = fab.pids("job-bench")[1]
            t_kill = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            st = fab.wait("job-bench", 300, until=lambda s: bool(s.recoveries))
            if not st.recoveries:
                raise RuntimeError(f"job did not recover: {st.state.value}: {st.reason}")
            rec = st.recoveries[0]
            fab.stop("job-bench")
            fab.wait("job-bench", 30)
        finally:
            fab.close()
    return {
        "resume_s": round(rec["first_step_mono"] - t_kill, 3),
        "detect_s": round(rec["detect_mono"] - t_kill, 3),
        "relaunch_s": round(rec["relaunch_mono"] - t_kill, 3),
        "steps_lost": rec["steps_lost"],
        "restored_from": rec["source"],
    }


def run(quick: bool = False) -> dict:
    peer = _scenario(True, quick)
    cold = _scenario(False, quick)
    return {
        "resume_s": peer["resume_s"],
        "steps_lost": peer["steps_lost"],
        "detect_s": peer["detect_s"],
        "relaunch_s": peer["relaunch_s"],
        "restored_from": peer["restored_from"],
        "checkpoint_only_resume_s": cold["resume_s"],
        "checkpoint_only_steps_lost": cold["steps_lost"],
        "checkpoint_only_detect_s": cold["detect_s"],
        "checkpoint_only_relaunch_s": cold["relaunch_s"],
        "checkpoint_interval_steps": CKPT_EVERY,
        "goal_resume_s": 10.0,
        "goal_steps_lost_with_replicas": 1,
        "model": "tiny (0.86M params), 2 ranks, gloo, global batch 16 x 64 tokens",
    }
