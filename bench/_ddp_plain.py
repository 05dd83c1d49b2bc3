"""A plain torchrun DDP script: the baseline for the runtime-overhead benchmark.

Same model, data, batch, optimizer and thread count as podfleet's built-in loop, and
nothing else: no reporting channel, heartbeats, loss all-reduce or checkpoints.
Run: torchrun --standalone --nproc_per_node 2 bench/_ddp_plain.py --steps 60 --model tiny --batch 16
Prints one JSON line from rank 0: wall-clock timestamps of every completed step.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from podfleet.training.data import batch
from podfleet.training.model import build_model, loss_fn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(a.model, 0)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    stamps = []
    for step in range(1, a.steps + 1):
        x, y = batch(0, step, a.batch, a.seq_len, rank, world)
        loss = loss_fn(ddp(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        stamps.append(time.time())
    if rank == 0:
        print(json.dumps({"stamps": stamps, "pid": os.getpid()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
