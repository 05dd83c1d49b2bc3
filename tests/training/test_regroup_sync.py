"""The state transfer of a rank move (training/regroup.py ``sync_state``) on two real gloo
processes: a replacement built without initialisation (``build_model(init=False)``)
receives the source's model and AdamW state, large tensors straight into its own model
(no copy), and ends bit-identical to the source; the weight tying survives."""

from __future__ import annotations

import multiprocessing as mp
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.realproc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, port: int, out: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from podfleet.training import regroup
    from podfleet.training.data import batch
    from podfleet.training.model import build_model, loss_fn

    torch.set_num_threads(1)
    regroup.DIRECT_BYTES = 16 * 1024  # the debug preset's big tensors go the direct way
    regroup.init_group("gloo", f"tcp://127.0.0.1:{port}", rank, 2, timedelta(seconds=60))
    model = build_model("debug", 0, init=rank == 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if rank == 0:  # the survivor: a few trained steps, so its state differs from any init
        for step in range(1, 4):
            x, y = batch(0, step, 2, 16)
            loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
            opt.step()
            opt.zero_grad()
    ptrs = {n: t.data_ptr() for n, t in model.state_dict().items()}
    step, src = regroup.sync_state(model, opt, 3 if rank == 0 else -1, torch.device("cpu"))
    in_place = all(t.data_ptr() == ptrs[n] for n, t in model.state_dict().items())
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    moments = torch.cat([opt.state[p][k].reshape(-1) for p in model.parameters() for k in ("exp_avg", "exp_avg_sq")])
    torch.save({"step": step, "src": src, "in_place": in_place, "params": flat, "moments": moments,
                "tied": model.head.weight is model.tok.weight, "adam_step": float(opt.state[model.tok.weight]["step"])},
               f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


def test_a_replacement_takes_the_survivors_state_bit_for_bit(tmp_path: Path) -> None:
    import torch

    port = _free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, port, str(tmp_path))) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
        assert p.exitcode == 0
    a, b = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert (a["step"], a["src"]) == (b["step"], b["src"]) == (3, 0)
    assert torch.equal(a["params"], b["params"]) and torch.equal(a["moments"], b["moments"])
    assert b["adam_step"] == a["adam_step"] == 3.0
    assert b["tied"] and b["in_place"]  # the replacement's own tensors were received into


def test_an_uninitialised_model_has_the_same_tensors_and_tying() -> None:
    from podfleet.training.model import build_model

    a, b = build_model("debug", 0), build_model("debug", 0, init=False)
    assert [(n, p.shape) for n, p in a.named_parameters()] == [(n, p.shape) for n, p in b.named_parameters()]
    assert b.head.weight is b.tok.weight and not b.tok.weight.is_meta
