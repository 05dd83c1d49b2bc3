"""The users half of ``Store``: one row per user (policies as JSON, TOTP sealed)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite

from podfleet.store.models import UserRow, table_of
from podfleet.store.records import UserRecord

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def _record(r: UserRow) -> UserRecord:
    return UserRecord(r.name, list(r.policies), dict(r.inline), r.created_at, r.mfa_secret, r.mfa_last_step,
                      list(r.recovery) if r.recovery is not None else None, r.mfa_failures, r.recovery_failures,
                      r.mfa_blocked_until, bool(r.mfa_locked))


class UserStore:
    """Mixin for ``Store``; relies on its ``dialect``, ``_writing`` and ``_reading``."""

    dialect: str
    _writing: Callable[..., AbstractContextManager[Session]]
    _reading: Callable[[], AbstractContextManager[Session]]

    def save_user(self, rec: UserRecord) -> None:
        row = {"name": rec.name, "policies": rec.policies, "inline": rec.inline, "created_at": rec.created_at,
               "mfa_secret": rec.mfa_secret, "mfa_last_step": rec.mfa_last_step, "recovery": rec.recovery,
               "mfa_failures": rec.mfa_failures, "recovery_failures": rec.recovery_failures,
               "mfa_blocked_until": rec.mfa_blocked_until, "mfa_locked": rec.mfa_locked}
        ins = (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table_of(UserRow))
        stmt = ins.values(**row).on_conflict_do_update(
            index_elements=["name"], set_={k: v for k, v in row.items() if k != "name"})
        with self._writing() as s:
            s.execute(stmt)

    def get_user(self, name: str) -> UserRecord | None:
        with self._reading() as s:
            row = s.get(UserRow, name)
            return _record(row) if row is not None else None

    def list_users(self) -> list[UserRecord]:
        with self._reading() as s:
            return [_record(r) for r in s.execute(select(UserRow).order_by(UserRow.name)).scalars()]

    def delete_user(self, name: str) -> bool:
        with self._writing() as s:
            return bool(getattr(s.execute(delete(UserRow).where(UserRow.name == name)), "rowcount", 0))
