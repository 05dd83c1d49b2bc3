"""Signed digests of the audit chain, kept outside the database (as CloudTrail's digest
files are): what shows that the newest records were deleted, or the whole chain rewritten.

At start-up, every ``DIGEST_EVERY`` records (100), every ``DIGEST_INTERVAL_S`` (60 s) when
the chain grew, and at shutdown, the server writes ``digest-<seq>-<ms>.json``: the
chain's head (``seq``, ``head_hash``, record ``count``), the time, and the previous
digest's signature, signed with Ed25519 (``signature``). The signing key sits in the key
provider, not beside the digests or the database. Each digest is also copied, verbatim,
to a second location (``security/digest_sinks.py``) when one is configured.

``verify_trail`` checks, in order: every digest's signature, over the digests of every
location together (the same name must hold the same bytes everywhere); that each digest
names the previous one's signature, and the first one none (no digest removed from the
middle or the start: deleting every digest beside a running server is seen too); the chain itself
(MACs, links, sequence: modification, deletion, reordering; no unkeyed record where MAC
keys exist); that the chain still holds every signed head with the signed hash
(truncation, rewriting); and that the newest digest signs the chain's last record (or the
``through`` record it was asked about): records newer than every digest are what is left
when the newest records *and* the newest digests were deleted, so they fail unless the
caller allows them (after a crash, up to ``DIGEST_EVERY`` records or 60 s of them).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from podfleet.security.audit import GENESIS_HASH, ChainResult, canonical_json, verify_chain
from podfleet.security.digest_sinks import DigestSink, DirectorySink, SinkError
from podfleet.security.keyring import KeyProvider, MintingKeyProvider
from podfleet.security.pubkeys import public_key_hex

log = logging.getLogger("podfleet.audit")
DIGEST_VERSION = 1
SIGNING_KEY = "audit-signing"
DIGEST_EVERY = 100  # records between digests, at most (PODFLEET_AUDIT_DIGEST_EVERY)
DIGEST_INTERVAL_S = 60.0  # and a digest at least this often while the chain grows
POLL_S = 0.25  # how often the writer looks at the chain's head (an indexed read)


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
    name: str  # digest-<seq>-<ms>.json
    seq: int
    head_hash: str
    count: int
    time: float
    prev_signature: str | None
    signature: str
    raw: bytes  # the file as written: copied verbatim to every location


def _payload(seq: int, head_hash: str, count: int, at: float, prev_signature: str | None,
             public_key: str) -> dict[str, Any]:
    return {"version": DIGEST_VERSION, "seq": seq, "head_hash": head_hash, "count": count, "time": at,
            "prev_signature": prev_signature, "public_key": public_key}


def sign_digest(head: tuple[int, str], key: Ed25519PrivateKey, *, at: float | None = None,
                prev: Digest | None = None) -> Digest:
    """The signed digest of the chain's ``head`` (seq, hash), following ``prev``."""
    at = time.time() if at is None else at
    seq, head_hash = head
    payload = _payload(seq, head_hash, seq, at, prev.signature if prev else None, public_key_hex(key.public_key()))
    sig = base64.b64encode(key.sign(canonical_json(payload).encode())).decode()
    raw = json.dumps({"payload": payload, "signature": sig}, indent=1).encode()
    return Digest(f"digest-{seq:012d}-{int(at * 1000):015d}.json", seq, head_hash, seq, at,
                  payload["prev_signature"], sig, raw)


def write_digest(head: tuple[int, str], directory: Path, key: Ed25519PrivateKey, *, at: float | None = None,
                 prev: Digest | None = None) -> Digest:
    """Sign the chain's ``head`` after ``prev`` (default: the newest digest there) into ``directory``."""
    prev = prev if prev is not None else newest(directory)
    d = sign_digest(head, key, at=at, prev=prev)
    DirectorySink(directory).put(d.name, d.raw)  # SinkError when the directory cannot be written
    return d


def parse_digest(name: str, data: bytes) -> Digest:
    """A digest from its file (ValueError, KeyError or TypeError when malformed)."""
    doc = json.loads(data)
    p = doc["payload"]
    return Digest(name, int(p["seq"]), str(p["head_hash"]), int(p["count"]), float(p["time"]),
                  p.get("prev_signature"), str(doc["signature"]), data)


def newest(directory: Path) -> Digest | None:
    sink = DirectorySink(directory)
    names = sink.names()
    return parse_digest(names[-1], sink.get(names[-1])) if names else None


def _newest_of(sinks: Sequence[DigestSink]) -> Digest | None:
    """The newest digest of any reachable location (an unreachable one is skipped)."""
    best: Digest | None = None
    for sink in sinks:
        try:
            names = sink.names()
            if names and (best is None or names[-1] > best.name):
                best = parse_digest(names[-1], sink.get(names[-1]))
        except (SinkError, ValueError, KeyError, TypeError) as exc:
            log.warning("audit digests at %s not read: %s", sink.where, exc)
    return best


def _gather(sources: Sequence[DigestSink]) -> tuple[list[tuple[str, bytes]], str | None]:
    """Every digest of every location, by name; a name whose bytes differ between two
    locations is a problem (one of them was replaced)."""
    merged: dict[str, tuple[bytes, str]] = {}
    for sink in sources:
        try:
            for name in sink.names():
                data = sink.get(name)
                if name in merged and merged[name][0] != data:
                    return [], f"digest {name} differs between {merged[name][1]} and {sink.where} (one was replaced)"
                merged.setdefault(name, (data, sink.where))
        except SinkError as exc:
            return [], f"digests unreadable: {exc}"
    return [(name, merged[name][0]) for name in sorted(merged)], None


def load_digests(sources: Path | Sequence[DigestSink], public_key: Ed25519PublicKey) -> tuple[list[Digest], str | None]:
    """The digests in order (from a directory, or several locations together), each
    signature checked; or the first problem found."""
    found, problem = _gather([DirectorySink(sources)] if isinstance(sources, Path) else sources)
    if problem:
        return [], problem
    signed: list[Digest] = []
    for name, data in found:
        try:
            doc = json.loads(data)
            d = parse_digest(name, data)
            sig = base64.b64decode(doc["signature"], validate=True)
            public_key.verify(sig, canonical_json(doc["payload"]).encode())
        except InvalidSignature:
            return [], f"digest {name}: signature does not verify (forged, altered, or another key)"
        except (ValueError, KeyError, TypeError) as exc:
            return [], f"digest {name}: unreadable ({type(exc).__name__})"
        signed.append(d)
    return _linked(signed)


def _linked(signed: list[Digest]) -> tuple[list[Digest], str | None]:
    """The digests in the order they were signed, by their links (each names the one
    before it; the first names none): a clock that stepped back cannot reorder them, and
    a digest signing fewer records than the one before it is seen as such."""
    if not signed:
        return [], None
    after: dict[str | None, list[Digest]] = {}
    for d in signed:
        after.setdefault(d.prev_signature, []).append(d)
    roots = after.get(None, [])
    if not roots:
        first = min(signed, key=lambda d: (d.time, d.name))
        return [], f"digest {first.name}: follows a digest that is in no location (older digests were removed)"
    if len(roots) > 1:
        return [], (f"digests {roots[0].name} and {roots[1].name} both start a chain of digests (older digests "
                    "were removed, or two servers wrote here)")
    out = [roots[0]]
    while nxt := after.get(out[-1].signature):
        if len(nxt) > 1:
            return out, f"digests {nxt[0].name} and {nxt[1].name} both follow {out[-1].name} (one was replaced)"
        d = nxt[0]
        if d.seq < out[-1].seq:
            return out, f"digest {d.name}: signs fewer records ({d.seq}) than {out[-1].name} ({out[-1].seq})"
        out.append(d)
    if len(out) < len(signed):
        linked = {d.name for d in out}
        stray = min((d for d in signed if d.name not in linked), key=lambda d: (d.time, d.name))
        return out, f"digest {stray.name}: does not follow {out[-1].name} or any digest here (a digest was removed)"
    return out, None


def verify_trail(records: Iterable[Any], keys: Mapping[str, bytes], directory: Path,
                 public_key: Ed25519PublicKey, *, copies: Sequence[DigestSink] = (), through: int | None = None,
                 allow_missing: bool = False) -> ChainResult:
    """The chain and its signed digests together (see the module docstring). ``copies``:
    the second locations; ``through``: verify records up to this seq only (the head just
    signed; newer ones arrived meanwhile); ``allow_missing``: accept records newer than
    every digest (or no digest at all). Where retention archived and pruned the oldest
    records, the chain starts after the newest signed archive manifest (``directory/archives``)."""
    from podfleet.security.retention import load_manifests

    where = ", ".join([str(directory), *(c.where for c in copies)])
    digests, problem = load_digests([DirectorySink(directory), *copies], public_key)
    if problem:
        return ChainResult(False, None, problem, 0)
    archives, problem = load_manifests(directory / "archives", public_key)
    if problem:
        return ChainResult(False, None, problem, 0)
    it: Iterator[Any] = iter(records)
    if through is not None:
        it = itertools.takewhile(lambda r: r.seq <= through, it)
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
                               f"records {last[0] + 1}-{d.seq} were deleted: digest {d.name} signed a chain "
                               f"of {d.seq} records, the store holds {last[0]}", chain.checked)
        if seen.get(d.seq) != d.head_hash:
            return ChainResult(False, d.seq,
                               f"record {d.seq}: differs from the signed digest {d.name} "
                               "(the chain was rewritten)", chain.checked)
    n = chain.checked
    if not allow_missing and not digests:
        return ChainResult(False, None, f"no signed digest in {where}: nothing shows the newest records (or all "
                           "of them) were not deleted; point --digests at the digests, or pass "
                           "--allow-missing-digests to check the chain alone", n)
    if not allow_missing and digests[-1].seq < last[0]:
        return ChainResult(False, digests[-1].seq + 1,
                           f"records {digests[-1].seq + 1}-{last[0]} are newer than every signed digest (the newest, "
                           f"{digests[-1].name}, signs record {digests[-1].seq}): newer digests were deleted with "
                           "the newest records, or the server crashed before signing them (then pass "
                           "--allow-missing-digests)", n)
    signed = f"{len(digests)} signed digest{'s' * (len(digests) != 1)}, newest at record {digests[-1].seq}" \
        if digests else "no signed digests (allowed)"
    if digests and digests[-1].seq < last[0]:
        signed += f"; records {digests[-1].seq + 1}-{last[0]} not yet signed (allowed)"
    kept = f"; records 1-{start_seq - 1} archived" if start_seq > 1 else ""
    return ChainResult(True, None, f"audit chain intact: {n} record{'s' * (n != 1)}; {signed}{kept}", n)


class DigestWriter:
    """Writes a digest at ``start`` (start-up), whenever ``every_records`` records were
    appended since the last one, every ``interval_s`` while the chain grows, and at
    ``stop``; each one also to every ``copies`` location (one that fails is retried with
    the next digest). Thread-safe: an online verify asks it for a digest of the head."""

    def __init__(self, head: Callable[[], tuple[int, str]], directory: Path, key: Ed25519PrivateKey,
                 interval_s: float = DIGEST_INTERVAL_S, periodic: Callable[[], object] | None = None, *,
                 every_records: int = DIGEST_EVERY, copies: Sequence[DigestSink] = (), poll_s: float = POLL_S) -> None:
        self.head, self.directory, self.key, self.interval_s = head, directory, key, interval_s
        self.every_records, self.copies, self.poll_s = every_records, tuple(copies), min(poll_s, interval_s)
        self.periodic = periodic  # retention, run every interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        # Follow the newest digest of any location: one lost beside the database (or
        # deleted there) is still followed, so the chain of digests stays whole.
        self._last: Digest | None = _newest_of([DirectorySink(directory), *self.copies])
        self._last_at = time.monotonic()
        self._pending: list[tuple[DigestSink, Digest]] = []  # copies not stored yet

    @property
    def last(self) -> Digest | None:
        return self._last

    def write(self, *, force: bool = False) -> Digest | None:
        """Sign the current head (unless the newest digest already signs it)."""
        with self._lock:
            h = self.head()
            if not force and self._last is not None and (self._last.seq, self._last.head_hash) == h:
                self._copy()
                return None
            self._last = write_digest(h, self.directory, self.key, prev=self._last)
            self._last_at = time.monotonic()
            self._pending.extend((sink, self._last) for sink in self.copies)
            self._copy()
            return self._last

    def current(self) -> Digest:
        """A digest that signs the chain's head as of now (written if need be)."""
        with self._lock:
            last = self.write() or self._last or self.write(force=True)
            if last is None:  # write(force=True) always signs; kept for the type checker
                raise SinkError(f"no digest written to {self.directory}")
            return last

    def _copy(self) -> None:
        left = []
        for sink, d in self._pending:
            try:
                sink.put(d.name, d.raw)
            except SinkError as exc:
                log.warning("audit digest %s not copied yet: %s", d.name, exc)
                left.append((sink, d))
        self._pending = left

    def due(self) -> bool:
        seq, head_hash = self.head()
        last_seq, last_hash = (self._last.seq, self._last.head_hash) if self._last else (0, GENESIS_HASH)
        grown = (seq, head_hash) != (last_seq, last_hash)
        return grown and (seq - last_seq >= self.every_records or time.monotonic() - self._last_at >= self.interval_s)

    def start(self) -> None:
        self.write(force=True)  # the start-up digest: signs what a crash left unsigned
        self._thread = threading.Thread(target=self._run, name="audit-digests", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_periodic = time.monotonic() + self.interval_s
        while not self._stop.wait(self.poll_s):
            if self.periodic is not None and time.monotonic() >= next_periodic:
                next_periodic = time.monotonic() + self.interval_s
                try:
                    self.periodic()
                except Exception:  # a failed archive run must not stop the digests; it retries
                    log.exception("audit retention failed")
            try:
                if self.due():
                    self.write()
            except Exception:  # a full disk or a lost database: log, and try again next poll
                log.exception("audit digest failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.write()


@dataclass(frozen=True)
class AuditTrail:
    """What the server verifies its chain against: its digest directory, the second
    locations, the public half of the signing key, and its writer (an online verify
    first signs the head it is about to check)."""

    directory: Path
    public_key: Ed25519PublicKey
    copies: tuple[DigestSink, ...] = ()
    writer: DigestWriter | None = None

    def verify(self, records: Iterable[Any], keys: Mapping[str, bytes], *,
               allow_missing: bool = False) -> ChainResult:
        through = self.writer.current().seq if self.writer is not None else None
        return verify_trail(records, keys, self.directory, self.public_key, copies=self.copies, through=through,
                            allow_missing=allow_missing)
