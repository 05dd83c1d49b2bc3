"""Where the store lives (``PODFLEET_DB``) and how its SQLAlchemy engines are made.

SQLite is tuned for durability and one writer: WAL (readers never block the writer),
``synchronous=FULL`` (a commit is fsynced before it returns, so an acknowledged write
survives ``kill -9`` and power loss), foreign keys on, and a busy timeout. Writers open
their transactions with ``BEGIN IMMEDIATE`` so they queue for the write lock up front
instead of failing with SQLITE_BUSY when a read transaction tries to upgrade.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from podfleet.errors import InvalidInputError

ENV_VAR = "PODFLEET_DB"
DEFAULT_DIR = Path("~/.podfleet")
DEFAULT_FILE = "podfleet.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
SUPPORTED = ("sqlite", "postgresql")
# PostgreSQL: a connection attempt to a database that does not answer fails after this
# long (the API answers 503, the elector tries again) instead of hanging on the TCP timeout.
PG_CONNECT_TIMEOUT_S = 3
# A transaction left open by a process that stopped (SIGSTOP, a frozen VM) is ended by the
# database after this long, so it cannot hold the leadership lease row, or any row, for
# ever (store.lease). podfleet's own transactions last milliseconds.
PG_IDLE_IN_TRANSACTION_MS = 4000


def default_path() -> Path:
    return (DEFAULT_DIR / DEFAULT_FILE).expanduser()


def resolve_url(value: str | None = None) -> URL:
    """A SQLAlchemy URL from a URL or a file path; None means ``$PODFLEET_DB`` or the default.

    ``postgresql://`` and ``postgres://`` mean the psycopg 3 driver (the one installed).
    """
    raw = value if value is not None else os.environ.get(ENV_VAR) or str(default_path())
    field = "db" if value is not None else ENV_VAR
    raw = raw.strip()
    if not raw:
        raise InvalidInputError(f"{field} is empty; give a SQLAlchemy URL or a file path", field=field)
    if raw == ":memory:":
        return URL.create("sqlite")
    if "://" not in raw:
        return URL.create("sqlite", database=str(Path(raw).expanduser().resolve()))
    if raw.startswith("postgres://"):
        raw = "postgresql://" + raw[len("postgres://"):]
    try:
        url = make_url(raw)
    except ArgumentError:
        raise InvalidInputError(f"{field} is not a valid database URL", field=field) from None
    if url.get_backend_name() not in SUPPORTED:
        raise InvalidInputError(
            f"{field}: unsupported database {url.get_backend_name()!r}; valid: "
            f"{', '.join(SUPPORTED)} (or a file path for SQLite)",
            field=field,
        )
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url


def is_memory(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def json_dumps(value: Any) -> str:
    """JSON for spec/status/detail columns. NaN/inf become null on every backend, because
    PostgreSQL rejects them and SQLite would keep them: one rule keeps both stores alike."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False)


def make_engines(url: URL) -> tuple[Engine, Engine]:
    """(write engine, read engine). They are one engine except for file SQLite."""
    common: dict[str, Any] = {"json_serializer": json_dumps}
    if url.get_backend_name() == "postgresql":
        # Added to the URL's own ``options`` (a search_path, say), not in their place.
        given = url.query.get("options", "")
        given = given if isinstance(given, str) else " ".join(given)
        options = f"{given} -c idle_in_transaction_session_timeout={PG_IDLE_IN_TRANSACTION_MS}"
        url = url.update_query_dict({"options": options.strip()})
        engine = create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S},
                               **common)
        return engine, engine
    if is_memory(url):
        # One shared connection, else each connection would be its own empty database.
        engine = create_engine(
            "sqlite://", poolclass=StaticPool,
            connect_args={"check_same_thread": False}, **common,
        )
        _sqlite_events(engine, begin="BEGIN IMMEDIATE", read_only=False)
        return engine, engine
    Path(url.database or "").parent.mkdir(parents=True, exist_ok=True)
    args = {"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    writer = create_engine(url, connect_args=args, **common)
    reader = create_engine(url, connect_args=args, **common)
    _sqlite_events(writer, begin="BEGIN IMMEDIATE", read_only=False)
    _sqlite_events(reader, begin="BEGIN", read_only=True)
    return writer, reader


def _sqlite_events(engine: Engine, *, begin: str, read_only: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control from the sqlite3 module so BEGIN is ours (see below).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        if read_only:
            cur.execute("PRAGMA query_only=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)
