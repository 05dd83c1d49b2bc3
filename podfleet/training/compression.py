"""Gradient compression on a real DDP job, and what it sends over the wire.

``install(ddp, comp, world_size, seed)`` registers the mode's DDP communication hook:

* ``bf16``: PyTorch's ``bf16_compress_hook`` (cast, all-reduce, cast back);
* ``powersgd:R``: PyTorch's ``powerSGD_hook`` (rank R, error feedback, warm start;
  the first step all-reduces uncompressed, as the hook requires); on gloo one bucket at
  a time (``OneBucketAtATime`` below);
* ``lossless``: ``LosslessHook`` below: each bucket, already divided by the world size
  as DDP's own reduction does, is byte-shuffled (the four byte planes of the fp32
  values side by side: the exponent bytes compress, the mantissa bytes barely) and
  zstd-compressed; the ranks all-gather the compressed buckets (sizes first, padded to
  the largest) and each sums the decoded buckets in rank order. Decoding is exact, so
  every rank gets the same sum of the same values; with two ranks that sum is the one
  an uncompressed all-reduce computes (a + b = b + a), so training is bit-identical.

``WireMeter`` measures the bytes this process writes (``/proc/self/io`` ``wchar``: gloo
sends with write/writev) while the backward, and with it the step's gradient
collectives, runs: bytes on the wire, not a count of what the hooks meant to send.
"""

# No ``from __future__ import annotations``: DDP checks a hook's ``bucket`` annotation
# against the real ``dist.GradBucket`` class, so annotations here must be evaluated.
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from podfleet.perf.compression import GradCompression
from podfleet.training import iocount

ZSTD_LEVEL = 1  # the fast end: the codec runs on the step's critical path


def shuffle(values: np.ndarray) -> bytes:
    """The byte planes of float32 ``values`` one after the other (a lossless transpose)."""
    return np.ascontiguousarray(values.view(np.uint8).reshape(-1, 4).T).tobytes()


def unshuffle(data: bytes, count: int) -> np.ndarray:
    planes = np.frombuffer(data, dtype=np.uint8).reshape(4, count)
    return np.ascontiguousarray(planes.T).view(np.float32).reshape(count)


@dataclass
class CodecStats:
    raw_bytes: int = 0
    packed_bytes: int = 0
    encode_s: float = 0.0
    decode_s: float = 0.0


class LosslessHook:
    """A DDP comm hook: zstd over byte-shuffled buckets, all-gather, exact local sum."""

    def __init__(self, world_size: int, level: int = ZSTD_LEVEL) -> None:
        import zstandard

        self.world_size = world_size
        self.cctx = zstandard.ZstdCompressor(level=level)
        self.dctx = zstandard.ZstdDecompressor()
        self.stats = CodecStats()

    def encode(self, values: np.ndarray) -> bytes:
        t0 = time.perf_counter()
        blob = self.cctx.compress(shuffle(values))
        self.stats.encode_s += time.perf_counter() - t0
        self.stats.raw_bytes += values.nbytes
        self.stats.packed_bytes += len(blob)
        return blob

    def decode(self, blob: bytes, count: int) -> np.ndarray:
        t0 = time.perf_counter()
        out = unshuffle(self.dctx.decompress(blob, max_output_size=4 * count), count)
        self.stats.decode_s += time.perf_counter() - t0
        return out

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buf = bucket.buffer()
        if buf.dtype != torch.float32:
            raise TypeError(f"lossless compression handles float32 gradients, got {buf.dtype}")
        buf.div_(self.world_size)  # as DDP's own reduction: average = sum of (grad / n)
        count = buf.numel()
        blob = self.encode(buf.detach().cpu().numpy())
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(sizes, torch.tensor([len(blob)], dtype=torch.int64))
        lengths = [int(s.item()) for s in sizes]
        mine = torch.zeros(max(lengths), dtype=torch.uint8)
        mine[: len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(gathered, mine)
        total = np.zeros(count, dtype=np.float32)
        for data, n in zip(gathered, lengths, strict=True):
            total += self.decode(data[:n].numpy().tobytes(), count)
        buf.copy_(torch.from_numpy(total))
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        fut.set_result(buf)
        return fut


def lossless_hook(state: LosslessHook, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    return state.reduce(bucket)


def bf16_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """PyTorch's ``bf16_compress_hook`` for any backend (PyTorch's own refuses gloo):
    cast the bucket to bf16, all-reduce the average, cast back into the bucket."""
    buf = bucket.buffer()
    packed = buf.to(torch.bfloat16).div_(dist.get_world_size())
    fut = dist.all_reduce(packed, async_op=True).get_future()

    def unpack(f: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        buf.copy_(f.value()[0])
        return buf

    return fut.then(unpack)


@dataclass
class OneBucketAtATime:
    """A DDP comm hook's state that starts a bucket's hook only once the previous bucket's
    future is done (DDP hands buckets over in index order).

    PyTorch's ``powerSGD_hook`` issues its second and third all-reduces (P, then Q) from
    future callbacks, which gloo runs on its worker threads. With two or more buckets, the
    main thread's all-reduce for bucket 1 and a worker's P or Q all-reduce for bucket 0
    are then issued in whatever order the threads reach them, and that order differs
    between ranks. Gloo matches collectives by their issue order (a tag per call), so the
    ranks pair different collectives: gloo's transport thread throws ``op.preamble.length
    <= op.nbytes ... collective mismatch`` and the rank aborts (SIGABRT), or they exchange
    the wrong tensors. Waiting here puts every collective of a step in one order on every
    rank, at the cost of overlapping a bucket's reduction with the backward of the next
    one (NCCL completes its futures as it enqueues, so the race does not arise there)."""

    inner: Any  # (state, bucket) -> Future: the hook being serialised
    state: Any
    pending: torch.futures.Future[torch.Tensor] | None = None


def one_bucket_at_a_time(serial: OneBucketAtATime, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    if serial.pending is not None:
        serial.pending.wait()  # its error, if any, surfaces here: a failed collective of this step
    serial.pending = None
    fut: torch.futures.Future[torch.Tensor] = serial.inner(serial.state, bucket)
    if not bucket.is_last():
        serial.pending = fut  # DDP itself waits for the last one
    return fut


def install(ddp: Any, comp: GradCompression, world_size: int, seed: int) -> LosslessHook | None:
    """Register ``comp``'s communication hook on a DistributedDataParallel module."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    if comp.mode == "none":
        return None
    if comp.mode == "bf16":
        nccl = dist.get_backend() == "nccl"
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook if nccl else bf16_hook)
        return None
    if comp.mode == "powersgd":
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=comp.rank,
                                   start_powerSGD_iter=2, use_error_feedback=True, warm_start=True,
                                   random_seed=seed)
        if dist.get_backend() == "nccl":
            ddp.register_comm_hook(state, psgd.powerSGD_hook)
        else:
            ddp.register_comm_hook(OneBucketAtATime(psgd.powerSGD_hook, state), one_bucket_at_a_time)
        return None
    hook = LosslessHook(world_size)
    ddp.register_comm_hook(hook, lossless_hook)
    return hook


def _wchar() -> int | None:
    return iocount.wchar()


@dataclass
class WireMeter:
    """Bytes written by this process during each step's backward (its gradient traffic)."""

    per_step: list[int] = field(default_factory=list)
    _start: int | None = None

    @property
    def available(self) -> bool:
        return iocount.available()

    def begin(self) -> None:
        self._start = _wchar()

    def end(self) -> None:
        now = _wchar()
        if self._start is not None and now is not None:
            self.per_step.append(now - self._start)
        self._start = None

    def summary(self, skip: int = 2) -> int | None:
        """Median bytes per step after the first ``skip`` (DDP's bucket rebuild, PowerSGD's
        uncompressed warm-up)."""
        steady = self.per_step[skip:] or self.per_step
        return int(statistics.median(steady)) if steady else None


def report_line(comp: GradCompression, meter: WireMeter, step_times: list[float],
                hook: LosslessHook | None) -> str:
    """The one log line a bench (or an operator) reads the job's compression figures from."""
    wire = meter.summary()
    steady = step_times[2:] or step_times
    parts = [f"grad-compression {comp.name}:",
             f"wire_bytes_per_step={wire if wire is not None else 'n/a'}",
             f"step_time_s={statistics.median(steady) if steady else 0.0:.6f}"]
    if hook is not None and hook.stats.raw_bytes:
        s = hook.stats
        # Each rank decodes every rank's bucket: world_size raw bytes per raw byte encoded.
        parts += [f"codec_size_ratio={s.packed_bytes / s.raw_bytes:.4f}",
                  f"encode_bytes_per_s={s.raw_bytes / max(s.encode_s, 1e-9):.0f}",
                  f"decode_bytes_per_s={s.raw_bytes * hook.world_size / max(s.decode_s, 1e-9):.0f}"]
    return " ".join(parts)
