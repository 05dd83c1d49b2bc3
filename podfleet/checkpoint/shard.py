"""One checkpoint shard on disk: a self-describing, authenticated file.

Layout: ``MAGIC`` | 4-byte big-endian header length | header JSON | body.
The body is AES-256-GCM ciphertext under a random per-shard data key (wrapped by
the KEK in the header), or plaintext when encryption is off. The associated data
binds the body to the job id, step, shard rank and the exact header bytes, so a
shard copied from another job, step or rank fails to authenticate even with the
right key. Writes are atomic: temp file, fsync, rename, fsync of the directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import struct
from pathlib import Path

from podfleet.checkpoint import keys
from podfleet.errors import ChecksumError

MAGIC = b"PFCKPT1\n"
_PLAIN_KEYS = {"format", "job_id", "step", "rank", "encrypted", "sha256"}
_ENC_KEYS = {"format", "job_id", "step", "rank", "encrypted", "cipher", "kek_id", "wrapped_key", "nonce"}
_LEN = struct.Struct(">I")


def _aad(job_id: str, step: int, rank: int, header: bytes) -> bytes:
    ident = json.dumps({"job_id": job_id, "step": step, "rank": rank}, sort_keys=True).encode()
    return b"podfleet-shard-v1|" + ident + b"|" + header


def _plain_digest(job_id: str, step: int, rank: int, payload: bytes) -> str:
    # Plain shards still bind their identity, so a swapped plain shard is caught too.
    return hashlib.sha256(_aad(job_id, step, rank, b"plain") + payload).hexdigest()


def encode(payload: bytes, *, job_id: str, step: int, rank: int, kek: bytes | None) -> bytes:
    header_obj: dict[str, object] = {"format": 1, "job_id": job_id, "step": step, "rank": rank}
    if kek is None:
        header_obj |= {"encrypted": False, "sha256": _plain_digest(job_id, step, rank, payload)}
        header = json.dumps(header_obj, sort_keys=True).encode()
        body = payload
    else:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        data_key = AESGCM.generate_key(bit_length=256)
        nonce = secrets.token_bytes(12)
        header_obj |= {
            "encrypted": True,
            "cipher": "AES-256-GCM",
            "kek_id": keys.key_id(kek),
            "wrapped_key": keys.wrap(kek, data_key).hex(),
            "nonce": nonce.hex(),
        }
        header = json.dumps(header_obj, sort_keys=True).encode()
        body = AESGCM(data_key).encrypt(nonce, payload, _aad(job_id, step, rank, header))
    return MAGIC + _LEN.pack(len(header)) + header + body


def decode(blob: bytes, *, job_id: str, step: int, rank: int, kek: bytes | None, name: str) -> bytes:
    """Verify and return the payload; ChecksumError naming the shard on any mismatch."""
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + _LEN.size:
        raise ChecksumError(f"checkpoint shard {name}: not a podfleet shard or truncated")
    (hlen,) = _LEN.unpack_from(blob, len(MAGIC))
    start = len(MAGIC) + _LEN.size
    header = blob[start : start + hlen]
    body = blob[start + hlen :]
    try:
        h = json.loads(header)
        if not isinstance(h, dict):
            raise ValueError("header is not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ChecksumError(f"checkpoint shard {name}: header unreadable (truncated or tampered)") from exc
    if h.get("format") != 1 or set(h) not in (_PLAIN_KEYS, _ENC_KEYS) or h["encrypted"] is not (set(h) == _ENC_KEYS):
        raise ChecksumError(f"checkpoint shard {name}: header fields malformed (tampered)")
    claimed = (h.get("job_id"), h.get("step"), h.get("rank"))
    if claimed != (job_id, step, rank):
        raise ChecksumError(
            f"checkpoint shard {name}: holds job {claimed[0]} step {claimed[1]} rank {claimed[2]}, "
            f"expected job {job_id} step {step} rank {rank} (swapped or misplaced shard)"
        )
    if not h.get("encrypted"):
        if _plain_digest(job_id, step, rank, body) != h["sha256"]:
            raise ChecksumError(f"checkpoint shard {name}: content hash mismatch (tampered or truncated)")
        return body
    if kek is None:
        raise ChecksumError(f"checkpoint shard {name}: is encrypted and no key was given", field="key")
    if h.get("kek_id") != keys.key_id(kek):
        raise ChecksumError(
            f"checkpoint shard {name}: encrypted under key {h.get('kek_id')}, "
            f"given key {keys.key_id(kek)} (wrong key)",
            field="key",
        )
    try:
        wrapped, nonce = bytes.fromhex(h["wrapped_key"]), bytes.fromhex(h["nonce"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ChecksumError(f"checkpoint shard {name}: header fields malformed (tampered)") from exc
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    data_key = keys.unwrap(kek, wrapped, shard=name)
    try:
        return AESGCM(data_key).decrypt(nonce, body, _aad(job_id, step, rank, header))
    except (InvalidTag, ValueError) as exc:
        raise ChecksumError(
            f"checkpoint shard {name}: authentication failed (tampered, truncated or swapped)"
        ) from exc


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
