"""Signed digests of the audit chain, kept outside the database (as CloudTrail's digest
files are): what shows that the newest records were deleted, or the whole chain rewritten.

Every few minutes, and at shutdown, the server writes ``digest-<seq>-<ms>.json``: the
chain's head (``seq``, ``head_hash``, record ``count``), the time, and the previous
digest's signature, signed with Ed25519 (``signature``). The signing key sits in the key
provider, not beside the digests or the database.

``verify_trail`` checks, in order: every digest's signature; that each digest names the
previous one's signature (no digest removed from the middle); the chain itself (MACs,
links, sequence: modification, deletion, reordering); and that the chain still holds
every signed head with the signed hash (truncation, rewriting).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from podfleet.security.audit import GENESIS_HASH, ChainResult, canonical_json, verify_chain
from podfleet.security.files import private_dir, write_private
from podfleet.security.keyring import KeyProvider, MintingKeyProvider
from podfleet.security.pubkeys import public_key_hex

log = logging.getLogger("podfleet.audit")
DIGEST_VERSION = 1
SIGNING_KEY = "audit-signing"


def signing_key(provider: KeyProvider, *, create: bool) -> Ed25519PrivateKey:
    """The Ed25519 key that signs digests (its 32-byte seed is a provider key)."""
    seed = provider.get(SIGNING_KEY)
    if seed is None:
        if not (create and isinstance(provider, MintingKeyProvider)):
            raise ValueError(f"no {SIGNING_KEY} key in the key provider")
        seed = provider.create(SIGNING_KEY)
    return Ed25519PrivateKey.from_private_bytes(seed)


def default_digests_dir(store_url: str) -> Path | None:
    """Beside a SQLite file (``<db>.digests``); under ``~/.podfleet/audit-digests`` for a
    server database; None for a store in memory (nothing outlives it to check)."""
    prefix = "sqlite:///"
    if store_url.startswith(prefix):
        path = store_url[len(prefix):].split("?", 1)[0]
        return None if path in ("", ":memory:") else Path(path + ".digests")
    if store_url.startswith(("sqlite", "memory")):
        return None
    return Path.home() / ".podfleet" / "audit-digests" / hashlib.sha256(store_url.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Digest:
    path: Path
    seq: int
    head_hash: str
    count: int
    time: float
    prev_signature: str | None
    signature: str


def _payload(seq: int, head_hash: str, count: int, at: float, prev_signature: str | None,
             public_key: str) -> dict[str, Any]:
    return {"version": DIGEST_VERSION, "seq": seq, "head_hash": head_hash, "count": count, "time": at,
            "prev_signature": prev_signature, "public_key": public_key}


def write_digest(head: tuple[int, str], directory: Path, key: Ed25519PrivateKey, *, at: float | None = None,
                 prev: Digest | None = None) -> Digest:
    """Sign the chain's ``head`` (seq, hash) after ``prev`` (default: the newest digest there)."""
    at = time.time() if at is None else at
    prev = prev if prev is not None else newest(directory)
    seq, head_hash = head
    payload = _payload(seq, head_hash, seq, at, prev.signature if prev else None, public_key_hex(key.public_key()))
    sig = base64.b64encode(key.sign(canonical_json(payload).encode())).decode()
    private_dir(directory)
    path = directory / f"digest-{seq:012d}-{int(at * 1000):015d}.json"
    write_private(path, json.dumps({"payload": payload, "signature": sig}, indent=1).encode())
    return Digest(path, seq, head_hash, seq, at, payload["prev_signature"], sig)


def _files(directory: Path) -> list[Path]:
    return sorted(directory.glob("digest-*.json")) if directory.is_dir() else []


def _read(path: Path) -> Digest:
    doc = json.loads(path.read_text())
    p = doc["payload"]
    return Digest(path, int(p["seq"]), str(p["head_hash"]), int(p["count"]), float(p["time"]),
                  p.get("prev_signature"), str(doc["signature"]))


def newest(directory: Path) -> Digest | None:
    files = _files(directory)
    return _read(files[-1]) if files else None


def load_digests(directory: Path, public_key: Ed25519PublicKey) -> tuple[list[Digest], str | None]:
    """The digests in order, each signature checked; or the first problem found."""
    out: list[Digest] = []
    for path in _files(directory):
        try:
            doc = json.loads(path.read_text())
            d = _read(path)
            sig = base64.b64decode(doc["signature"], validate=True)
            public_key.verify(sig, canonical_json(doc["payload"]).encode())
        except InvalidSignature:
            return out, f"digest {path.name}: signature does not verify (forged, altered, or another key)"
        except (ValueError, KeyError, TypeError, OSError) as exc:
            return out, f"digest {path.name}: unreadable ({type(exc).__name__})"
        if out and d.prev_signature != out[-1].signature:
            return out, f"digest {path.name}: does not follow {out[-1].path.name} (a digest was removed or replaced)"
        if out and d.seq < out[-1].seq:
            return out, f"digest {path.name}: signs fewer records ({d.seq}) than {out[-1].path.name} ({out[-1].seq})"
        out.append(d)
    return out, None


def verify_trail(records: Iterable[Any], keys: Mapping[str, bytes], directory: Path,
                 public_key: Ed25519PublicKey) -> ChainResult:
    """The chain and its signed digests together (see the module docstring). Where
    retention archived and pruned the oldest records, the chain starts after the newest
    signed archive manifest (``directory/archives``)."""
    from podfleet.security.retention import load_manifests

    digests, problem = load_digests(directory, public_key)
    if problem:
        return ChainResult(False, None, problem, 0)
    archives, problem = load_manifests(directory / "archives", public_key)
    if problem:
        return ChainResult(False, None, problem, 0)
    it = iter(records)
    first = next(it, None)
    start_seq, start_prev = 1, GENESIS_HASH
    if archives and (first is None or first.seq != 1):
        start_seq, start_prev = archives[-1].through_seq + 1, archives[-1].through_hash
    wanted = {d.seq for d in digests}
    seen: dict[int, str] = {start_seq - 1: start_prev}
    last = [start_seq - 1]

    def watch() -> Iterator[Any]:
        for rec in itertools.chain([first] if first is not None else [], it):
            if rec.seq in wanted:
                seen[rec.seq] = rec.hash
            last[0] = rec.seq
            yield rec

    chain = verify_chain(watch(), keys, start_seq=start_seq, start_prev_hash=start_prev)
    if not chain.ok:
        return chain
    for d in digests:
        if d.seq < start_seq - 1:
            continue  # its records were archived (their segment is checked by its manifest)
        if d.seq > last[0]:
            return ChainResult(False, last[0] + 1,
                               f"records {last[0] + 1}-{d.seq} were deleted: digest {d.path.name} signed a chain "
                               f"of {d.seq} records, the store holds {last[0]}", chain.checked)
        if seen.get(d.seq) != d.head_hash:
            return ChainResult(False, d.seq,
                               f"record {d.seq}: differs from the signed digest {d.path.name} "
                               "(the chain was rewritten)", chain.checked)
    n = chain.checked
    signed = f"{len(digests)} signed digest{'s' * (len(digests) != 1)}, newest at record {digests[-1].seq}" \
        if digests else "no signed digests yet"
    kept = f"; records 1-{start_seq - 1} archived" if start_seq > 1 else ""
    return ChainResult(True, None, f"audit chain intact: {n} record{'s' * (n != 1)}; {signed}{kept}", n)


class DigestWriter:
    """Writes a digest every ``interval_s`` when the chain has grown, and one at ``stop``."""

    def __init__(self, head: Callable[[], tuple[int, str]], directory: Path, key: Ed25519PrivateKey,
                 interval_s: float = 300.0, periodic: Callable[[], object] | None = None) -> None:
        self.head, self.directory, self.key, self.interval_s = head, directory, key, interval_s
        self.periodic = periodic  # retention, run before each digest
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: Digest | None = newest(directory)

    def write(self, *, force: bool = False) -> Digest | None:
        h = self.head()
        if not force and self._last is not None and self._last.seq == h[0] and self._last.head_hash == h[1]:
            return None
        self._last = write_digest(h, self.directory, self.key, prev=self._last)
        return self._last

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="audit-digests", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.periodic is not None:
                try:
                    self.periodic()
                except Exception:  # a failed archive run must not stop the digests; it retries
                    log.exception("audit retention failed")
            self.write()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.write()


@dataclass(frozen=True)
class AuditTrail:
    """What the server verifies its chain against: its digest directory and the public
    half of the signing key."""

    directory: Path
    public_key: Ed25519PublicKey

    def verify(self, records: Iterable[Any], keys: Mapping[str, bytes]) -> ChainResult:
        return verify_trail(records, keys, self.directory, self.public_key)
