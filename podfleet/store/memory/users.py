"""Users, in memory (``protocol.UserStore``)."""

from __future__ import annotations

from podfleet.store.memory.base import MemoryBase
from podfleet.store.records import UserRecord


class MemoryUsers(MemoryBase):
    KEPT = {"_users": dict}
    _users: dict[str, UserRecord]

    def save_user(self, rec: UserRecord) -> None:
        self._put("_users", rec.name, rec)

    def get_user(self, name: str) -> UserRecord | None:
        return self._get("_users", name)

    def list_users(self) -> list[UserRecord]:
        return self._select("_users", order=lambda u: u.name)

    def delete_user(self, name: str) -> bool:
        return self._delete("_users", name)
