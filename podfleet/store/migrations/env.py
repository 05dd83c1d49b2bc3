"""Alembic environment: online only, on the connection ``Store`` hands over.

``Store`` opens the connection, takes the migration lock (SQLite: BEGIN IMMEDIATE;
PostgreSQL: an advisory lock) and passes it in ``config.attributes["connection"]``, so
two processes opening one database at once migrate it once.
"""

from __future__ import annotations

from alembic import context

from podfleet.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reachable from the alembic CLI
    raise RuntimeError("podfleet migrations run through podfleet.store.db.Store, not the CLI")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
