"""Encrypted checkpoint shards: round trip, tamper / truncation / swap / wrong key refused."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podfleet.checkpoint import keys, manifest, shard
from podfleet.errors import ChecksumError, InvalidInputError

KEK = secrets.token_bytes(32)


@given(payload=st.binary(max_size=2048), job=st.text(min_size=1, max_size=12), step=st.integers(0, 10**6),
       rank=st.integers(0, 512), encrypted=st.booleans())
def test_encode_decode_round_trip(payload: bytes, job: str, step: int, rank: int, encrypted: bool) -> None:
    kek = KEK if encrypted else None
    blob = shard.encode(payload, job_id=job, step=step, rank=rank, kek=kek)
    assert shard.decode(blob, job_id=job, step=step, rank=rank, kek=kek, name="s") == payload
    if encrypted and len(payload) >= 16:
        # The body is ciphertext. (A payload of a few bytes can turn up in random bytes by
        # chance: 16 or more cannot, short of a 2**-128 coincidence.)
        assert payload not in blob[-len(payload) - 16 :]


@given(pos=st.integers(0, 10**6), encrypted=st.booleans())
def test_any_flipped_byte_is_refused(pos: int, encrypted: bool) -> None:
    kek = KEK if encrypted else None
    blob = bytearray(shard.encode(b"weights" * 40, job_id="job-a", step=3, rank=1, kek=kek))
    blob[pos % len(blob)] ^= 0x01
    with pytest.raises(ChecksumError, match="shard s3"):
        shard.decode(bytes(blob), job_id="job-a", step=3, rank=1, kek=kek, name="s3")


@pytest.mark.parametrize("encrypted", [True, False])
def test_truncated_shard_is_refused(encrypted: bool) -> None:
    kek = KEK if encrypted else None
    blob = shard.encode(b"x" * 500, job_id="job-a", step=3, rank=0, kek=kek)
    for cut in (5, len(blob) // 2, len(blob) - 1):
        with pytest.raises(ChecksumError, match="shard-0"):
            shard.decode(blob[:cut], job_id="job-a", step=3, rank=0, kek=kek, name="shard-0")


@pytest.mark.parametrize(("job", "step", "rank"), [("job-b", 3, 0), ("job-a", 4, 0), ("job-a", 3, 1)])
def test_shard_from_another_job_step_or_rank_is_refused(job: str, step: int, rank: int) -> None:
    blob = shard.encode(b"state", job_id="job-a", step=3, rank=0, kek=KEK)
    with pytest.raises(ChecksumError, match="swapped or misplaced"):
        shard.decode(blob, job_id=job, step=step, rank=rank, kek=KEK, name="x")


def test_header_rewritten_to_claim_another_rank_fails_authentication() -> None:
    blob = shard.encode(b"state", job_id="job-a", step=3, rank=0, kek=KEK)
    forged = blob.replace(b'"rank": 0', b'"rank": 1')
    assert forged != blob
    with pytest.raises(ChecksumError, match="authentication failed"):
        shard.decode(forged, job_id="job-a", step=3, rank=1, kek=KEK, name="x")


def test_wrong_key_is_refused_with_a_clear_error() -> None:
    blob = shard.encode(b"state", job_id="job-a", step=3, rank=0, kek=KEK)
    with pytest.raises(ChecksumError, match="wrong key") as err:
        shard.decode(blob, job_id="job-a", step=3, rank=0, kek=secrets.token_bytes(32), name="x")
    assert err.value.field == "key"
    with pytest.raises(ChecksumError, match="does not unwrap"):
        keys.unwrap(secrets.token_bytes(32), keys.wrap(KEK, secrets.token_bytes(32)), shard="x")
    with pytest.raises(ChecksumError, match="no key"):
        shard.decode(blob, job_id="job-a", step=3, rank=0, kek=None, name="x")


def test_key_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    k = secrets.token_bytes(32)
    assert keys.parse_key(k.hex().encode(), source="t") == k
    assert keys.parse_key(base64.b64encode(k) + b"\n", source="t") == k
    assert keys.parse_key(k, source="t") == k
    with pytest.raises(InvalidInputError, match="not 32 bytes"):
        keys.parse_key(b"short", source="t")
    monkeypatch.setenv("PF_TEST_KEY", k.hex())
    assert keys.load_kek(None, "PF_TEST_KEY") == k
    monkeypatch.delenv("PF_TEST_KEY")
    with pytest.raises(InvalidInputError, match="no checkpoint key"):
        keys.load_kek(None, "PF_TEST_KEY")
    path = keys.new_key_file(tmp_path / "kek")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert len(keys.load_kek(str(path))) == 32
    with pytest.raises(InvalidInputError, match="cannot read key file"):
        keys.load_kek(str(tmp_path / "missing"))


def _write(root: Path, n: int, step: int = 5) -> Path:
    for r in range(n):
        blob = shard.encode(f"rank {r}".encode() * 50, job_id="job-m", step=step, rank=r, kek=KEK)
        shard.atomic_write(manifest.step_dir(root, step) / manifest.shard_name(r), blob)
    manifest.commit(root, "job-m", step, n)
    return manifest.step_dir(root, step)


def test_manifest_commit_latest_and_verification(tmp_path: Path) -> None:
    assert manifest.latest(tmp_path) is None
    _write(tmp_path, 2, step=5)
    d = _write(tmp_path, 2, step=10)
    (manifest.step_dir(tmp_path, 15)).mkdir()  # no manifest: an incomplete checkpoint
    assert manifest.latest(tmp_path) == d
    m = manifest.read(d)
    assert (m.step, m.world_size, len(m.shards)) == (10, 2, 2)
    assert not list(d.glob(".*tmp*"))  # atomic writes leave no temp files
    # Truncation, tampering and swapping are caught by the manifest hashes, naming the shard.
    s1 = d / manifest.shard_name(1)
    s1.write_bytes(s1.read_bytes()[:-10])
    with pytest.raises(ChecksumError, match=r"shard-00001\.pfck.*truncated"):
        manifest.read_shard(d, m.shards[1])
    d2 = _write(tmp_path, 2, step=20)
    a, b = d2 / manifest.shard_name(0), d2 / manifest.shard_name(1)
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    m2 = manifest.read(d2)
    with pytest.raises(ChecksumError, match=r"shard-00000\.pfck"):
        manifest.read_shard(d2, m2.shards[0])
