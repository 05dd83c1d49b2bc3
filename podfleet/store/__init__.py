"""Durable store: SQLAlchemy 2 on SQLite (embedded default) or PostgreSQL.

Use ``open_store(url)`` (None: ``$PODFLEET_DB`` or ``~/.podfleet/podfleet.db``); the
returned ``Store`` implements ``StoreProtocol`` and is migrated to the latest schema.
``Store``/``open_store`` load lazily so importing ``podfleet.store.records`` or
``podfleet.store.memory`` does not pull in SQLAlchemy and Alembic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from podfleet.store.protocol import StoreProtocol

if TYPE_CHECKING:
    from podfleet.store.db import Store, open_store

__all__ = ["Store", "StoreProtocol", "open_store"]


def __getattr__(name: str) -> Any:
    if name in ("Store", "open_store"):
        from podfleet.store import db

        return getattr(db, name)
    raise AttributeError(f"module 'podfleet.store' has no attribute {name!r}")
