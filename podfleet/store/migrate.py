"""Run the packaged Alembic migrations to head, programmatically (no alembic.ini), so an
installed podfleet upgrades its own database when the store opens."""

from __future__ import annotations

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
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATE_LOCK_KEY})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
