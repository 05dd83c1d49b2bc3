"""One checkpoint shard on disk: a self-describing, authenticated file.

Layout: ``MAGIC`` | 4-byte big-endian header length | header JSON | body.
The body is AES-256-GCM ciphertext under a random per-shard data key (wrapped by
the KEK in the header), or plaintext when encryption is off. The associated data
binds the body to the job id, step, shard rank and the header, so a shard copied from
another job, step or rank fails to authenticate even with the right key. Writes are
atomic: temp file, fsync, rename, fsync of the directory.

Format 2 (written now) leaves the wrapped data key and its KEK's id out of the
associated data, so ``rewrap`` can move a shard to a new KEK version by rewriting its
header alone: the body, and the data key, stay as they are. Format 1 shards (which bind
the wrap too) still decrypt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import struct
from pathlib import Path
from typing import Any

from podfleet.checkpoint import keys
from podfleet.errors import ChecksumError

MAGIC = b"PFCKPT1\n"
_PLAIN_KEYS = {"format", "job_id", "step", "rank", "encrypted", "sha256"}
_ENC_KEYS = {"format", "job_id", "step", "rank", "encrypted", "cipher", "kek_id", "wrapped_key", "nonce"}
_WRAP_KEYS = ("kek_id", "wrapped_key")
ENC_FORMAT = 2
_LEN = struct.Struct(">I")


def _aad(job_id: str, step: int, rank: int, header: bytes) -> bytes:
    ident = json.dumps({"job_id": job_id, "step": step, "rank": rank}, sort_keys=True).encode()
    return b"podfleet-shard-v1|" + ident + b"|" + header


def _plain_digest(job_id: str, step: int, rank: int, payload: bytes) -> str:
    # Plain shards still bind their identity, so a swapped plain shard is caught too.
    return hashlib.sha256(_aad(job_id, step, rank, b"plain") + payload).hexdigest()


def _bound_header(h: dict[str, object], header: bytes) -> bytes:
    """What the associated data binds: format 1 the header bytes, format 2 the header
    without the wrap (so a rewrap leaves the body valid)."""
    if h.get("format") == 1:
        return header
    return json.dumps({k: v for k, v in h.items() if k not in _WRAP_KEYS}, sort_keys=True).encode()


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
            "format": ENC_FORMAT,
            "encrypted": True,
            "cipher": "AES-256-GCM",
            "kek_id": keys.key_id(kek),
            "wrapped_key": keys.wrap(kek, data_key).hex(),
            "nonce": nonce.hex(),
        }
        header = json.dumps(header_obj, sort_keys=True).encode()
        body = AESGCM(data_key).encrypt(nonce, payload, _aad(job_id, step, rank, _bound_header(header_obj, header)))
    return MAGIC + _LEN.pack(len(header)) + header + body


def split(blob: bytes, *, name: str) -> tuple[dict[str, Any], bytes, bytes]:
    """(header fields, header bytes, body) of a shard, its header checked for shape."""
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
    fmt_ok = h.get("format") == 1 or (h.get("format") == ENC_FORMAT and h.get("encrypted") is True)
    if not fmt_ok or set(h) not in (_PLAIN_KEYS, _ENC_KEYS) or h["encrypted"] is not (set(h) == _ENC_KEYS):
        raise ChecksumError(f"checkpoint shard {name}: header fields malformed (tampered)")
    return h, header, body


def rewrap(blob: bytes, *, name: str, old_kek: bytes, new_kek: bytes) -> bytes:
    """The same shard with its data key wrapped by ``new_kek``: only the header changes.
    Format 1 shards bind their wrap into the body's authentication and cannot be rewrapped."""
    h, _, body = split(blob, name=name)
    if not h["encrypted"]:
        raise ChecksumError(f"checkpoint shard {name}: is not encrypted; nothing to rewrap")
    if h["format"] != ENC_FORMAT:
        raise ChecksumError(f"checkpoint shard {name}: format {h['format']} binds its key wrap; it cannot be "
                            "rewrapped (it still decrypts with its key version)")
    if h.get("kek_id") != keys.key_id(old_kek):
        raise ChecksumError(f"checkpoint shard {name}: is wrapped under {h.get('kek_id')}, not {keys.key_id(old_kek)}",
                            field="key")
    data_key = keys.unwrap(old_kek, bytes.fromhex(str(h["wrapped_key"])), shard=name)
    h = {**h, "kek_id": keys.key_id(new_kek), "wrapped_key": keys.wrap(new_kek, data_key).hex()}
    header = json.dumps(h, sort_keys=True).encode()
    return MAGIC + _LEN.pack(len(header)) + header + body


def decode(blob: bytes, *, job_id: str, step: int, rank: int, kek: bytes | None, name: str) -> bytes:
    """Verify and return the payload; ChecksumError naming the shard on any mismatch.
    ``kek`` may be a ``keys.KeyRing``: the version the shard names is used, a retired
    one refused."""
    h, header, body = split(blob, name=name)
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
    if isinstance(kek, keys.KeyRing):
        kek = kek.for_id(str(h.get("kek_id")), shard=name)
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
        return AESGCM(data_key).decrypt(nonce, body, _aad(job_id, step, rank, _bound_header(h, header)))
    except (InvalidTag, ValueError) as exc:
        raise ChecksumError(
            f"checkpoint shard {name}: authentication failed (tampered, truncated or swapped)"
        ) from exc


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = f".{path.name}.tmp-{os.getpid()}"
    # The directory may belong to a worker's (unprivileged) user while the server writes a
    # manifest into it: never follow or reuse what sits at the temporary name (a planted
    # link would have the server overwrite the file it points at), and work through one
    # descriptor of the directory, never followed either (a directory swapped for a link
    # after the caller checked it would have the server write elsewhere).
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)
    finally:
        os.close(dfd)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
