"""The built-in data-parallel training loop (torch.distributed; gloo on CPU, NCCL on CUDA).

Step order matters for recovery: forward, backward (DDP all-reduces gradients), and
only then ``optimizer.step``. Every collective of a step comes before the update, so when a peer dies mid-step this rank's model and optimizer still
hold exactly the last completed step: that state *is* the replica the new gang resumes
from (DP replicas are identical), and at most the interrupted step is lost.

Uneven split (load rebalancing): rank r takes ``shares[r]`` samples of the global batch
and scales its mean loss by ``shares[r] / mean(shares)`` before DDP averages the
gradients, so the update is the global-batch mean gradient, exactly the even split's.
A new split arrives between steps: the fabric writes ``cfg.split_file``; rank 0 reads
it and broadcasts it (one small collective per step, before the step's data is taken),
so every rank switches at the same step. The reported loss is the scaled one: its mean
over ranks is the global-batch mean, as with an even split.

Slow-worker fault (``cfg.slow_file``, written by ``LocalFabric.slow_worker``): a rank
slowed by factor f sleeps ``(f - 1) x`` its own step time before the fault (the median
of its last unslowed steps) ``x share / even share`` after each step: at an even split
its steps take f times as long, and the extra time scales with the samples it is given,
as on a chip f times slower per sample. The baseline is frozen while slowed, so the
sleep never feeds on time spent waiting for a peer. It sleeps between steps, where the
fabric's per-rank speed measure (fabric/local/speed.py) sees it.

On-demand checkpoint (``cfg.checkpoint_request_file``, written by the fabric's
``checkpoint_now`` when the plane preempts the job): ``{"request": N, "hold_s": H}``.
Rank 0 reads it between steps and broadcasts it with the split, so every rank saves the
same step: the last completed one, at the step boundary. The gang then holds there (no
step is trained that the checkpoint lacks) until the fabric stops it, or for ``H``
seconds, after which it trains on (a preemption that was called off). Heartbeats go on
while it holds, so the fabric's hang detection does not fire.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from podfleet.checkpoint.torch_state import AsyncCheckpointer
from podfleet.training.compression import WireMeter
from podfleet.training.config import Reporter, WorkerConfig
from podfleet.training.data import batch, split_samples
from podfleet.training.model import loss_fn


class PeerLost(Exception):
    """A collective failed because a peer went away; ``step`` is the last completed step."""

    def __init__(self, step: int, cause: BaseException) -> None:
        super().__init__(f"peer lost after step {step}: {str(cause).splitlines()[0][-120:]}")
        self.step = step


def is_comm_failure(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, dist.DistError) or any(
        s in text for s in ("gloo", "Connection reset", "Connection closed", "NCCL", "Broken pipe")
    )


def _read_split(path: str, global_batch: int, world_size: int) -> tuple[int, ...] | None:
    """The split the fabric last wrote (samples per rank), or None if none or unusable."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        got = split_samples([float(x) for x in raw["shares"]], global_batch)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return got if len(got) == world_size else None


def read_checkpoint_request(path: str | None) -> tuple[int, float]:
    """The fabric's newest on-demand checkpoint request: its number (0: none) and how long
    the gang holds after saving it."""
    if path is None:
        return 0, 0.0
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        return int(raw["request"]), max(0.0, float(raw.get("hold_s", 0.0)))
    except (OSError, ValueError, KeyError, TypeError):
        return 0, 0.0


@dataclass(frozen=True)
class BetweenSteps:
    """What every rank of the gang agrees on before a step: the split, and the newest
    on-demand checkpoint request (its number, the hold in milliseconds)."""

    shares: tuple[int, ...]
    request: int = 0
    hold_ms: int = 0


def _agree(cfg: WorkerConfig, current: BetweenSteps) -> BetweenSteps:
    """Rank 0's view of the split and checkpoint-request files, broadcast so every rank
    uses the same split and saves at the same step."""
    want, request, hold_ms = None, current.request, 0
    if cfg.rank == 0:
        if cfg.split_file:
            want = _read_split(cfg.split_file, cfg.global_batch, cfg.world_size)
        got, hold_s = read_checkpoint_request(cfg.checkpoint_request_file)
        if got > request:
            request, hold_ms = got, int(hold_s * 1000)
    agreed = BetweenSteps(want or current.shares, request, hold_ms)
    if cfg.world_size == 1:
        return agreed
    t = torch.tensor([*agreed.shares, agreed.request, agreed.hold_ms], dtype=torch.int64)
    dist.broadcast(t, src=0)
    v = [int(x) for x in t.tolist()]
    return BetweenSteps(tuple(v[:-2]), v[-2], v[-1])


def _checkpoint_on_demand(cfg: WorkerConfig, reporter: Reporter, model: torch.nn.Module,
                          optimizer: torch.optim.Optimizer, state: LoopState,
                          checkpointer: AsyncCheckpointer | None, agreed: BetweenSteps) -> None:
    """Save the last completed step now (unless a periodic save already holds it), wait
    until it is durable and reported, then hold at this step boundary."""
    if checkpointer is None:
        reporter.log("on-demand checkpoint asked, but this job has no checkpoint directory")
        return
    if state.saved_step != state.step:
        checkpointer.save(state.step, model, optimizer)
        state.saved_step = state.step
    checkpointer.flush()
    reporter.log(f"on-demand checkpoint of step {state.step} written (request {agreed.request}); "
                 f"holding up to {agreed.hold_ms / 1000:g} s for the stop")
    deadline = time.monotonic() + agreed.hold_ms / 1000
    while time.monotonic() < deadline:
        time.sleep(0.05)
    if agreed.hold_ms:
        reporter.log(f"no stop came within {agreed.hold_ms / 1000:g} s of the on-demand checkpoint: training on")


class SlowDown:
    """This rank's slow-down factor from the fault file (re-read only when it changed) and
    its unslowed step time per sample, the baseline the sleep is scaled from."""

    def __init__(self, path: str | None, rank: int) -> None:
        self.path, self.rank = path, rank
        self.factor = 1.0
        self._mtime: float | None = None
        self._per_sample: list[float] = []  # the last unslowed steps' time per sample

    def current(self) -> float:
        if self.path is None:
            return 1.0
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            self.factor, self._mtime = 1.0, None
            return 1.0
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                with open(self.path, encoding="utf-8") as f:
                    got = json.load(f).get("factors", {}).get(str(self.rank), 1.0)
                self.factor = max(1.0, float(got))
            except (OSError, ValueError, TypeError, AttributeError):
                self.factor = 1.0
        return self.factor

    def extra_s(self, step_time_s: float, samples: int) -> float:
        """How long to sleep after a step of ``samples`` that took ``step_time_s``."""
        factor = self.current()
        if factor <= 1.0 or not self._per_sample:
            if samples > 0:
                self._per_sample = [*self._per_sample[-4:], step_time_s / samples]
            if factor <= 1.0:
                return 0.0
        base = sorted(self._per_sample)[len(self._per_sample) // 2]
        return (factor - 1.0) * base * samples


@dataclass
class LoopState:
    step: int = 0  # last completed step
    losses: list[float] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)  # one per step run by this process
    wire: WireMeter = field(default_factory=WireMeter)  # bytes sent during each backward
    checkpoint_request: int = 0  # the newest on-demand checkpoint request served
    saved_step: int = -1  # the step of this process's last save (periodic or on demand)


def train(
    cfg: WorkerConfig,
    reporter: Reporter,
    model: torch.nn.Module,
    ddp: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    state: LoopState,
    checkpointer: AsyncCheckpointer | None,
) -> LoopState:
    distributed = cfg.world_size > 1
    tokens_per_step = cfg.global_batch * cfg.seq_len
    even = cfg.global_batch // cfg.world_size
    shares = cfg.shares or (even,) * cfg.world_size
    slow = SlowDown(cfg.slow_file, cfg.rank)
    agree = (distributed and cfg.split_file is not None) or cfg.checkpoint_request_file is not None
    for step in range(state.step + 1, cfg.steps + 1):
        t0 = time.perf_counter()
        try:
            if agree:
                agreed = _agree(cfg, BetweenSteps(shares, state.checkpoint_request))
                if agreed.shares != shares:
                    reporter.log(f"work split {list(shares)} -> {list(agreed.shares)} from step {step}")
                    shares = agreed.shares
                if agreed.request > state.checkpoint_request:
                    state.checkpoint_request = agreed.request
                    _checkpoint_on_demand(cfg, reporter, model, optimizer, state, checkpointer, agreed)
                    t0 = time.perf_counter()  # the hold is no part of the step's time
            x, y = batch(cfg.seed, step, cfg.global_batch, cfg.seq_len, cfg.rank, cfg.world_size, shares)
            xb, yb = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
            # Weighted so DDP's average over ranks is the global-batch mean gradient.
            loss = loss_fn(ddp(xb), yb) * (shares[cfg.rank] * cfg.world_size / cfg.global_batch)
            state.wire.begin()
            loss.backward()  # DDP all-reduces the gradients here: the step's only collective
            state.wire.end()
        except Exception as exc:
            if distributed and is_comm_failure(exc):
                optimizer.zero_grad(set_to_none=True)
                raise PeerLost(state.step, exc) from exc
            raise
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss_v = float(loss.detach())
        step_time_s = time.perf_counter() - t0
        state.step = step
        state.losses.append(loss_v)
        state.step_times_s.append(step_time_s)
        reporter.progress(step, loss_v, tokens_per_step / step_time_s, step_time_s)
        if checkpointer is not None and cfg.checkpoint_interval and step % cfg.checkpoint_interval == 0:
            checkpointer.save(step, model, optimizer)
            state.saved_step = step
        if cfg.step_delay_s:
            # An emulated slow chip is slow per sample: the delay scales with this rank's share.
            time.sleep(cfg.step_delay_s * shares[cfg.rank] * cfg.world_size / cfg.global_batch)
        extra_s = slow.extra_s(step_time_s, shares[cfg.rank])
        if extra_s > 0:
            time.sleep(extra_s)
    return state


# The reported loss is this rank's local mean over its equal share of the global batch;
# the job's loss for a step is the mean over ranks, which equals the global-batch mean.
# Averaging in the driver rather than with an all-reduce keeps a collective (and a sync
# point) out of every step.
