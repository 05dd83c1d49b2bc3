"""Users, in SQL (``protocol.UserStore``): one row per user (policies as JSON, TOTP sealed)."""

from __future__ import annotations

from sqlalchemy import delete, select

from podfleet.store.convert import row_of
from podfleet.store.models import UserRow
from podfleet.store.records import UserRecord
from podfleet.store.sql.base import SqlBase


class SqlUsers(SqlBase):
    def save_user(self, rec: UserRecord) -> None:
        self._upsert(UserRow, [row_of(rec)], ["name"])

    def get_user(self, name: str) -> UserRecord | None:
        return self._get(UserRow, name, UserRecord)

    def list_users(self) -> list[UserRecord]:
        return self._all(select(UserRow).order_by(UserRow.name), UserRecord)

    def delete_user(self, name: str) -> bool:
        return self._delete(delete(UserRow).where(UserRow.name == name)) > 0
