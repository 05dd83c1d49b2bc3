"""An uneven data-parallel split gives the even split's update (realproc, 2 workers)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from podfleet.checkpoint import manifest
from podfleet.checkpoint.torch_state import load
from podfleet.fabric.base import Rebalanceable, WorkerGroupSpec
from podfleet.fabric.local import LocalFabric
from podfleet.training.data import split_samples

pytestmark = pytest.mark.realproc
STEPS, BATCH = 8, 8


def _run(tmp: Path, name: str, split: list[int] | None, later: list[int] | None = None) -> tuple[dict, dict]:
    fab = LocalFabric(2, workdir=tmp / name, hang_timeout_s=10)
    assert isinstance(fab, Rebalanceable)
    opts: dict = {"global_batch": BATCH, "encrypt_checkpoints": False}
    if split:
        opts["work_split"] = split
    try:
        fab.launch(WorkerGroupSpec("job", (0, 1), "debug", STEPS, checkpoint_interval=STEPS, options=opts))
        if later:
            fab.wait("job", 120, until=lambda s: s.step >= 2)
            fab.set_work_split("job", later)
        st = fab.wait("job", 120)
        assert st.state.value == "finished", st
        ckpt = manifest.latest(str(tmp / name / "jobs" / "job" / "checkpoints"))
        assert ckpt
        return load(ckpt, "job", None).model, dict(st.losses)
    finally:
        fab.close()


def test_split_samples() -> None:
    assert split_samples([3, 5], 8) == (3, 5)
    assert split_samples([1, 1, 1, 1], 8) == (2, 2, 2, 2)
    assert sum(split_samples([9, 9, 5, 8], 64)) == 64


def test_uneven_split_equals_even_split(tmp_path: Path) -> None:
    even, even_loss = _run(tmp_path, "even", None)
    uneven, uneven_loss = _run(tmp_path, "uneven", [3, 5])
    switched, switched_loss = _run(tmp_path, "switched", None, later=[1, 3])  # 2 / 6 samples mid-run
    for other in (uneven, switched):
        for k, v in even.items():
            assert torch.allclose(v, other[k], rtol=1e-3, atol=5e-4), (k, float((v - other[k]).abs().max()))
    for losses in (uneven_loss, switched_loss):
        assert losses.keys() == even_loss.keys()
        assert all(abs(losses[s] - even_loss[s]) < 1e-4 for s in losses)
