"""Checkpoint write / restore throughput, encrypted vs plain, and the training stall each causes.

In one process: the ``small`` GPT (10.8M params; ``tiny`` with --quick) with its AdamW
state. Write = snapshot + serialise + (encrypt) + atomic write with fsync; restore =
read + verify + (decrypt) + deserialise. Stall = extra time the training thread spends
per checkpoint: async (snapshot only, the rest in the background) and, for contrast,
a synchronous save of the same bytes.
"""

from __future__ import annotations

import secrets
import statistics
import tempfile
import time
from pathlib import Path

NAME = "checkpoint-io"
DESCRIPTION = "checkpoint write/restore bytes/s (AES-256-GCM vs plain) and the training stall (async vs sync)"


def run(quick: bool = False) -> dict:
    import torch

    from podfleet.checkpoint import manifest
    from podfleet.checkpoint.torch_state import AsyncCheckpointer, load, snapshot, write_shard
    from podfleet.training.data import batch
    from podfleet.training.model import build_model, loss_fn

    torch.set_num_threads(1)
    preset, reps, steps, every = ("tiny", 2, 24, 4) if quick else ("small", 3, 36, 6)
    model = build_model(preset, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step(step: int) -> None:
        x, y = batch(0, step, 8, 64)
        loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    train_step(1)  # creates the optimizer state that checkpoints carry
    kek = secrets.token_bytes(32)
    out: dict[str, object] = {"model": preset, "params": sum(p.numel() for p in model.parameters())}
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as wd:
        for label, key in (("encrypted", kek), ("plain", None)):
            w_s, r_s, size = [], [], 0
            for i in range(reps):
                root = Path(wd) / f"{label}-{i}"
                t0 = time.perf_counter()
                path = write_shard(root, "job-io", 1, 0, snapshot(model, opt, 0, 1), key)
                w_s.append(time.perf_counter() - t0)
                manifest.commit(root, "job-io", 1, 1)
                size = path.stat().st_size
                t0 = time.perf_counter()
                load(manifest.step_dir(root, 1), "job-io", key)
                r_s.append(time.perf_counter() - t0)
            out[f"checkpoint_bytes_{label}"] = size
            out[f"write_{label}_bytes_per_s"] = round(size / statistics.median(w_s))
            out[f"restore_{label}_bytes_per_s"] = round(size / statistics.median(r_s))
            out[f"sync_stall_{label}_ms"] = round(1000 * statistics.median(w_s), 2)

        # Stall under training: step times with async checkpoints every `every` steps vs none.
        def timed_run(ckpt: AsyncCheckpointer | None, first: int) -> list[float]:
            times = []
            for s in range(first, first + steps):
                t0 = time.perf_counter()
                train_step(s)
                if ckpt is not None and s % every == 0:
                    ckpt.save(s, model, opt)
                times.append(time.perf_counter() - t0)
            if ckpt is not None:
                ckpt.close()
            return times

        base = timed_run(None, 2)
        for label, key in (("encrypted", kek), ("plain", None)):
            ck = AsyncCheckpointer(Path(wd) / f"async-{label}", "job-io", 0, 1, key)
            times = timed_run(ck, 2 + steps)
            out[f"async_stall_{label}_ms"] = round(1000 * statistics.median(ck.stall_s), 2)
            out[f"async_step_time_overhead_{label}_pct"] = round(
                100 * (statistics.mean(times) / statistics.mean(base) - 1), 1)
        out["base_step_time_ms"] = round(1000 * statistics.median(base), 2)
    out["checkpoint_every_steps"] = every
    return out
