"""API tokens, in memory (``protocol.TokenStore``)."""

from __future__ import annotations

import dataclasses

from podfleet.errors import NotFoundError
from podfleet.store.memory.base import MemoryBase
from podfleet.store.records import TokenRecord


class MemoryTokens(MemoryBase):
    KEPT = {"_tokens": dict}
    _tokens: dict[str, TokenRecord]

    def add_token(self, rec: TokenRecord) -> None:
        self._put("_tokens", rec.id, rec)

    def find_token_by_hash(self, token_hash: str) -> TokenRecord | None:
        return self._find("_tokens", lambda t: t.token_hash == token_hash)

    def list_tokens(self) -> list[TokenRecord]:
        return self._select("_tokens")  # as added

    def count_tokens(self) -> int:
        with self._lock:
            return len(self._tokens)

    def get_token(self, token_id: str) -> TokenRecord | None:
        return self._get("_tokens", token_id)

    def revoke_token(self, token_id: str) -> None:
        with self._lock:
            t = self._tokens.get(token_id)
            if t is None:
                raise NotFoundError(f"token {token_id!r} does not exist", field="token_id")
            self._touch("_tokens")
            self._tokens[token_id] = dataclasses.replace(t, revoked=True)
