"""Versioned KEKs: rotate adds a version, old versions still decrypt, rewrap moves data
keys to the current version without touching the encrypted data, retired versions are
refused. Plus the key providers podfleet's own keys come from."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podfleet.checkpoint import keys, manifest, shard
from podfleet.checkpoint.rekey import rewrap_tree
from podfleet.cli.main import app as cli
from podfleet.errors import ChecksumError, InvalidInputError
from podfleet.security.keyring import (
    CommandKeyProvider,
    EnvKeyProvider,
    FileKeyProvider,
    LayeredKeyProvider,
    current_key,
)


def write_checkpoint(root: Path, step: int, kek: bytes, world: int = 2) -> None:
    d = manifest.step_dir(root, step)
    for r in range(world):
        shard.atomic_write(d / manifest.shard_name(r), shard.encode(f"state {step}/{r}".encode() * 100,
                                                                  job_id="job-k", step=step, rank=r, kek=kek))
    manifest.commit(root, "job-k", step, world)


def read_checkpoint(root: Path, step: int, kek: bytes) -> list[bytes]:
    d = manifest.step_dir(root, step)
    m = manifest.read(d)
    return [shard.decode(manifest.read_shard(d, e), job_id="job-k", step=step, rank=e.rank, kek=kek,
                         name=e.file) for e in m.shards]


def bodies(root: Path) -> dict[str, bytes]:
    return {str(p): shard.split(p.read_bytes(), name=p.name)[2] for p in sorted(root.rglob("*.pfck"))}


def test_rotate_rewrap_retire(tmp_path: Path) -> None:
    key_file = keys.new_key_file(tmp_path / "keys" / "cl-1.kek")
    root = tmp_path / "ckpt"
    write_checkpoint(root, 1, keys.load_kek(str(key_file)))
    assert keys.rotate(key_file) == "v2"
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    ring = keys.load_kek(str(key_file))
    assert isinstance(ring, keys.KeyRing) and ring.current == "v2"
    write_checkpoint(root, 2, ring)  # new data under v2
    assert read_checkpoint(root, 1, ring)[0].startswith(b"state 1/0")  # v1 still decrypts
    before = bodies(root)
    report = rewrap_tree(root, keys.load_ring(key_file))
    assert report.as_dict() == {"rewrapped": 2, "current": 2, "plain": 0, "legacy": 0}
    assert bodies(root) == before  # the encrypted data was not touched
    keys.retire(key_file, "v1")
    ring = keys.load_kek(str(key_file))
    assert read_checkpoint(root, 1, ring)[1].startswith(b"state 1/1")  # readable under v2 now
    with pytest.raises(InvalidInputError, match="current"):
        keys.retire(key_file, "v2")
    # A shard still under a retired version is refused.
    other = tmp_path / "other"
    v1 = keys.load_ring(key_file).versions["v1"]
    write_checkpoint(other, 5, v1)
    with pytest.raises(ChecksumError, match="retired"):
        read_checkpoint(other, 5, keys.load_kek(str(key_file)))


def test_rewrap_refuses_a_tampered_shard(tmp_path: Path) -> None:
    key_file = keys.new_key_file(tmp_path / "k.kek")
    root = tmp_path / "ckpt"
    write_checkpoint(root, 1, keys.load_kek(str(key_file)))
    keys.rotate(key_file)
    p = manifest.step_dir(root, 1) / manifest.shard_name(0)
    blob = bytearray(p.read_bytes())
    blob[-1] ^= 1
    p.write_bytes(bytes(blob))
    with pytest.raises(ChecksumError, match="authentication failed"):
        rewrap_tree(root, keys.load_ring(key_file))


def test_keys_cli(tmp_path: Path) -> None:
    key_file = keys.new_key_file(tmp_path / "k.kek")
    root = tmp_path / "ckpt"
    write_checkpoint(root, 3, keys.load_kek(str(key_file)))
    run = CliRunner().invoke
    r = run(cli, ["keys", "rotate", "--key-file", str(key_file), "--output", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["version"] == "v2"
    r = run(cli, ["keys", "rewrap", str(root), "--key-file", str(key_file), "--output", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["rewrapped"] == 2
    m = json.loads((manifest.step_dir(root, 3) / manifest.MANIFEST).read_text())
    p = manifest.step_dir(root, 3) / m["shards"][0]["file"]
    assert m["shards"][0]["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
    r = run(cli, ["keys", "retire", "v1", "--key-file", str(key_file)])
    assert r.exit_code == 0
    r = run(cli, ["keys", "retire", "v9", "--key-file", str(key_file)])
    assert r.exit_code == 2 and "v1, v2" in r.output
    FileKeyProvider(tmp_path / "kd").create("audit-mac-v1")  # what the first `podfleet up` mints
    r = run(cli, ["keys", "rotate", "--audit", "--key-dir", str(tmp_path / "kd"), "--output", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["version"] == "audit-mac-v2"


def test_key_providers(tmp_path: Path) -> None:
    files = FileKeyProvider(tmp_path / "keys")
    assert files.get("audit-mac-v1") is None
    k1 = files.create("audit-mac-v1")
    assert files.get("audit-mac-v1") == k1 and os.stat(files.path("audit-mac-v1")).st_mode & 0o777 == 0o600
    assert os.stat(tmp_path / "keys").st_mode & 0o777 == 0o700
    env = EnvKeyProvider(env={"PODFLEET_KEY_AUDIT_MAC_V1": "ab" * 32})
    assert env.get("audit-mac-v1") == bytes.fromhex("ab" * 32) and env.get("audit-mac-v2") is None
    # An injected variable overrides the file; new versions are minted in the file.
    layered = LayeredKeyProvider(env, files)
    kid, key, known = current_key(layered, "audit-mac", create=True)
    assert (kid, key) == ("audit-mac-v1", bytes.fromhex("ab" * 32)) and list(known) == ["audit-mac-v1"]
    kms = tmp_path / "kms.py"
    kms.write_text("import sys\nif sys.argv[1] != 'audit-mac-v1': sys.exit(3)\nprint('cd' * 32)\n")
    cmd = CommandKeyProvider([sys.executable, str(kms)])
    assert cmd.get("audit-mac-v1") == bytes.fromhex("cd" * 32) and cmd.get("audit-mac-v2") is None
    with pytest.raises(InvalidInputError, match="cannot create"):
        current_key(cmd, "other", create=True)
    with pytest.raises(InvalidInputError, match="key name"):
        files.get("../etc/passwd")
