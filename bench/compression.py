"""Gradient compression on real training: each mode against the uncompressed run.

One 2-rank data-parallel job per mode on the local fabric (real worker processes,
gloo over TCP), the same model, seed, data and steps; only ``grad_compression``
changes. Every figure comes out of the runs:

* ``wire_bytes_ratio``: bytes each rank wrote while its backward (and with it the
  gradient reduction) ran, median over steady steps (``/proc/self/io`` ``wchar``; gloo
  sends with write/writev), over the uncompressed run's;
* ``effective_bandwidth_gain``: gradient bytes delivered per byte on the wire, minus
  one (``1 / wire_bytes_ratio - 1``; the seed's "+50 % effective bandwidth" is 0.5);
* ``step_time_ratio``: median step time over the uncompressed run's (host CPU: the
  codec competes with the model for the same cores, and loopback TCP is far faster
  than a NeuronLink-bound step would make the wire, so this is a worst case for codecs);
* ``loss_delta``: the mean loss of the last ``TAIL`` steps minus the uncompressed
  run's (same seed and data; a mean, because one batch of the corpus spikes the loss
  of a single step), and ``final_loss_delta`` at the last step;
* for ``lossless``: ``bit_identical`` (every step's loss equals the uncompressed
  run's) and the codec's measured size ratio and throughputs.
"""

from __future__ import annotations

import re
import statistics
import tempfile
from typing import Any

from podfleet.fabric.base import RunState, WorkerGroupSpec
from podfleet.fabric.local import LocalFabric

NAME = "compression"
DESCRIPTION = "gradient compression (bf16, PowerSGD, lossless zstd) on real DDP training vs uncompressed"
MODES = ("none", "bf16", "powersgd:4", "lossless")
TAIL = 5
_FIELD = re.compile(r"(\w+)=([0-9.]+)")


def _figures(lines: list[str], mode: str) -> dict[str, float]:
    """The workers' ``grad-compression`` log lines, medians over ranks."""
    rows = [dict((k, float(v)) for k, v in _FIELD.findall(line))
            for line in lines if f"grad-compression {mode}:" in line]
    if not rows:
        raise RuntimeError(f"no grad-compression line in the {mode} job's log")
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def _tail(losses: dict[int, float], steps: int) -> float:
    return statistics.fmean(losses[s] for s in range(steps - TAIL + 1, steps + 1))


def _run(fab: LocalFabric, mode: str, model: str, steps: int, batch: int) -> dict[str, Any]:
    job = "job-" + mode.replace(":", "-")
    fab.launch(WorkerGroupSpec(job, (0, 1), model, steps, checkpoint_interval=0,
                               options={"global_batch": batch, "grad_compression": mode, "seed": 0,
                                        "replica_peer": False, "encrypt_checkpoints": False}))
    st = fab.wait(job, 600)
    if st.state is not RunState.FINISHED:
        raise RuntimeError(f"{mode} run ended {st.state.value}: {st.reason}")
    return {"losses": dict(st.losses), **_figures(fab.run_logs(job), mode)}


def run(quick: bool = False) -> dict[str, Any]:
    model, steps, batch = ("debug", 24, 8) if quick else ("tiny", 60, 16)
    with tempfile.TemporaryDirectory(prefix="bench-compression-") as wd:
        fab = LocalFabric(2, workdir=wd, hang_timeout_s=30)
        try:
            runs = {mode: _run(fab, mode, model, steps, batch) for mode in MODES}
        finally:
            fab.close()
    base = runs["none"]
    per_mode: dict[str, dict[str, Any]] = {}
    for mode in MODES[1:]:
        r = runs[mode]
        ratio = r["wire_bytes_per_step"] / base["wire_bytes_per_step"]
        row: dict[str, Any] = {
            "wire_bytes_ratio": round(ratio, 4),
            "effective_bandwidth_gain": round(1.0 / ratio - 1.0, 4),
            "step_time_ratio": round(r["step_time_s"] / base["step_time_s"], 3),
            "loss_delta": round(_tail(r["losses"], steps) - _tail(base["losses"], steps), 5),
            "final_loss_delta": round(r["losses"][steps] - base["losses"][steps], 5),
        }
        if mode == "lossless":
            row["bit_identical"] = r["losses"] == base["losses"]
            row["codec_size_ratio"] = r["codec_size_ratio"]
            row["encode_mb_per_s"] = round(r["encode_bytes_per_s"] / 1e6, 1)
            row["decode_mb_per_s"] = round(r["decode_bytes_per_s"] / 1e6, 1)
        per_mode[mode] = row
    return {
        **{f"{m}.{k}": v for m, row in per_mode.items() for k, v in row.items()},
        "wire_bytes_per_step_uncompressed": int(base["wire_bytes_per_step"]),
        "step_time_s_uncompressed": round(base["step_time_s"], 5),
        "final_loss_uncompressed": round(base["losses"][steps], 5),
        "seed_claim_effective_bandwidth_gain": 0.5,
        "model": f"{model}, 2 ranks, gloo over loopback TCP, global batch {batch} x 64 tokens, {steps} steps",
    }
