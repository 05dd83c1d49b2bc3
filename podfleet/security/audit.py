"""The audit chain's MAC and its verification (pure; shared by store, API and CLI).

Record ``n`` carries ``prev_hash`` = record ``n-1``'s ``hash`` (``GENESIS_HASH`` for the
first) and ``hash`` = HMAC-SHA256, under the MAC key named by its ``key_id``, of the
canonical JSON of its fields (``canonical_json``: sorted keys, no spaces, UTF-8, no NaN).
Changing any field of any record, or removing or moving one, breaks the chain at that
record or the one after it; and because the MAC needs the key, someone who edits the
database cannot recompute the chain after an edit. Records written before the chain was
keyed (``key_id`` None) carry a plain SHA-256; none may follow a keyed one (a downgrade),
and where the verifier holds MAC keys none is accepted at all: a chain recomputed as plain
SHA-256 from its first record would otherwise verify (archive an older, unkeyed trail with
retention before keying it).

What the chain alone cannot show, that its newest records were deleted, the signed
digests show (``security/digests.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from podfleet.errors import InvalidInputError

GENESIS_HASH = "0" * 64
HASHED_FIELDS = ("seq", "time", "actor", "action", "target", "result", "detail", "prev_hash")


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, separators (",", ":"), non-ASCII kept, no NaN."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"audit detail is not plain JSON: {exc}", field="detail") from None


def audit_hash(
    *,
    seq: int,
    time: float,
    actor: str,
    action: str,
    target: str,
    result: str,
    detail: dict[str, Any],
    prev_hash: str,
    key_id: str | None = None,
    key: bytes | None = None,
) -> str:
    """HMAC-SHA256 under ``key`` (whose id is part of what is MACed), or the plain SHA-256
    of a record from before the chain was keyed (``key`` None)."""
    if not math.isfinite(time):
        raise InvalidInputError(f"audit time must be finite, got {time}", field="time")
    payload = {
        "seq": seq,
        "time": float(time),
        "actor": actor,
        "action": action,
        "target": target,
        "result": result,
        "detail": detail,
        "prev_hash": prev_hash,
    }
    if key is None:
        return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()
    payload["key_id"] = key_id
    return hmac.new(key, canonical_json(payload).encode("utf-8"), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class ChainResult:
    ok: bool
    first_bad_seq: int | None
    message: str
    checked: int

    def as_tuple(self) -> tuple[bool, int | None, str]:
        return (self.ok, self.first_bad_seq, self.message)


def verify_chain(records: Iterable[Any], keys: Mapping[str, bytes] | None = None, *,
                 start_seq: int = 1, start_prev_hash: str = GENESIS_HASH) -> ChainResult:
    """Walk records in seq order; name the first one that breaks the chain and why.

    ``records`` are objects with the AuditRecord attributes (duck-typed so the CLI can
    verify an exported list without the store). ``keys``: MAC key id -> key. A chain
    whose older records were archived and pruned starts at ``start_seq`` with the
    ``prev_hash`` its archive ended on.
    """
    keys = keys or {}
    expected_seq = start_seq
    prev_hash = start_prev_hash
    checked = 0
    keyed = False
    for rec in records:
        if rec.seq != expected_seq:
            why = "missing" if rec.seq > expected_seq else "duplicated or out of order"
            return ChainResult(
                False, rec.seq,
                f"record {rec.seq}: gap in sequence, expected {expected_seq} "
                f"(record {expected_seq} {why})",
                checked,
            )
        if rec.prev_hash != prev_hash:
            return ChainResult(
                False, rec.seq,
                f"record {rec.seq}: broken link, prev_hash {rec.prev_hash[:12]}... does not "
                f"match the hash of record {rec.seq - 1} ({prev_hash[:12]}...)",
                checked,
            )
        key_id = getattr(rec, "key_id", None)
        if key_id is None and keyed:
            return ChainResult(False, rec.seq, f"record {rec.seq}: not keyed, after keyed records "
                               "(rewritten without the MAC key)", checked)
        if key_id is None and keys:
            return ChainResult(False, rec.seq, f"record {rec.seq}: not keyed, in a trail with MAC keys "
                               "(recomputed as plain SHA-256 without the key)", checked)
        key = None
        if key_id is not None:
            keyed = True
            key = keys.get(key_id)
            if key is None:
                return ChainResult(False, rec.seq, f"record {rec.seq}: MAC key {key_id!r} is not available, "
                                   "so the record cannot be verified (point verify at the key directory)",
                                   checked)
        try:
            actual = audit_hash(
                seq=rec.seq, time=rec.time, actor=rec.actor, action=rec.action,
                target=rec.target, result=rec.result, detail=rec.detail, prev_hash=rec.prev_hash,
                key_id=key_id, key=key,
            )
        except InvalidInputError as exc:
            return ChainResult(False, rec.seq, f"record {rec.seq}: {exc.message}", checked)
        if not hmac.compare_digest(actual, rec.hash):
            return ChainResult(
                False, rec.seq,
                f"record {rec.seq}: {'MAC' if key else 'hash'} mismatch, its fields were changed after it was "
                f"written (stored {rec.hash[:12]}..., computed {actual[:12]}...)",
                checked,
            )
        prev_hash = rec.hash
        expected_seq += 1
        checked += 1
    n = checked
    return ChainResult(True, None, f"audit chain intact: {n} record{'s' * (n != 1)}", checked)
