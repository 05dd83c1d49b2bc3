"""Store fixtures: every store test runs on SQLite (a temp file) and on PostgreSQL.

PostgreSQL: ``$PODFLEET_TEST_PG_URL`` or postgres@127.0.0.1:5432/postgres (trust auth).
Each test gets its own schema (``search_path``), dropped afterwards, so runs never see
each other. Server unreachable: the PostgreSQL tests fail under CI=true, skip otherwise.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url

from podfleet.store import Store

PG_URL = os.environ.get(
    "PODFLEET_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(scope="session")
def pg_base_url() -> str:
    try:
        engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
    except Exception as exc:
        msg = f"PostgreSQL not reachable at {PG_URL} ({type(exc).__name__}: {exc})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg + "; CI must run the PostgreSQL store tests (.ci/run starts it)")
        pytest.skip(msg)
    return PG_URL


def _schema_url(base: str, schema: str) -> URL:
    return make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    if request.param == "sqlite":
        yield URL.create("sqlite", database=str(tmp_path / "podfleet.db"))
        return
    base = request.getfixturevalue("pg_base_url")
    schema = "pf_test_" + uuid.uuid4().hex[:12]
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield _schema_url(base, schema)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture
def store(store_url: URL) -> Iterator[Store]:
    s = Store(store_url)
    yield s
    s.close()


RawSQL = Callable[[str], list[tuple]]


@pytest.fixture
def raw_sql(store_url: URL) -> Iterator[RawSQL]:
    """Run SQL on a connection of its own, outside the Store (as a tamperer would)."""
    if store_url.get_backend_name() == "sqlite":
        conn = sqlite3.connect(store_url.database, isolation_level=None)

        def run_sqlite(sql: str) -> list[tuple]:
            return conn.execute(sql).fetchall()

        yield run_sqlite
        conn.close()
        return
    engine = create_engine(store_url, isolation_level="AUTOCOMMIT")

    def run_pg(sql: str) -> list[tuple]:
        with engine.connect() as c:
            res = c.execute(text(sql))
            return [tuple(r) for r in res] if res.returns_rows else []

    yield run_pg
    engine.dispose()
