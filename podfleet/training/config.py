"""The worker contract, free of torch so the control plane can import it.

``WorkerConfig`` says what one rank runs; ``Reporter`` is how it reports upward;
``WorkerResult`` is what it returns. ``JsonLineReporter`` is the subprocess channel:
one JSON object per line on a file descriptor the parent reads (see ``worker.main``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from podfleet.errors import InvalidInputError
from podfleet.perf.compression import parse_grad_compression
from podfleet.perf.models import TRAINER_PRESETS

# Worker exit codes; the fabric classifies a failure from them (see fabric/local/classify.py).
EXIT_OK = 0
EXIT_USER_ERROR = 1  # an exception in the user's script or the loop: counts against retries
EXIT_BAD_INPUT = 2  # missing entrypoint, unwritable checkpoint dir, wrong key: retrying won't help
EXIT_PEER_LOST = 75  # a peer died mid-collective; this rank saved its replica (infrastructure)

KEY_ENV_DEFAULT = "PODFLEET_CHECKPOINT_KEY"
# The presets the built-in trainer runs (one registry: podfleet.perf.models); imported
# here, torch-free, so launch can validate a name without importing torch.
PRESET_NAMES = TRAINER_PRESETS


@dataclass(frozen=True)
class WorkerConfig:
    """What one rank of a job runs. ``to_json``/``from_json`` carry it to a subprocess."""

    job_id: str
    rank: int
    world_size: int
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    model: str = "debug"  # a preset in podfleet.perf.models.TRAINER_PRESETS
    steps: int = 20
    seed: int = 0
    global_batch: int = 8  # sequences per step across all ranks
    seq_len: int = 64
    lr: float = 3e-3
    checkpoint_dir: str | None = None
    checkpoint_interval: int = 0  # steps; 0 = no periodic checkpoints
    encrypt_checkpoints: bool = True
    key_file: str | None = None  # a file holding the 32-byte KEK (raw, hex or base64)
    key_env: str = KEY_ENV_DEFAULT  # else the KEK from this environment variable
    resume: bool = False  # restore the latest committed checkpoint in checkpoint_dir
    resume_from: str | None = None  # restore this checkpoint directory (a peer replica)
    entrypoint: str | None = None  # a user script run instead of the built-in loop
    entrypoint_args: tuple[str, ...] = ()
    replica_peer: bool = True  # on a peer's death, save this rank's replica for the new gang
    replica_dir: str | None = None  # where that replica goes
    device: str = "auto"  # "auto" (cuda if visible, else cpu), "cpu", "cuda"
    threads: int = 1  # torch intra-op threads; 1 keeps runs bitwise reproducible
    heartbeat_interval_s: float = 0.2
    step_delay_s: float = 0.0  # test/benchmark knob: sleep per step at an even share (scaled by this rank's share)
    shares: tuple[int, ...] = ()  # samples of the global batch per rank (sum = global_batch); (): even
    split_file: str | None = None  # rank 0 reads a new split here between steps and broadcasts it
    slow_file: str | None = None  # fault injection (slow-worker): {"factors": {rank: f}} read between steps
    # On-demand checkpoints (preemption): the fabric writes {"request": N, "hold": bool} here;
    # rank 0 reads it between steps, the gang saves at that step boundary (and holds there).
    checkpoint_request_file: str | None = None
    grad_compression: str = "none"  # none | bf16 | powersgd:RANK | lossless (training/compression.py)
    array_index: int | None = None  # a job-array member's index: PODFLEET_ARRAY_INDEX for its script
    # NEURON_RT_VISIBLE_CORES for this rank: its chip's own NeuronCores on its host (a neuron
    # cluster across Ray nodes, fabric/neuron/hosts.py), not the ones Ray picked for the bundle.
    neuron_visible_cores: str | None = None
    # Rank moves (training/regroup.py): where the fabric writes the next rendezvous, the
    # rendezvous generation this process starts in, whether it replaces a lost rank (and so
    # takes its state from a peer), and how long a survivor waits for the fabric's move.
    regroup_file: str | None = None
    generation: int = 0
    join: bool = False
    regroup_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise InvalidInputError(f"world_size must be >= 1, got {self.world_size}", field="world_size")
        if not 0 <= self.rank < self.world_size:
            raise InvalidInputError(
                f"rank {self.rank} not in [0, world_size={self.world_size})", field="rank"
            )
        if self.steps < 0:
            raise InvalidInputError(f"steps must be >= 0, got {self.steps}", field="steps")
        if self.global_batch % self.world_size:
            raise InvalidInputError(
                f"global_batch ({self.global_batch}) is not divisible by world_size ({self.world_size}); "
                f"give a multiple of {self.world_size}, e.g. global_batch="
                f"{max(1, round(self.global_batch / self.world_size)) * self.world_size}",
                field="global_batch",
            )
        if self.shares and (len(self.shares) != self.world_size or min(self.shares) < 1
                            or sum(self.shares) != self.global_batch):
            raise InvalidInputError(f"shares {list(self.shares)} must be {self.world_size} counts >= 1 "
                                    f"summing to global_batch {self.global_batch}", field="shares")
        parse_grad_compression(self.grad_compression)  # raises naming the valid modes
        if self.checkpoint_interval and not self.checkpoint_dir:
            raise InvalidInputError("checkpoint_interval needs a checkpoint_dir", field="checkpoint_dir")

    @property
    def local_batch(self) -> int:
        return self.global_batch // self.world_size

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        raw = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(raw) - names
        if unknown:
            raise InvalidInputError(f"unknown WorkerConfig fields: {sorted(unknown)}", field="config")
        for key in ("entrypoint_args", "shares"):
            if key in raw:
                raw[key] = tuple(raw[key])
        return cls(**raw)

    def replace(self, **changes: Any) -> WorkerConfig:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class WorkerResult:
    rank: int
    steps_done: int  # last completed step
    final_loss: float | None
    losses: tuple[float, ...] = ()  # one per step run by this process
    start_step: int = 0  # the step restored from (0 = fresh)
    exit_code: int = EXIT_OK
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Reporter(Protocol):
    """How a worker reports upward (a pipe to the local fabric, a Ray actor's queue, ...)."""

    def progress(self, step: int, loss: float, tokens_per_s: float, step_time_s: float) -> None: ...

    def heartbeat(self) -> None: ...

    def log(self, line: str) -> None: ...

    def checkpoint(self, step: int, path: str) -> None: ...


@runtime_checkable
class MessageReporter(Reporter, Protocol):
    """A reporter that also takes typed messages: it gets ``running`` and ``replica`` too."""

    def send(self, type_: str, **fields: object) -> None: ...


class JsonLineReporter:
    """Writes one JSON object per line to a file descriptor; thread-safe.

    Message types: ``hello`` (pid, rank), ``running`` (imports done), ``progress``, ``heartbeat``, ``log``,
    ``checkpoint`` (a shard is durable), ``replica`` (a peer replica is durable),
    ``error`` (kind + message, just before a failing exit), ``done``.
    """

    def __init__(self, fd: int, rank: int) -> None:
        self._f = os.fdopen(fd, "w", buffering=1, closefd=False)
        self._lock = threading.Lock()
        self.rank = rank

    def send(self, type_: str, **fields: object) -> None:
        line = json.dumps({"type": type_, "rank": self.rank, "t": time.time(), **fields})
        with self._lock:
            try:
                self._f.write(line + "\n")
                self._f.flush()
            except BrokenPipeError:
                # The driver (control plane, fabric) is gone, e.g. killed with SIGKILL: nobody
                # can stop or use this worker any more, so it ends itself within a heartbeat
                # instead of training on as an orphan.
                os._exit(EXIT_PEER_LOST)
            except (ValueError, OSError):
                pass  # closed at interpreter exit: nothing to report to

    def progress(self, step: int, loss: float, tokens_per_s: float, step_time_s: float) -> None:
        self.send("progress", step=step, loss=loss, tokens_per_s=tokens_per_s, step_time_s=step_time_s)

    def heartbeat(self) -> None:
        self.send("heartbeat")

    def log(self, line: str) -> None:
        self.send("log", line=line)

    def checkpoint(self, step: int, path: str) -> None:
        self.send("checkpoint", step=step, path=path)


class NullReporter:
    """Collects progress in memory (tests, single-process runs)."""

    def __init__(self) -> None:
        self.progress_log: list[tuple[int, float]] = []
        self.checkpoints: list[tuple[int, str]] = []
        self.lines: list[str] = []

    def progress(self, step: int, loss: float, tokens_per_s: float, step_time_s: float) -> None:
        self.progress_log.append((step, loss))

    def heartbeat(self) -> None:
        pass

    def log(self, line: str) -> None:
        self.lines.append(line)

    def checkpoint(self, step: int, path: str) -> None:
        self.checkpoints.append((step, path))
