"""Checkpoint directories and their manifests (torch-free; the control plane commits).

A checkpoint is ``<root>/step-<NNNNNNNN>/`` holding one shard per rank and a
``manifest.json``. Ranks write shards independently and report them; when every
rank's shard of a step is durable, whoever drives the job (the local fabric, the Ray
driver, or a single-process run) calls ``commit``, which hashes the shards and writes
the manifest atomically. The manifest is the commit point: a step directory without
one is an incomplete checkpoint and is ignored by ``latest``.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from podfleet.checkpoint.shard import atomic_write
from podfleet.errors import ChecksumError, InvalidInputError, NotFoundError

MANIFEST = "manifest.json"


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def shard_name(rank: int) -> str:
    return f"shard-{rank:05d}.pfck"


@dataclass(frozen=True)
class ShardEntry:
    rank: int
    file: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    job_id: str
    step: int
    world_size: int
    shards: tuple[ShardEntry, ...]
    kind: str = "checkpoint"  # or "replica" (a survivor's in-memory state, one shard)
    created_s: float = 0.0


def commit(root: str | Path, job_id: str, step: int, n_shards: int, *, kind: str = "checkpoint") -> Manifest:
    d = step_dir(root, step)
    # Workers may own the checkpoint tree (an unprivileged worker user): a step directory or
    # shard they turned into a symlink would make the server write or read elsewhere.
    if d.is_symlink() or not d.resolve().is_relative_to(Path(root).resolve()):
        raise InvalidInputError(f"checkpoint {d} is a link out of {root}; refusing to commit", field="checkpoint")
    entries = []
    for r in range(n_shards):
        p = d / shard_name(r)
        if p.is_symlink():
            raise InvalidInputError(f"checkpoint {d}: shard {p.name} is a link; refusing to commit", field="checkpoint")
        if not p.exists():
            raise NotFoundError(f"checkpoint {d}: shard {p.name} is missing; cannot commit")
        data = p.read_bytes()
        entries.append(ShardEntry(r, p.name, len(data), hashlib.sha256(data).hexdigest()))
    m = Manifest(job_id, step, n_shards, tuple(entries), kind, time.time())
    body = {
        "format": 1, "job_id": job_id, "step": step, "world_size": n_shards, "kind": kind,
        "created_s": m.created_s, "shards": [e.__dict__ for e in entries],
    }
    atomic_write(d / MANIFEST, json.dumps(body, indent=1).encode())
    return m


def read(directory: str | Path) -> Manifest:
    d = Path(directory)
    try:
        raw = json.loads((d / MANIFEST).read_text())
    except FileNotFoundError as exc:
        raise NotFoundError(f"checkpoint {d} has no manifest (incomplete or not a checkpoint)") from exc
    except json.JSONDecodeError as exc:
        raise ChecksumError(f"checkpoint {d}: manifest.json is unreadable") from exc
    shards = tuple(ShardEntry(**e) for e in raw["shards"])
    return Manifest(raw["job_id"], raw["step"], raw["world_size"], shards, raw.get("kind", "checkpoint"), raw.get("created_s", 0.0))


def latest(root: str | Path | None) -> Path | None:
    """The committed checkpoint with the highest step under ``root``, if any."""
    if not root or not Path(root).is_dir():
        return None
    done = sorted(p for p in Path(root).glob("step-*") if (p / MANIFEST).exists())
    return done[-1] if done else None


def read_shard(directory: Path, entry: ShardEntry) -> bytes:
    p = directory / entry.file
    try:
        data = p.read_bytes()
    except FileNotFoundError as exc:
        raise ChecksumError(f"checkpoint shard {p}: missing") from exc
    if len(data) != entry.bytes:
        raise ChecksumError(f"checkpoint shard {p}: {len(data)} bytes, manifest says {entry.bytes} (truncated?)")
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise ChecksumError(f"checkpoint shard {p}: hash differs from the manifest (tampered or swapped)")
    return data
