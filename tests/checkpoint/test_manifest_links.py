"""A worker that owns its checkpoint tree cannot steer the server's manifest write."""

from __future__ import annotations

from pathlib import Path

import pytest

from podfleet.checkpoint import manifest
from podfleet.errors import InvalidInputError


def _shard(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / manifest.shard_name(0)).write_bytes(b"x" * 10)


def test_a_plain_step_commits(tmp_path: Path) -> None:
    _shard(manifest.step_dir(tmp_path, 3))
    m = manifest.commit(tmp_path, "job-1", 3, 1)
    assert m.step == 3 and (manifest.step_dir(tmp_path, 3) / manifest.MANIFEST).exists()


def test_a_step_directory_linked_elsewhere_is_refused(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "ck", tmp_path / "victim"
    _shard(elsewhere)
    root.mkdir()
    manifest.step_dir(root, 4).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(InvalidInputError, match="link"):
        manifest.commit(root, "job-1", 4, 1)
    assert not (elsewhere / manifest.MANIFEST).exists()


def test_a_linked_shard_is_refused(tmp_path: Path) -> None:
    d = manifest.step_dir(tmp_path, 5)
    d.mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_bytes(b"key material")
    (d / manifest.shard_name(0)).symlink_to(secret)
    with pytest.raises(InvalidInputError, match="link"):
        manifest.commit(tmp_path, "job-1", 5, 1)
