"""Real acceptance probes on this host's workers: a timed matmul and a collectives table.

Each probe spawns one process per worker slot (``spawn``, so nothing of the server is
inherited), joins them in a ``torch.distributed`` group (gloo on CPU, NCCL when every
rank has a CUDA device) and measures like nccl-tests / nccom-test: a warm-up, then
``iters`` timed runs between barriers; a row's time is the slowest rank's mean. Every
result is checked against its known value (each rank fills its buffer with rank + 1),
so ``wrong`` counts elements that came back wrong.

    rows = collectives(world=4, ops=("all-reduce",), sizes_bytes=(8, 1 << 20))
    rates = matmuls(world=4, dtype="bf16")
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from podfleet.errors import InfeasibleError, InvalidInputError
from podfleet.fabric.base import COLLECTIVE_OPS, CollectiveRow, MatmulRate, bus_factor

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
TOLERANCE = {"fp32": 1e-3, "bf16": 3e-2, "fp16": 1e-2}
MATMUL_N = 512
GPU_MATMUL_N = 8192
# gloo on CPU: larger messages only cost minutes and host memory (each rank holds several
# buffers of the size); bigger sizes asked for are measured at this one.
GLOO_MAX_BYTES = 256 << 20
PROBE_TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def iterations(size_bytes: int, quick: bool = False) -> int:
    """More runs for small messages, whose time is mostly latency."""
    base = 20 if size_bytes <= 1 << 16 else 8 if size_bytes <= 1 << 22 else 3
    return max(2, base // 4) if quick else base


def backend_for(world: int) -> str:
    """NCCL when every rank can have its own GPU, else gloo on CPU."""
    try:
        import torch
    except ImportError:  # the probe itself says torch is missing
        return "gloo"
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world else "gloo"


def _init(rank: int, world: int, port: int) -> Any:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # ranks share the host fairly
    cuda = backend_for(world) == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    return torch.device("cuda", rank) if cuda else torch.device("cpu")


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _one_op(op: str, size: int, rank: int, world: int, device: Any, iters: int) -> tuple[float, int, int]:
    """(mean seconds per run on this rank, element count, wrong elements)."""
    import torch
    import torch.distributed as dist

    count = max(1, size // 4)
    if op in ("all-gather", "reduce-scatter", "all-to-all"):
        count = max(world, count - count % world)  # divisible into one chunk per rank
    chunk = count // world

    def run() -> int:
        wrong = 0
        if op == "all-reduce":
            t = torch.full((count,), float(rank + 1), device=device)
            dist.all_reduce(t)
            wrong = int((t != world * (world + 1) / 2).sum())
        elif op == "all-gather":
            src = torch.full((chunk,), float(rank + 1), device=device)
            outs = [torch.empty(chunk, device=device) for _ in range(world)]
            dist.all_gather(outs, src)
            wrong = sum(int((o != i + 1).sum()) for i, o in enumerate(outs))
        elif op == "reduce-scatter":
            ins = [torch.full((chunk,), float(rank + 1), device=device) for _ in range(world)]
            out = torch.empty(chunk, device=device)
            dist.reduce_scatter(out, ins)
            wrong = int((out != world * (world + 1) / 2).sum())
        elif op == "all-to-all":
            src = torch.full((count,), float(rank + 1), device=device)
            dst = torch.empty(count, device=device)
            dist.all_to_all_single(dst, src)
            expect = torch.arange(1, world + 1, device=device, dtype=dst.dtype).repeat_interleave(chunk)
            wrong = int((dst != expect).sum())
        else:  # send-recv: rank 0 -> rank 1, the others wait at the barrier
            if rank == 0:
                dist.send(torch.full((count,), 1.0, device=device), 1)
            elif rank == 1:
                t = torch.empty(count, device=device)
                dist.recv(t, 0)
                wrong = int((t != 1.0).sum())
        return wrong

    wrong = run()  # warm-up, checked too
    dist.barrier()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        wrong += run()
    _sync(device)
    elapsed = (time.perf_counter() - t0) / iters
    stats = torch.tensor([elapsed, float(wrong)], dtype=torch.float64)
    dist.all_reduce(stats[:1], op=dist.ReduceOp.MAX)
    dist.all_reduce(stats[1:], op=dist.ReduceOp.SUM)
    return float(stats[0]), count, int(stats[1])


def _collectives_worker(rank: int, world: int, port: int, ops: Sequence[str], sizes: Sequence[int],
                        quick: bool, out: Any) -> None:
    import torch.distributed as dist

    try:
        device = _init(rank, world, port)
        rows = []
        for op in ops:
            if op == "send-recv" and world < 2:
                continue
            for size in sizes:
                try:
                    t, count, wrong = _one_op(op, size, rank, world, device, iterations(size, quick))
                except RuntimeError as exc:  # a backend without the op (gloo: reduce_scatter)
                    if rank == 0:
                        out.put(("unsupported", op, str(exc).splitlines()[0][:200]))
                    break
                nbytes = count * 4
                algbw = nbytes / max(t, 1e-12) / 1e9
                rows.append(asdict(CollectiveRow(
                    op=op, group="local", ranks=world, size_bytes=nbytes, count=count, type="float32",
                    time_us=t * 1e6, algbw_gbps=algbw, busbw_gbps=algbw * bus_factor(op, world), wrong=wrong)))
        if rank == 0:
            out.put(("rows", rows))
        dist.destroy_process_group()
    except Exception as exc:
        out.put(("error", rank, f"{type(exc).__name__}: {exc}"))


def _matmul_worker(rank: int, world: int, port: int, dtype: str, n: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    try:
        device = _init(rank, world, port)
        if device.type == "cuda" and n == MATMUL_N:
            n = GPU_MATMUL_N  # a GPU needs a large product to be compute-bound
        tdt = getattr(torch, DTYPES[dtype])
        g = torch.Generator().manual_seed(rank)
        a64 = torch.randn(n, n, generator=g, dtype=torch.float64)
        b64 = torch.randn(n, n, generator=g, dtype=torch.float64)
        a, b = a64.to(device, tdt), b64.to(device, tdt)
        c = a @ b  # warm-up
        ref = a.double().cpu()[:16] @ b.double().cpu()
        err = (c.double().cpu()[:16] - ref).abs() / (ref.abs().mean() + 1e-12)
        wrong = int((err > TOLERANCE[dtype]).sum())
        dist.barrier()
        reps = 0
        _sync(device)
        t0 = time.perf_counter()
        while reps < 3 or time.perf_counter() - t0 < 0.3:
            c = a @ b
            reps += 1
        _sync(device)
        t = (time.perf_counter() - t0) / reps
        out.put(("rate", rank, 2.0 * n**3 / t / 1e12, wrong))
        dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:
        out.put(("error", rank, f"{type(exc).__name__}: {exc}"))


def _spawn(world: int, target: Any, args: tuple[Any, ...], want: int, timeout_s: float) -> list[tuple[Any, ...]]:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InfeasibleError("this probe needs torch on the server (pip install 'podfleet[train]')",
                              field="fabric") from None
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    env_keep = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        procs = [ctx.Process(target=target, args=(r, world, port, *args, out), daemon=True) for r in range(world)]
        for p in procs:
            p.start()
    finally:
        if env_keep is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env_keep
    got: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while sum(m[0] != "unsupported" for m in got) < want:
            left = deadline - time.monotonic()
            if left <= 0:
                raise InfeasibleError(f"probe did not finish in {timeout_s:g} s", field="probe")
            try:
                msg = out.get(timeout=min(left, 1.0))
            except queue_mod.Empty:
                if all(not p.is_alive() for p in procs) and out.empty():
                    raise InfeasibleError("probe workers exited without a result", field="probe") from None
                continue
            if msg[0] == "error":
                raise InfeasibleError(f"probe rank {msg[1]} failed: {msg[2]}", field="probe")
            got.append(msg)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    return got


def capped(sizes_bytes: Sequence[int], backend: str) -> tuple[int, ...]:
    """The sizes to run: on gloo, those over ``GLOO_MAX_BYTES`` become that size (once)."""
    if backend != "gloo":
        return tuple(sizes_bytes)
    return tuple(dict.fromkeys(min(int(s), GLOO_MAX_BYTES) for s in sizes_bytes))


def collectives(world: int, ops: Sequence[str] = ("all-reduce",), sizes_bytes: Sequence[int] = (1 << 20,),
                *, quick: bool = False, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[list[CollectiveRow], dict[str, str]]:
    """The measured rows, and the ops the backend refused with its reason. Sizes over
    ``GLOO_MAX_BYTES`` run at that size on gloo (``capped``)."""
    if world < 1:
        raise InvalidInputError(f"a collectives probe needs at least 1 rank, got {world}", field="world")
    bad = [op for op in ops if op not in COLLECTIVE_OPS]
    if bad:
        raise InvalidInputError(f"unknown collective {bad[0]!r}; valid: {', '.join(COLLECTIVE_OPS)}", field="ops")
    sizes = capped(sizes_bytes, backend_for(world))
    got = _spawn(world, _collectives_worker, (tuple(ops), sizes, quick), 1, timeout_s)
    rows = [CollectiveRow(**r) for m in got if m[0] == "rows" for r in m[1]]
    refused = {m[1]: m[2] for m in got if m[0] == "unsupported"}
    return rows, refused


def matmuls(world: int, dtype: str, *, n: int = MATMUL_N, timeout_s: float = PROBE_TIMEOUT_S) -> list[MatmulRate]:
    """One timed ``n x n`` matmul per rank (rank r = worker slot r), result-checked."""
    if dtype not in DTYPES:
        raise InvalidInputError(f"dtype {dtype!r} is not timed here; valid: {', '.join(DTYPES)}", field="dtype")
    got = _spawn(world, _matmul_worker, (dtype, n), world, timeout_s)
    return sorted((MatmulRate(chip=m[1], dtype=dtype, tflops=m[2], wrong=m[3]) for m in got if m[0] == "rate"),
                  key=lambda r: r.chip)
