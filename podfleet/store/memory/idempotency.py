"""Idempotency keys, in memory (``protocol.IdempotencyStore``)."""

from __future__ import annotations

from podfleet.store.memory.base import MemoryBase


class MemoryIdempotency(MemoryBase):
    KEPT = {"_idem": dict}
    _idem: dict[tuple[str, str], tuple[str, str]]  # (operation, token) -> (resource id, request hash)

    def get_idempotent(self, operation: str, client_token: str) -> str | None:
        with self._lock:
            hit = self._idem.get((operation, client_token))
            return hit[0] if hit else None

    def put_idempotent(self, operation: str, client_token: str, resource_id: str, request_hash: str) -> None:
        with self._lock:
            self._touch("_idem")
            self._idem[(operation, client_token)] = (resource_id, request_hash)

    def idempotent_request_hash(self, operation: str, client_token: str) -> str | None:
        with self._lock:
            hit = self._idem.get((operation, client_token))
            return hit[1] if hit else None
