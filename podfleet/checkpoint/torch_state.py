"""Snapshot, shard, write asynchronously and restore model + optimizer state (torch).

Sharding: the flat state (model tensors, optimizer tensors) is split across ranks by
size, largest first onto the least-loaded rank, so each rank writes about 1/W of
the bytes; small metadata (optimizer hyper-parameters, step) goes into every shard.
Restore reads and verifies every shard and merges them, so a checkpoint written by
W ranks restores into any world size.

Async: ``save`` copies this rank's tensors (the only part that stalls training),
then a background thread serialises, encrypts, writes atomically and reports.
"""

from __future__ import annotations

import io
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from podfleet.checkpoint import manifest, shard


@dataclass(frozen=True)
class Restored:
    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None
    extra: dict[str, Any]
    path: Path


def flat_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors by flat key, small metadata)."""
    tensors = {f"model/{k}": v for k, v in model.state_dict().items()}
    meta: dict[str, Any] = {}
    if optimizer is not None:
        osd = optimizer.state_dict()
        for pid, st in osd["state"].items():
            for k, v in st.items():
                if torch.is_tensor(v) and v.dim() > 0:
                    tensors[f"optim/{pid}/{k}"] = v
                else:
                    meta[f"optim/{pid}/{k}"] = v
        meta["optim/param_groups"] = osd["param_groups"]
    return tensors, meta


def partition(sizes: dict[str, int], world_size: int) -> list[list[str]]:
    """Deterministic size-balanced split of keys over ranks."""
    loads = [0] * world_size
    out: list[list[str]] = [[] for _ in range(world_size)]
    for k in sorted(sizes, key=lambda k: (-sizes[k], k)):
        r = loads.index(min(loads))
        out[r].append(k)
        loads[r] += sizes[k]
    return out


def snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, rank: int, world_size: int) -> dict[str, Any]:
    tensors, meta = flat_state(model, optimizer)
    mine = partition({k: v.numel() * v.element_size() for k, v in tensors.items()}, world_size)[rank]
    # The copy is what makes the write safe to run beside training's in-place updates.
    return {"tensors": {k: tensors[k].detach().to("cpu", copy=True) for k in mine}, "meta": meta}


def serialize(obj: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def write_shard(root: str | Path, job_id: str, step: int, rank: int, state: dict[str, Any], kek: bytes | None, extra: dict[str, Any] | None = None) -> Path:
    obj = {**state, "step": step, "extra": extra or {}}
    blob = shard.encode(serialize(obj), job_id=job_id, step=step, rank=rank, kek=kek)
    path = manifest.step_dir(root, step) / manifest.shard_name(rank)
    shard.atomic_write(path, blob)
    return path


def load(directory: str | Path, job_id: str, kek: bytes | None) -> Restored:
    d = Path(directory)
    m = manifest.read(d)
    if m.job_id != job_id:
        from podfleet.errors import ChecksumError

        raise ChecksumError(f"checkpoint {d} belongs to job {m.job_id}, not {job_id}")
    tensors: dict[str, torch.Tensor] = {}
    meta: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for e in m.shards:
        blob = manifest.read_shard(d, e)
        payload = shard.decode(blob, job_id=job_id, step=m.step, rank=e.rank, kek=kek, name=str(d / e.file))
        obj = torch.load(io.BytesIO(payload), weights_only=True)
        tensors.update(obj["tensors"])
        meta.update(obj["meta"])
        extra.update(obj.get("extra", {}))
    model_sd = {k[len("model/"):]: v for k, v in tensors.items() if k.startswith("model/")}
    optim_sd = None
    if "optim/param_groups" in meta:
        state: dict[int, dict[str, Any]] = {}
        for k, v in [*tensors.items(), *meta.items()]:
            parts = k.split("/")
            if parts[0] == "optim" and len(parts) == 3:
                state.setdefault(int(parts[1]), {})[parts[2]] = v
        optim_sd = {"state": state, "param_groups": meta["optim/param_groups"]}
    return Restored(m.step, model_sd, optim_sd, extra, d)


class AsyncCheckpointer:
    """One background writer per rank; at most one save in flight (the next waits)."""

    def __init__(self, root: str | Path, job_id: str, rank: int, world_size: int, kek: bytes | None,
                 on_durable: Callable[[int, str], None] | None = None) -> None:
        self.root, self.job_id, self.rank, self.world_size, self.kek = Path(root), job_id, rank, world_size, kek
        self.on_durable = on_durable
        self._q: queue.Queue[tuple[int, dict[str, Any]] | None] = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self.stall_s: list[float] = []  # main-thread time per save: snapshot + waiting for a slot
        self.write_s: list[float] = []
        self.bytes_written = 0
        self._thread = threading.Thread(target=self._run, name=f"ckpt-writer-{rank}", daemon=True)
        self._thread.start()

    def save(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        self.raise_if_failed()
        t0 = time.perf_counter()
        state = snapshot(model, optimizer, self.rank, self.world_size)
        self._q.put((step, state))
        self.stall_s.append(time.perf_counter() - t0)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                step, state = item
                t0 = time.perf_counter()
                path = write_shard(self.root, self.job_id, step, self.rank, state, self.kek)
                self.write_s.append(time.perf_counter() - t0)
                self.bytes_written += path.stat().st_size
                if self.on_durable:
                    self.on_durable(step, str(path))
            except BaseException as exc:  # surfaced on the training thread at the next save/close
                self._error = exc
            finally:
                self._q.task_done()

    def flush(self) -> None:
        self._q.join()
        self.raise_if_failed()

    def close(self) -> None:
        self._q.join()
        self._q.put(None)
        self._thread.join()
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err
