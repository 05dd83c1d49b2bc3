"""What both stores share and that needs no database: argument checks and the audit
chain's keyring. No SQLAlchemy here, so the in-memory store loads without it."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from podfleet.errors import InvalidInputError


def check_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidInputError(f"limit must be >= 1, got {limit}", field="limit")


class AuditKeyring:
    """The MAC keys of the chain: the current one signs new records, every known one
    verifies. Without keys (tests, a store opened for reading) records are plain SHA-256."""

    audit_key: tuple[str, bytes] | None = None
    audit_keys: Mapping[str, bytes] = MappingProxyType({})

    def use_audit_keys(self, key_id: str, key: bytes, older: Mapping[str, bytes] | None = None) -> None:
        if len(key) < 32:
            raise ValueError("an audit MAC key needs at least 32 bytes")
        self.audit_key = (key_id, bytes(key))
        self.audit_keys = MappingProxyType({**(older or {}), key_id: bytes(key)})
