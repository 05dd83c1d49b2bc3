"""Users, in SQL (``protocol.UserStore``): one row per user (policies as JSON, TOTP sealed)."""

from __future__ import annotations

from sqlalchemy import delete, select

from podfleet.store.convert import record_of, row_of
from podfleet.store.models import UserRow
from podfleet.store.records import UserRecord
from podfleet.store.sql.base import SqlBase


class SqlUsers(SqlBase):
    def save_user(self, rec: UserRecord) -> None:
        self._upsert(UserRow, [row_of(rec)], ["name"])

    def get_user(self, name: str) -> UserRecord | None:
        with self._reading() as s:
            row = s.get(UserRow, name)
            return record_of(UserRecord, row) if row is not None else None

    def list_users(self) -> list[UserRecord]:
        with self._reading() as s:
            return [record_of(UserRecord, r) for r in s.execute(select(UserRow).order_by(UserRow.name)).scalars()]

    def delete_user(self, name: str) -> bool:
        return self._delete(delete(UserRow).where(UserRow.name == name)) > 0
