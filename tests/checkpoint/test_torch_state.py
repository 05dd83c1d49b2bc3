"""Sharded model/optimizer checkpoints: async write, restore into any world size, tamper refused."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from podfleet.checkpoint import manifest  # noqa: E402
from podfleet.checkpoint.torch_state import (  # noqa: E402
    AsyncCheckpointer,
    flat_state,
    load,
    partition,
    snapshot,
    write_shard,
)
from podfleet.errors import ChecksumError  # noqa: E402
from podfleet.training.model import build_model  # noqa: E402

KEK = secrets.token_bytes(32)


@given(sizes=st.dictionaries(st.text(min_size=1, max_size=6), st.integers(1, 10**6), max_size=40),
       world=st.integers(1, 8))
def test_partition_assigns_every_key_once(sizes: dict[str, int], world: int) -> None:
    parts = partition(sizes, world)
    assert len(parts) == world
    flat = [k for p in parts for k in p]
    assert sorted(flat) == sorted(sizes)
    assert partition(sizes, world) == parts  # deterministic


def _trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = build_model("debug", 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (2, 16))
    model(x).sum().backward()
    opt.step()
    return model, opt


def test_two_shards_round_trip_exactly(tmp_path: Path) -> None:
    model, opt = _trained()
    seen: list[tuple[int, str]] = []
    writers = [AsyncCheckpointer(tmp_path, "job-t", r, 2, KEK, lambda s, p: seen.append((s, p))) for r in (0, 1)]
    for w in writers:
        w.save(7, model, opt)
    for w in writers:
        w.close()
    assert sorted(s for s, _ in seen) == [7, 7]
    sizes = [Path(p).stat().st_size for _, p in seen]
    tensors, _meta = flat_state(model, opt)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    assert max(sizes) < 0.6 * total  # each rank wrote about half of the state
    manifest.commit(tmp_path, "job-t", 7, 2)
    got = load(manifest.step_dir(tmp_path, 7), "job-t", KEK)
    assert got.step == 7
    for k, v in model.state_dict().items():
        assert torch.equal(got.model[k], v), k
    fresh = torch.optim.AdamW(build_model("debug", 1).parameters(), lr=1e-3)
    fresh.load_state_dict(got.optimizer)
    for pid, st_ in opt.state_dict()["state"].items():
        for k, v in st_.items():
            assert torch.equal(torch.as_tensor(fresh.state_dict()["state"][pid][k]), torch.as_tensor(v))


def test_restore_refuses_tampering_and_wrong_key(tmp_path: Path) -> None:
    model, opt = _trained()
    for r in (0, 1):
        write_shard(tmp_path, "job-t", 3, r, snapshot(model, opt, r, 2), KEK)
    d = manifest.step_dir(tmp_path, 3)
    manifest.commit(tmp_path, "job-t", 3, 2)
    with pytest.raises(ChecksumError, match="wrong key"):
        load(d, "job-t", secrets.token_bytes(32))
    with pytest.raises(ChecksumError, match="belongs to job job-t"):
        load(d, "job-other", KEK)
    # An attacker who also rewrites the manifest still cannot get a flipped byte past AES-GCM.
    p = d / manifest.shard_name(1)
    blob = bytearray(p.read_bytes())
    blob[-5] ^= 0xFF
    p.write_bytes(bytes(blob))
    manifest.commit(tmp_path, "job-t", 3, 2)
    with pytest.raises(ChecksumError, match=r"shard-00001\.pfck: authentication failed"):
        load(d, "job-t", KEK)


def test_background_write_error_surfaces_on_the_training_thread(tmp_path: Path) -> None:
    model, opt = _trained()
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    w = AsyncCheckpointer(blocker, "job-t", 0, 1, KEK)
    w.save(1, model, opt)
    with pytest.raises(OSError):
        w.close()
