"""Idempotency keys, in SQL (``protocol.IdempotencyStore``): (operation, client_token) is
unique, so a second use of a token is refused by the database itself."""

from __future__ import annotations

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from podfleet.errors import ConflictError, PodfleetError
from podfleet.store.models import IdempotencyKeyRow, table_of
from podfleet.store.sql.base import SqlBase


class SqlIdempotency(SqlBase):
    def _idem(self, operation: str, client_token: str) -> IdempotencyKeyRow | None:
        q = select(IdempotencyKeyRow).where(
            IdempotencyKeyRow.operation == operation,
            IdempotencyKeyRow.client_token == client_token,
        )
        with self._reading() as s:
            return s.execute(q).scalars().first()

    def get_idempotent(self, operation: str, client_token: str) -> str | None:
        row = self._idem(operation, client_token)
        return row.resource_id if row else None

    def idempotent_request_hash(self, operation: str, client_token: str) -> str | None:
        row = self._idem(operation, client_token)
        return row.request_hash if row else None

    def put_idempotent(
        self, operation: str, client_token: str, resource_id: str, request_hash: str,
        *, created_at: float = 0.0,
    ) -> None:
        def conflict(_exc: IntegrityError) -> PodfleetError:
            return ConflictError(
                f"client_token {client_token!r} was already used for {operation}",
                field="client_token",
            )

        row = {
            "operation": operation, "client_token": client_token, "resource_id": resource_id,
            "request_hash": request_hash, "created_at": created_at,
        }
        with self._writing(conflict) as s:
            s.execute(insert(table_of(IdempotencyKeyRow)), [row])
