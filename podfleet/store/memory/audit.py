"""The audit trail, in memory (``protocol.AuditStore``): hash-chained as in the SQL store
(``podfleet.security.audit``), kept whole (no retention)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from podfleet.errors import ConflictError
from podfleet.security.audit import GENESIS_HASH, audit_hash, verify_chain
from podfleet.store.common import AuditKeyring
from podfleet.store.memory.base import MemoryBase
from podfleet.store.records import AuditRecord


class MemoryAudit(MemoryBase, AuditKeyring):
    KEPT = {"_audit": list}
    _audit: list[AuditRecord]  # append-only: a rollback cuts it back to its length

    def append_audit(self, *, time: float, actor: str, action: str, target: str, result: str,
                     detail: dict[str, Any]) -> AuditRecord:
        with self._lock:
            seq = len(self._audit) + 1
            prev = self._audit[-1].hash if self._audit else GENESIS_HASH
            key_id, key = self.audit_key or (None, None)
            rec = AuditRecord(seq=seq, time=float(time), actor=actor, action=action, target=target,
                              result=result, detail=copy.deepcopy(detail), prev_hash=prev, hash="", key_id=key_id)
            rec.hash = audit_hash(seq=seq, time=rec.time, actor=actor, action=action, target=target,
                                  result=result, detail=rec.detail, prev_hash=prev, key_id=key_id, key=key)
            self._touch("_audit")
            self._audit.append(rec)
            return copy.deepcopy(rec)

    def list_audit(self, *, after_seq: int = 0, limit: int = 100) -> list[AuditRecord]:
        with self._lock:
            return [copy.deepcopy(r) for r in self._audit if r.seq > after_seq][:limit]

    def iter_audit(self) -> Iterator[AuditRecord]:
        with self._lock:
            records = [copy.deepcopy(r) for r in self._audit]
        return iter(records)

    def audit_archived_through(self) -> tuple[int, str]:
        return (0, GENESIS_HASH)

    def prune_audit(self, *, through_seq: int, through_hash: str, location: str, sha256: str,
                    created_at: float) -> int:
        raise ConflictError("the in-memory store keeps its audit trail whole (no retention)")

    def audit_head(self) -> tuple[int, str]:
        with self._lock:
            return (self._audit[-1].seq, self._audit[-1].hash) if self._audit else (0, GENESIS_HASH)

    def verify_audit(self) -> tuple[bool, int | None, str]:
        return verify_chain(self.iter_audit(), self.audit_keys).as_tuple()

    def tamper_audit(self, seq: int, **changes: Any) -> None:
        """Test hook: change a stored audit record in place, as an attacker with DB access would."""
        with self._lock:
            rec = self._audit[seq - 1]
            for k, v in changes.items():
                setattr(rec, k, v)
