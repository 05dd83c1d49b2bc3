"""The helper API for user entrypoint scripts run by a podfleet worker.

    from podfleet.training import helpers as pf

    pf.rank(), pf.world_size(), pf.checkpoint_dir(), pf.device()
    got = pf.load_state()              # (step, state) of the latest committed checkpoint, or None
    for step in range(start, steps + 1):
        ...
        pf.report(step=step, loss=loss)
        if step % 10 == 0:
            pf.save_state({"model": model.state_dict(), "opt": opt.state_dict()}, step=step)

When the worker runs a script, torch.distributed is already initialised for
world_size > 1 (gloo on CPU, NCCL on CUDA). Outside podfleet the helpers read the
usual RANK / WORLD_SIZE environment and print progress to stderr.
"""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from podfleet.checkpoint import manifest, shard
from podfleet.checkpoint.keys import load_kek
from podfleet.training.config import Reporter, WorkerConfig


@dataclass
class Context:
    """What the helpers answer from: set by the podfleet worker around a script
    (``set_context``); outside podfleet, built from the environment on first use."""

    cfg: WorkerConfig
    reporter: Reporter
    kek: bytes | None
    device: torch.device


class _StderrReporter:
    def progress(self, step: int, loss: float, tokens_per_s: float, step_time_s: float) -> None:
        print(f"step {step} loss {loss:.4f}", file=sys.stderr)

    def heartbeat(self) -> None:
        pass

    def log(self, line: str) -> None:
        print(line, file=sys.stderr)

    def checkpoint(self, step: int, path: str) -> None:
        print(f"checkpoint step {step}: {path}", file=sys.stderr)


_CTX: Context | None = None


def set_context(ctx: Context | None) -> None:
    """For the worker: the job's context while it runs a script (None afterwards)."""
    global _CTX
    _CTX = ctx


def _ctx() -> Context:
    global _CTX
    if _CTX is None:
        cfg = WorkerConfig(
            job_id=os.environ.get("PODFLEET_JOB_ID", "job-local"),
            rank=int(os.environ.get("RANK", "0")),
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
            checkpoint_dir=os.environ.get("PODFLEET_CHECKPOINT_DIR"),
            encrypt_checkpoints=False,
        )
        _CTX = Context(cfg, _StderrReporter(), None, torch.device("cpu"))
    return _CTX


def rank() -> int:
    return _ctx().cfg.rank


def world_size() -> int:
    return _ctx().cfg.world_size


def job_id() -> str:
    return _ctx().cfg.job_id


def checkpoint_dir() -> str | None:
    return _ctx().cfg.checkpoint_dir


def device() -> torch.device:
    return _ctx().device


def config() -> WorkerConfig:
    return _ctx().cfg


def compress_gradients(ddp: Any) -> None:
    """Install the job's gradient compression (``--grad-compression``: none, bf16,
    powersgd:RANK, lossless) on the script's ``DistributedDataParallel`` module; the
    built-in trainer does this itself."""
    from podfleet.perf.compression import parse_grad_compression
    from podfleet.training.compression import install

    cfg = _ctx().cfg
    if cfg.world_size > 1:
        install(ddp, parse_grad_compression(cfg.grad_compression), cfg.world_size, cfg.seed)


def report(*, step: int, loss: float, tokens: int = 0, step_time_s: float = 0.0) -> None:
    tps = tokens / step_time_s if tokens and step_time_s > 0 else 0.0
    _ctx().reporter.progress(step, float(loss), tps, step_time_s)


def log(line: str) -> None:
    _ctx().reporter.log(line)


def heartbeat() -> None:
    _ctx().reporter.heartbeat()


def save_state(state: dict[str, Any], *, step: int) -> Path:
    """Write this rank's state as an (encrypted) shard of checkpoint ``step``; returns its path."""
    ctx = _ctx()
    root = ctx.cfg.checkpoint_dir
    if not root:
        raise RuntimeError("save_state needs the job's checkpoint_dir")
    buf = io.BytesIO()
    torch.save({"tensors": {}, "meta": {}, "user": state, "step": step}, buf)
    blob = shard.encode(buf.getvalue(), job_id=ctx.cfg.job_id, step=step, rank=ctx.cfg.rank, kek=ctx.kek)
    path = manifest.step_dir(root, step) / manifest.shard_name(ctx.cfg.rank)
    shard.atomic_write(path, blob)
    if ctx.cfg.world_size == 1:
        manifest.commit(root, ctx.cfg.job_id, step, 1)
    ctx.reporter.checkpoint(step, str(path))
    return path


def load_state() -> tuple[int, dict[str, Any]] | None:
    """(step, state) from this rank's shard of the latest committed checkpoint, verified."""
    ctx = _ctx()
    d = manifest.latest(ctx.cfg.checkpoint_dir)
    if d is None:
        return None
    m = manifest.read(d)
    entry = m.shards[min(ctx.cfg.rank, len(m.shards) - 1)]
    blob = manifest.read_shard(d, entry)
    payload = shard.decode(blob, job_id=ctx.cfg.job_id, step=m.step, rank=entry.rank, kek=ctx.kek, name=str(d / entry.file))
    obj = torch.load(io.BytesIO(payload), weights_only=True)
    return m.step, obj["user"]


def kek_for(cfg: WorkerConfig) -> bytes | None:
    return load_kek(cfg.key_file, cfg.key_env) if cfg.encrypt_checkpoints else None
