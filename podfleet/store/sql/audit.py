"""The audit trail, in SQL (``protocol.AuditStore``): append-only, MAC-chained, gap-free ``seq``.

Appends are serialised: in-process by the store's writer lock, across processes by the
database (SQLite's write lock taken at BEGIN IMMEDIATE; a PostgreSQL advisory lock held to
the end of the transaction). ``seq`` is max+1 read under that lock, not a sequence, so a
rolled-back append leaves no gap.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import delete, insert, select, text

from podfleet.errors import ConflictError
from podfleet.security.audit import GENESIS_HASH, audit_hash, canonical_json, verify_chain
from podfleet.store.common import AuditKeyring, check_limit
from podfleet.store.convert import record_of, row_of
from podfleet.store.models import AuditArchiveRow, AuditEventRow, table_of
from podfleet.store.records import AuditRecord
from podfleet.store.sql.base import SqlBase

# PostgreSQL advisory lock key ("pfaudit\0" as int64).
AUDIT_LOCK_KEY = 0x7066617564697400
AUDIT_BATCH = 500


class _BadAuditRow(Exception):
    def __init__(self, seq: int, message: str) -> None:
        super().__init__(message)
        self.seq = seq


def _record(r: AuditEventRow) -> AuditRecord:
    """Raises ValueError when the stored detail is not JSON (a tampered row)."""
    return record_of(AuditRecord, r, detail=json.loads(r.detail))


class SqlAudit(SqlBase, AuditKeyring):
    def append_audit(
        self, *, time: float, actor: str, action: str, target: str, result: str,
        detail: dict[str, Any],
    ) -> AuditRecord:
        detail_text = canonical_json(detail)  # validates before taking any lock
        stored_detail = json.loads(detail_text)
        with self._writing() as s:
            if self.dialect == "postgresql":
                s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": AUDIT_LOCK_KEY})
            head = s.execute(
                select(AuditEventRow.seq, AuditEventRow.hash)
                .order_by(AuditEventRow.seq.desc()).limit(1)
            ).first()
            seq, prev_hash = (head[0] + 1, head[1]) if head else (1, GENESIS_HASH)
            key_id, key = self.audit_key or (None, None)
            rec = AuditRecord(
                seq=seq, time=float(time), actor=actor, action=action, target=target,
                result=result, detail=stored_detail, prev_hash=prev_hash, hash="", key_id=key_id,
            )
            rec.hash = audit_hash(
                seq=seq, time=rec.time, actor=actor, action=action, target=target,
                result=result, detail=stored_detail, prev_hash=prev_hash, key_id=key_id, key=key,
            )
            s.execute(insert(table_of(AuditEventRow)), [row_of(rec, detail=detail_text)])
        return rec

    def list_audit(self, *, after_seq: int = 0, limit: int = 100) -> list[AuditRecord]:
        return [_record(r) for r in self._audit_rows(after_seq, limit)]

    def _audit_rows(self, after_seq: int, limit: int) -> list[AuditEventRow]:
        check_limit(limit)
        q = select(AuditEventRow).where(AuditEventRow.seq > after_seq)
        with self._reading() as s:
            return list(s.execute(q.order_by(AuditEventRow.seq).limit(limit)).scalars())

    def iter_audit(self) -> Iterator[AuditRecord]:
        """Every record in seq order, read in batches (the chain can be long)."""
        after = 0
        while batch := self._audit_rows(after, AUDIT_BATCH):
            yield from (_record(r) for r in batch)
            after = batch[-1].seq

    def audit_head(self) -> tuple[int, str]:
        """(seq, hash) of the last record, ``(0, GENESIS_HASH)`` when empty; keep a copy
        elsewhere to detect truncation of the chain's tail, which the chain cannot."""
        with self._reading() as s:
            q = select(AuditEventRow.seq, AuditEventRow.hash)
            head = s.execute(q.order_by(AuditEventRow.seq.desc()).limit(1)).first()
        return (head[0], head[1]) if head else (0, GENESIS_HASH)

    def audit_archived_through(self) -> tuple[int, str]:
        """(seq, hash) of the last archived and pruned record; ``(0, GENESIS_HASH)`` when
        nothing was: the chain in the store starts right after it."""
        with self._reading() as s:
            row = s.execute(select(AuditArchiveRow).order_by(AuditArchiveRow.through_seq.desc()).limit(1)).scalar()
        return (row.through_seq, row.through_hash) if row else (0, GENESIS_HASH)

    def prune_audit(self, *, through_seq: int, through_hash: str, location: str, sha256: str,
                    created_at: float) -> int:
        """Record an archive of the records up to ``through_seq`` and delete them, in one
        transaction (the delete trigger lets through only what an archive row covers)."""
        first, _ = self.audit_archived_through()
        with self._writing() as s:
            if self.dialect == "postgresql":
                s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": AUDIT_LOCK_KEY})
            last = s.execute(select(AuditEventRow.hash).where(AuditEventRow.seq == through_seq)).scalar()
            if last != through_hash:
                raise ConflictError(f"audit record {through_seq} is not the one archived (hash differs)",
                                    field="through_seq")
            s.execute(insert(table_of(AuditArchiveRow)), [{
                "through_seq": through_seq, "first_seq": first + 1, "through_hash": through_hash,
                "location": location, "sha256": sha256, "created_at": created_at}])
            deleted = s.execute(delete(AuditEventRow).where(AuditEventRow.seq <= through_seq))
        return int(getattr(deleted, "rowcount", 0) or 0)

    def audit_key_mismatch(self) -> str | None:
        """Why the keys in use do not verify the chain's newest record (None: they do, or
        the chain is empty or unkeyed): a server with keys of its own would write a chain
        that no other server sharing the store verifies."""
        with self._reading() as s:
            row = s.execute(select(AuditEventRow).order_by(AuditEventRow.seq.desc()).limit(1)).scalar()
        if row is None or row.key_id is None:
            return None
        rec = _record(row)
        key = self.audit_keys.get(rec.key_id or "")
        if key is None:
            return f"the audit chain's newest record ({rec.seq}) is keyed with {rec.key_id}, which this server lacks"
        expect = audit_hash(seq=rec.seq, time=rec.time, actor=rec.actor, action=rec.action, target=rec.target,
                            result=rec.result, detail=rec.detail, prev_hash=rec.prev_hash, key_id=rec.key_id,
                            key=key)
        if expect != rec.hash:
            return (f"this server's audit key {rec.key_id} does not verify the chain's newest record ({rec.seq}): "
                    "it is another key of that name")
        return None

    def verify_audit(self) -> tuple[bool, int | None, str]:
        def records() -> Iterator[AuditRecord]:
            after = 0
            while batch := self._audit_rows(after, AUDIT_BATCH):
                for row in batch:
                    try:
                        yield _record(row)
                    except ValueError:
                        raise _BadAuditRow(
                            row.seq, f"record {row.seq}: detail is not valid JSON"
                        ) from None
                after = batch[-1].seq

        try:
            seq, prev = self.audit_archived_through()
            return verify_chain(records(), self.audit_keys, start_seq=seq + 1, start_prev_hash=prev).as_tuple()
        except _BadAuditRow as bad:
            return (False, bad.seq, str(bad))
