"""Audit retention: records older than the retention period (90 days by default) are
archived, compressed and encrypted, beside the signed digests, then pruned from the
database; the chain stays verifiable from the archive's signed manifest on.

One segment = the records after the last archive, up to the newest one older than the
cut-off. Its archive is ``audit-<first>-<through>.jsonl.gz.enc`` (canonical JSON lines,
gzip, AES-256-GCM under the ``audit-archive`` key, the segment's range as associated
data) and ``archive-<through>.json`` (the range, the last record's hash, the archive's
SHA-256), signed with the digest key. Only then are the records deleted: a crash in
between leaves them in place, and the next run archives them again.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from podfleet.errors import ChecksumError
from podfleet.security.audit import canonical_json
from podfleet.security.files import private_dir, write_private
from podfleet.security.pubkeys import public_key_hex


class AuditRow(Protocol):
    """One record of the audit chain as the store keeps it (``store.records.AuditRecord``)."""

    @property
    def seq(self) -> int: ...

    @property
    def time(self) -> float: ...

    @property
    def hash(self) -> str: ...


class ArchivableStore(Protocol):
    """What retention asks of the store, declared here: the store imports the chain's
    hashing from ``security.audit``, so security never imports the store back."""

    def audit_archived_through(self) -> tuple[int, str]: ...

    def iter_audit(self) -> Iterator[AuditRow]: ...

    def prune_audit(self, *, through_seq: int, through_hash: str, location: str, sha256: str,
                    created_at: float) -> int: ...

ARCHIVE_KEY = "audit-archive"
DAY_S = 86_400.0


@dataclass(frozen=True)
class ArchiveManifest:
    first_seq: int
    through_seq: int
    through_hash: str
    file: str
    sha256: str
    time: float


def _aad(first: int, through: int) -> bytes:
    return f"podfleet-audit-archive|{first}|{through}".encode()


def archive_old(store: ArchivableStore, directory: Path, *, key: bytes, signer: Ed25519PrivateKey, now: float,
                retention_s: float = 90 * DAY_S) -> ArchiveManifest | None:
    """Archive and prune the records older than ``retention_s``; None when there are none."""
    cutoff = now - retention_s
    start, _ = store.audit_archived_through()
    segment = []
    for rec in store.iter_audit():
        if rec.time >= cutoff:
            break
        segment.append(rec)
    if not segment:
        return None
    first, last = segment[0].seq, segment[-1]
    lines = b"".join(canonical_json(r.__dict__).encode() + b"\n" for r in segment)
    nonce = os.urandom(12)
    blob = nonce + AESGCM(key).encrypt(nonce, gzip.compress(lines), _aad(first, last.seq))
    private_dir(directory)
    name = f"audit-{first:012d}-{last.seq:012d}.jsonl.gz.enc"
    write_private(directory / name, blob)
    m = ArchiveManifest(first, last.seq, last.hash, name, hashlib.sha256(blob).hexdigest(), now)
    payload = {**m.__dict__, "public_key": public_key_hex(signer.public_key())}
    sig = base64.b64encode(signer.sign(canonical_json(payload).encode())).decode()
    write_private(directory / f"archive-{last.seq:012d}.json",
                  json.dumps({"payload": payload, "signature": sig}, indent=1).encode())
    assert first == start + 1, (first, start)  # iter_audit starts right after the last archive
    store.prune_audit(through_seq=last.seq, through_hash=last.hash, location=str(directory / name),
                      sha256=m.sha256, created_at=now)
    return m


def load_manifests(directory: Path, public_key: Ed25519PublicKey) -> tuple[list[ArchiveManifest], str | None]:
    """The signed archive manifests in order, or the first problem."""
    out: list[ArchiveManifest] = []
    for path in sorted(directory.glob("archive-*.json")) if directory.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
            public_key.verify(base64.b64decode(doc["signature"], validate=True),
                              canonical_json(doc["payload"]).encode())
            p = doc["payload"]
            m = ArchiveManifest(int(p["first_seq"]), int(p["through_seq"]), str(p["through_hash"]), str(p["file"]),
                                str(p["sha256"]), float(p["time"]))
        except InvalidSignature:
            return out, f"archive manifest {path.name}: signature does not verify (forged or altered)"
        except (ValueError, KeyError, TypeError, OSError) as exc:
            return out, f"archive manifest {path.name}: unreadable ({type(exc).__name__})"
        if out and m.first_seq != out[-1].through_seq + 1:
            return out, f"archive manifest {path.name}: does not follow {out[-1].file} (a segment is missing)"
        out.append(m)
    return out, None


def read_archive(directory: Path, m: ArchiveManifest, key: bytes) -> list[dict[str, Any]]:
    """The records of one archived segment, its SHA-256 and encryption checked."""
    blob = (directory / m.file).read_bytes()
    if hashlib.sha256(blob).hexdigest() != m.sha256:
        raise ChecksumError(f"audit archive {m.file}: SHA-256 differs from its signed manifest")
    lines = gzip.decompress(AESGCM(key).decrypt(blob[:12], blob[12:], _aad(m.first_seq, m.through_seq)))
    return [json.loads(ln) for ln in lines.splitlines()]


def records_of(rows: Iterable[dict[str, Any]]) -> list[Any]:
    """Archived rows as objects ``verify_chain`` takes."""
    from types import SimpleNamespace

    return [SimpleNamespace(**r) for r in rows]
