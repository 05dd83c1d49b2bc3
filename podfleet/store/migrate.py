"""Run the packaged Alembic migrations to head, programmatically (no alembic.ini), so an
installed podfleet upgrades its own database when the store opens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# PostgreSQL advisory lock key ("pfmigrat" as int64): one process migrates at a time.
MIGRATE_LOCK_KEY = 0x70666D6967726174


def upgrade_to_head(engine: Engine) -> None:
    """Migrate in one transaction holding the database's write lock (SQLite: the engine's
    BEGIN IMMEDIATE; PostgreSQL: an advisory lock), so concurrent openers migrate once."""
    with _locked(engine) as cfg:
        command.upgrade(cfg, "head")


def downgrade_to(engine: Engine, revision: str) -> None:
    """Take the schema back to ``revision`` (a rollback to an older podfleet; every
    migration's ``downgrade`` drops only what it added), under the same lock."""
    with _locked(engine) as cfg:
        command.downgrade(cfg, revision)


@contextmanager
def _locked(engine: Engine) -> Iterator[Config]:
    """Alembic's config over one transaction that holds the migration lock."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATE_LOCK_KEY})
        cfg.attributes["connection"] = conn
        yield cfg


if __name__ == "__main__":  # python -m podfleet.store.migrate downgrade REVISION  (store: $PODFLEET_DB)
    import sys

    from sqlalchemy import create_engine

    from podfleet.store.engine import resolve_url

    if len(sys.argv) != 3 or sys.argv[1] != "downgrade":
        sys.exit("usage: python -m podfleet.store.migrate downgrade REVISION   (the store is $PODFLEET_DB)")
    downgrade_to(create_engine(resolve_url(None)), sys.argv[2])
    print(f"store {resolve_url(None).render_as_string(hide_password=True)} is at revision {sys.argv[2]}")
