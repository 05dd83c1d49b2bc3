"""Run the packaged Alembic migrations to head, programmatically (no alembic.ini), so an
installed podfleet upgrades its own database when the store opens.

A store already at the packaged head (every start but the first after an upgrade) is
recognised with one query and without importing Alembic, which loads every migration
script to find out the same: that was ~0.2 s of each server start (more under load), on
the path of a restart that running jobs wait on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# PostgreSQL advisory lock key ("pfmigrat" as int64): one process migrates at a time.
MIGRATE_LOCK_KEY = 0x70666D6967726174


_REVISION = re.compile(r"""^revision\s*(?::\s*str\s*)?=\s*["']([^"']+)["']\s*$""", re.M)
_DOWN = re.compile(r"""^down_revision\s*(?::[^=]+)?=\s*(None|["']([^"']+)["'])\s*$""", re.M)


def package_head() -> str | None:
    """The packaged migrations' one head, read from their files (the revision that no other
    names as its ``down_revision``); None when the files are not that simple (a merge, a
    branch, a form these patterns do not read): Alembic is then asked."""
    revisions: set[str] = set()
    downs: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        if path.name == "__init__.py":
            continue
        src = path.read_text(encoding="utf-8")
        rev, down = _REVISION.findall(src), _DOWN.findall(src)
        if len(rev) != 1 or len(down) != 1:
            return None
        revisions.add(rev[0])
        if down[0][1]:
            downs.add(down[0][1])
    heads = revisions - downs
    return heads.pop() if len(heads) == 1 else None


def current_revision(engine: Engine) -> str | None:
    """The store's schema revision, None when it has none (a new database) or unreadable."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    except SQLAlchemyError:
        return None
    return str(rows[0]) if len(rows) == 1 else None


def _config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    return cfg


def upgrade_to_head(engine: Engine) -> None:
    """Migrate in one transaction holding the database's write lock (SQLite: the engine's
    BEGIN IMMEDIATE; PostgreSQL: an advisory lock), so concurrent openers migrate once.
    A store already at the packaged head is left as it is without asking Alembic."""
    head = package_head()
    if head is not None and current_revision(engine) == head:
        return
    from alembic import command

    with _locked(engine) as cfg:
        command.upgrade(cfg, "head")


def downgrade_to(engine: Engine, revision: str) -> None:
    """Take the schema back to ``revision`` (a rollback to an older podfleet; every
    migration's ``downgrade`` drops only what it added), under the same lock."""
    from alembic import command

    with _locked(engine) as cfg:
        command.downgrade(cfg, revision)


@contextmanager
def _locked(engine: Engine) -> Iterator[Config]:
    """Alembic's config over one transaction that holds the migration lock."""
    cfg = _config()
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
