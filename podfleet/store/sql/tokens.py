"""API tokens, in SQL (``protocol.TokenStore``): only their hashes are kept."""

from __future__ import annotations

from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError

from podfleet.errors import ConflictError, NotFoundError, PodfleetError
from podfleet.store.convert import row_of
from podfleet.store.models import TokenRow, table_of
from podfleet.store.records import TokenRecord
from podfleet.store.sql.base import SqlBase


class SqlTokens(SqlBase):
    def add_token(self, rec: TokenRecord) -> None:
        def conflict(exc: IntegrityError) -> PodfleetError:
            if "token_hash" in str(exc.orig):
                return ConflictError("this token is already registered", field="token")
            return ConflictError(f"token id {rec.id!r} already exists", field="id")

        with self._writing(conflict) as s:
            s.execute(insert(table_of(TokenRow)), [row_of(rec)])

    def find_token_by_hash(self, token_hash: str) -> TokenRecord | None:
        return self._first(select(TokenRow).where(TokenRow.token_hash == token_hash), TokenRecord)

    def get_token(self, token_id: str) -> TokenRecord | None:
        return self._get(TokenRow, token_id, TokenRecord)

    def list_tokens(self) -> list[TokenRecord]:
        return self._all(select(TokenRow).order_by(TokenRow.created_at, TokenRow.id), TokenRecord)

    def count_tokens(self) -> int:
        with self._reading() as s:
            return int(s.execute(select(func.count()).select_from(TokenRow)).scalar_one())

    def revoke_token(self, token_id: str) -> None:
        with self._writing() as s:
            row = s.get(TokenRow, token_id)
            if row is None:
                raise NotFoundError(f"token {token_id!r} does not exist", field="token_id")
            row.revoked = True
