"""podfleet's training runtime against a plain torchrun DDP script, same model and batch.

Both run 2 ranks of the ``tiny`` GPT (gloo, 1 intra-op thread each) on the same data.
Throughput is measured the same way on both sides: tokens of the steady-state steps
(after ``WARMUP`` steps) over the wall time between rank 0's step-completion stamps,
so podfleet's extra work (report channel, heartbeats, loss all-reduce) is included.
Runs alternate A/B and the medians are compared, to average out a noisy shared host.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from podfleet.fabric.base import FabricEvent, WorkerGroupSpec
from podfleet.fabric.local import LocalFabric

NAME = "runtime-overhead"
DESCRIPTION = "tokens/s of a podfleet local job over a plain torchrun DDP script (ratio; goal >= 0.95)"
WARMUP, BATCH, SEQ = 10, 16, 64
TOKENS_PER_STEP = BATCH * SEQ


def _tokens_per_s(stamps: list[float]) -> float:
    steady = stamps[WARMUP - 1 :]
    return (len(steady) - 1) * TOKENS_PER_STEP / (steady[-1] - steady[0])


def _plain(steps: int) -> float:
    torchrun = Path(sys.executable).parent / "torchrun"
    script = Path(__file__).with_name("_ddp_plain.py")
    out = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node", "2", str(script), "--steps", str(steps),
         "--model", "tiny", "--batch", str(BATCH), "--seq-len", str(SEQ)],
        capture_output=True, text=True, check=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("{"))
    return _tokens_per_s(json.loads(line)["stamps"])


def _podfleet(steps: int) -> float:
    stamps: dict[int, float] = {}
    lock = threading.Lock()

    def on_event(ev: FabricEvent) -> None:
        if ev.kind == "progress":
            with lock:
                stamps[ev.detail["step"]] = ev.detail["worker_t"]

    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as wd:
        fab = LocalFabric(2, workdir=wd)
        fab.subscribe(on_event)
        try:
            fab.launch(WorkerGroupSpec("job-overhead", (0, 1), "tiny", steps,
                                       options={"global_batch": BATCH, "seq_len": SEQ}))
            st = fab.wait("job-overhead", 600)
            if st.state.value != "finished":
                raise RuntimeError(f"podfleet job ended {st.state.value}: {st.reason}")
        finally:
            fab.close()
    return _tokens_per_s([stamps[s] for s in sorted(stamps)])


def run(quick: bool = False) -> dict:
    steps, rounds = (40, 1) if quick else (100, 4)
    pf, plain = [], []
    for i in range(rounds):
        # ABBA order, so drift in the host's load hits both sides alike.
        if i % 2 == 0:
            plain.append(_plain(steps))
            pf.append(_podfleet(steps))
        else:
            pf.append(_podfleet(steps))
            plain.append(_plain(steps))
    pf_m, plain_m = statistics.median(pf), statistics.median(plain)
    return {
        "ratio": round(pf_m / plain_m, 4),
        "podfleet_tokens_per_s": round(pf_m, 1),
        "torchrun_tokens_per_s": round(plain_m, 1),
        "podfleet_runs": [round(x, 1) for x in pf],
        "torchrun_runs": [round(x, 1) for x in plain],
        "steps": steps,
        "warmup_steps": WARMUP,
        "goal_ratio": 0.95,
        "setup": f"tiny GPT (0.86M params), 2 ranks gloo, global batch {BATCH} x {SEQ} tokens, 1 thread/rank",
    }
