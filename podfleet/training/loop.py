"""The built-in data-parallel training loop (torch.distributed; gloo on CPU, NCCL on CUDA).

Step order matters for recovery: forward, backward (DDP all-reduces gradients), and
only then ``optimizer.step``. Every collective of a step comes before the update, so when a peer dies mid-step this rank's model and optimizer still
hold exactly the last completed step: that state *is* the replica the new gang resumes
from (DP replicas are identical), and at most the interrupted step is lost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from podfleet.checkpoint.torch_state import AsyncCheckpointer
from podfleet.training.config import Reporter, WorkerConfig
from podfleet.training.data import batch
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


@dataclass
class LoopState:
    step: int = 0  # last completed step
    losses: list[float] = field(default_factory=list)


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
    for step in range(state.step + 1, cfg.steps + 1):
        t0 = time.perf_counter()
        x, y = batch(cfg.seed, step, cfg.global_batch, cfg.seq_len, cfg.rank, cfg.world_size)
        xb, yb = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
        try:
            loss = loss_fn(ddp(xb), yb)
            loss.backward()  # DDP all-reduces the gradients here: the step's only collective
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
        reporter.progress(step, loss_v, tokens_per_step / step_time_s, step_time_s)
        if checkpointer is not None and cfg.checkpoint_interval and step % cfg.checkpoint_interval == 0:
            checkpointer.save(step, model, optimizer)
        if cfg.step_delay_s:
            time.sleep(cfg.step_delay_s)
    return state


# The reported loss is this rank's local mean over its equal share of the global batch;
# the job's loss for a step is the mean over ranks, which equals the global-batch mean.
# Averaging in the driver rather than with an all-reduce keeps a collective (and a sync
# point) out of every step.
