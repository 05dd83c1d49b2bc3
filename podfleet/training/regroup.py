"""Re-forming a data-parallel gang in place after one rank was lost (the worker side of a
rank move; ``fabric/local/rankmove.py`` is the fabric's).

A survivor whose collective failed (``loop.PeerLost``) keeps its model and optimizer in
memory, destroys the broken process group and waits for the fabric's next rendezvous:
a JSON document ``{"generation", "addr", "port", "world_size"}`` the fabric writes to
``cfg.regroup_file`` once it has started the lost rank's replacement on another chip.
Every rank (survivors and the replacement, which starts with ``cfg.join``) then joins
a new process group on that fresh port (a new TCPStore hosted by rank 0, same world
size, the ranks keep their numbers), as torchelastic does on a re-rendezvous: the old
group is destroyed, never reused.

State: the ranks all-gather the step each holds (-1 for a replacement); the lowest rank
holding the highest step is the source and broadcasts its model and optimizer state to
all the others (each tensor of 1 MiB or more on its own, sent from and received into the
tensors themselves; the small rest as one flat buffer per dtype: ~100 collectives for a
25M-parameter model, not thousands, and no copy of its 300 MB). Broadcasting to every
rank, not only the new one, also covers a survivor that finished one step fewer than
another (a peer died inside the last all-reduce). Only a replacement, which holds
nothing, receives into its own model; nothing is copied into a survivor's model until
the whole state arrived, so a second loss during the transfer leaves every survivor's
state intact for the next generation.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from podfleet.training.config import WorkerConfig

POLL_S = 0.02  # how often a waiting survivor looks for the fabric's rendezvous


class NoReplica(Exception):
    """No rank of the re-formed gang holds the job's state (every holder was lost)."""


@dataclass(frozen=True)
class Rendezvous:
    generation: int
    addr: str
    port: int
    world_size: int


def read_rendezvous(path: str) -> Rendezvous | None:
    """The fabric's latest rendezvous, or None when there is none (or it is half-written)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return Rendezvous(int(doc["generation"]), str(doc["addr"]), int(doc["port"]), int(doc["world_size"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def wait_rendezvous(path: str, after: int, timeout_s: float) -> Rendezvous | None:
    """The first rendezvous newer than generation ``after``, or None after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = read_rendezvous(path)
        if got is not None and got.generation > after:
            return got
        time.sleep(POLL_S)
    return None


# The sockets the current process group opened (its store client, its gloo pairs, rank 0's
# store server): ``cut_group`` shuts them down when a peer is lost.
_group_sockets: set[int] = set()


def _open_sockets() -> set[int]:
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return set()
    out: set[int] = set()
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                out.add(int(name))
    return out


def wait_store(addr: str, port: int, timeout_s: float) -> None:
    """Until rank 0's store accepts connections (or ``timeout_s``): a rank that connects
    before it listens falls into the store client's retry backoff and joins up to ~0.5 s
    after the store came up; polling every ``POLL_S`` joins within one poll."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((addr, port), timeout=max(POLL_S, 0.5)):
                return
        except OSError:
            time.sleep(POLL_S)


def init_group(backend: str, init_method: str, rank: int, world_size: int, timeout: timedelta) -> None:
    """``dist.init_process_group``, remembering the sockets the new group opened."""
    global _group_sockets
    if rank != 0 and init_method.startswith("tcp://"):
        host, port = init_method.removeprefix("tcp://").rsplit(":", 1)
        t0 = time.monotonic()
        wait_store(host, int(port), timeout.total_seconds())
        timeout = max(timedelta(seconds=1), timeout - timedelta(seconds=time.monotonic() - t0))  # one budget
    before = _open_sockets()
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
    store_port = int(init_method.rsplit(":", 1)[1])
    _group_sockets = {fd for fd in _open_sockets() - before if _is_peer_link(fd, store_port)}


def _is_peer_link(fd: int, store_port: int) -> bool:
    """A connected socket that is not the store's (the old TCPStore is left alone: its
    server thread does not survive its sockets being shut under it)."""
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return False
    try:
        local, peer = s.getsockname(), s.getpeername()
        return store_port not in (local[1], peer[1])
    except (OSError, IndexError, TypeError):
        return False  # listening, or not an internet socket
    finally:
        s.close()


def cut_group() -> None:
    """Shut down every connection of this rank's broken group at once.

    With three or more ranks a survivor can be blocked on a live peer rather than on the
    dead rank: rank 2 of a ring waiting in an all-reduce for rank 0, which saw the loss.
    It only learns of it when rank 0's sockets to it close, and destroying rank 0's group
    does not close them while anything still references the group (DDP's reducer, a
    pending work), and gloo has no abort: rank 2 then waited for the group's own 60 s
    timeout, past the fabric's 30 s regroup wait, and the gang relaunched. A shutdown
    (not a close: gloo still owns the descriptors) sends each peer EOF now, so every
    survivor's collective fails within milliseconds whichever rank died."""
    global _group_sockets
    fds, _group_sockets = _group_sockets, set()
    for fd in fds:
        with contextlib.suppress(OSError):
            s = socket.socket(fileno=os.dup(fd))
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def leave_group() -> None:
    """Destroy this process's broken process group (a peer's socket closed: it returns at once)."""
    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def join_group(cfg: WorkerConfig, rdv: Rendezvous, backend: str) -> None:
    if rdv.world_size != cfg.world_size:
        raise ValueError(f"rendezvous for world size {rdv.world_size}, this rank is of {cfg.world_size}")
    init_group(backend, f"tcp://{rdv.addr}:{rdv.port}", cfg.rank, rdv.world_size,
               timedelta(seconds=cfg.regroup_timeout_s))


def _skeleton(obj: Any, out: list[torch.Tensor]) -> Any:
    """``obj`` with each tensor replaced by a placeholder (collected into ``out`` in order)."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
        return ("__tensor__", tuple(obj.shape), str(obj.dtype).removeprefix("torch."))
    if isinstance(obj, dict):
        return {k: _skeleton(v, out) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_skeleton(v, out) for v in obj)
    return obj


def _is_placeholder(obj: Any) -> bool:
    return isinstance(obj, tuple) and len(obj) == 3 and obj[0] == "__tensor__"


def _fill(skel: Any, it: Any) -> Any:
    if _is_placeholder(skel):
        return next(it)
    if isinstance(skel, dict):
        return {k: _fill(v, it) for k, v in skel.items()}
    if isinstance(skel, list | tuple):
        return type(skel)(_fill(v, it) for v in skel)
    return skel


def _placeholders(skel: Any, out: list[tuple[tuple[int, ...], str]]) -> None:
    if _is_placeholder(skel):
        out.append((tuple(skel[1]), skel[2]))
    elif isinstance(skel, dict):
        for v in skel.values():
            _placeholders(v, out)
    elif isinstance(skel, list | tuple):
        for v in skel:
            _placeholders(v, out)


# A tensor of at least this many bytes is broadcast on its own, straight from the source's
# tensor into the receiver's; smaller ones share one flat buffer per dtype.
DIRECT_BYTES = 1 << 20


def _broadcast(tensors: list[torch.Tensor], shapes: list[tuple[tuple[int, ...], str]], src: int,
               device: torch.device, into: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Broadcast ``tensors`` (on ``src``; ``shapes`` elsewhere): the received tensors, in order.

    Large tensors go one collective each, with no copy on either side: the source sends its
    own tensor and a receiver receives into ``into[i]`` (its own model's tensor, when it has
    nothing of its own to keep) or a fresh one. The rest (biases, norms, AdamW's step
    counters) go as one flat buffer per dtype, so a 25M-parameter model costs ~100
    collectives, not thousands, and no 300 MB concatenation."""
    is_src = dist.get_rank() == src
    out: list[torch.Tensor | None] = [None] * len(shapes)
    small: dict[str, list[int]] = {}
    for i, (shape, dt) in enumerate(shapes):
        dtype = getattr(torch, dt)
        numel = int(torch.Size(shape).numel())
        if numel * dtype.itemsize < DIRECT_BYTES:
            small.setdefault(dt, []).append(i)
            continue
        if is_src:
            t = tensors[i].detach()
            t = t if t.is_contiguous() and t.device == device else t.contiguous().to(device)
        else:
            dst = into[i] if into is not None else None
            ok = dst is not None and dst.is_contiguous() and tuple(dst.shape) == shape and dst.dtype == dtype
            t = dst.detach() if ok and dst is not None else torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(t, src=src)
        out[i] = t
    for dt in sorted(small):
        idx = small[dt]
        numels = [int(torch.Size(shapes[i][0]).numel()) for i in idx]
        if is_src:
            flat = torch.cat([tensors[i].detach().reshape(-1).to(device) for i in idx])
        else:
            flat = torch.empty(sum(numels), dtype=getattr(torch, dt), device=device)
        dist.broadcast(flat, src=src)
        for i, part in zip(idx, flat.split(numels), strict=True):
            out[i] = part.view(shapes[i][0])
    return [t for t in out if t is not None]


def sync_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int,
               device: torch.device) -> tuple[int, int]:
    """Give every rank the newest state in the gang: (step restored, source rank).
    ``step`` is what this rank holds (-1: nothing, a replacement, which receives the
    model's weights straight into its own tensors; a survivor receives into fresh ones
    and copies them only once all arrived). Raises ``NoReplica``."""
    world = dist.get_world_size()
    steps = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(steps, torch.tensor([step], dtype=torch.int64))
    held = [int(t.item()) for t in steps]
    best = max(held)
    if best < 0:
        raise NoReplica("no rank of the re-formed gang holds the job's state")
    src = held.index(best)
    mine: list[torch.Tensor] = []
    own = model.state_dict()
    skel = _skeleton({"model": own, "optim": optimizer.state_dict()}, mine)
    box: list[Any] = [skel if dist.get_rank() == src else None]
    dist.broadcast_object_list(box, src=src)
    shapes: list[tuple[tuple[int, ...], str]] = []
    _placeholders(box[0], shapes)
    into: list[torch.Tensor] | None = None
    if step < 0 and dist.get_rank() != src:
        # Nothing here to keep if the transfer breaks: receive the weights in place.
        into = [own[name] for name in box[0]["model"]] + [torch.empty(0)] * (len(shapes) - len(box[0]["model"]))
    got = _broadcast(mine, shapes, src, device, into)
    if dist.get_rank() != src:
        full = _fill(box[0], iter(got))
        with torch.no_grad():
            for name, value in own.items():
                if full["model"][name].data_ptr() != value.data_ptr():
                    value.copy_(full["model"][name])
        optimizer.load_state_dict(full["optim"])
    return best, src
