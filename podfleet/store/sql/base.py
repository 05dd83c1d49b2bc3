"""``SqlBase``: what every noun of the SQL store writes and reads through (SQLAlchemy 2;
SQLite by default, PostgreSQL by URL).

Threads: one writer at a time per process (a lock, plus the database's own write lock
across processes), any number of readers. Every call uses its own short session; no
session is shared across threads. ``transaction()`` puts a session in a context variable
so the calls made inside it (on the same thread or task) join one database transaction;
each of those calls runs in a savepoint, so a call that fails (e.g. a conflict) writes
nothing and leaves the enclosing transaction usable. Outside ``transaction()`` every
write commits on its own, fsynced, before it returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, cast

from sqlalchemy import Delete, Select, text
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, CursorResult, Engine
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from podfleet.errors import ConflictError, NotFoundError, PodfleetError, UnavailableError
from podfleet.store.convert import record_of
from podfleet.store.engine import is_memory, make_engines, resolve_url
from podfleet.store.lease import Fence
from podfleet.store.migrate import upgrade_to_head
from podfleet.store.models import Base, table_of

Conflict = Callable[[IntegrityError], PodfleetError]
R = TypeVar("R")
# How a row becomes its record: the record's class (its fields are the row's columns,
# ``convert.record_of``) or a function of the row.
Reader = type[R] | Callable[[Any], R]


class SqlBase:
    """Engines, sessions and transactions of one database; opening it migrates to head."""

    def __init__(self, url: str | URL, *, migrate: bool = True) -> None:
        self._url = url if isinstance(url, URL) else resolve_url(url)
        self.url = self._url.render_as_string(hide_password=True)
        self.dialect = self._url.get_backend_name()
        self._memory = is_memory(self._url)
        self._writer, self._reader = make_engines(self._url)
        self._wsession = sessionmaker(self._writer, expire_on_commit=False)
        self._rsession = sessionmaker(self._reader, expire_on_commit=False)
        self._write_lock = threading.RLock()
        # Set on a leader of several servers (``use_fence``): every write transaction first
        # checks that the lease still names this server's term (``store.lease``).
        self.fence: Fence | None = None
        self._current: ContextVar[Session | None] = ContextVar(
            f"podfleet_store_tx_{id(self)}", default=None
        )
        try:
            if migrate:
                self._migrate()
        except OperationalError as exc:
            self.close()
            raise PodfleetError(f"cannot open store at {self.url}: {exc.orig}") from exc

    # ---- lifecycle -------------------------------------------------------------------
    def _migrate(self) -> None:
        with self._write_lock:
            upgrade_to_head(self._writer)

    def schema_revision(self) -> str | None:
        with self._reading() as s:
            return s.execute(text("SELECT version_num FROM alembic_version")).scalar()

    @property
    def write_engine(self) -> Engine:
        """The engine writes go through (the leadership lease uses its own connections on it)."""
        return self._writer

    def use_fence(self, fence: Fence | None) -> None:
        """From now on every write transaction checks ``fence`` first (None: no check)."""
        self.fence = fence

    def ping(self) -> bool:
        """Whether the database answers a trivial query now (``/readyz``)."""
        try:
            with self._reader.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except (OperationalError, InterfaceError):
            return False

    def close(self) -> None:
        self._writer.dispose()
        if self._reader is not self._writer:
            self._reader.dispose()

    # ---- sessions --------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group calls into one commit. Nested use is a savepoint inside the outer
        transaction: if its block raises, only its own writes roll back (the engine
        batches several commands into one commit, and one failing command must not
        leave half its writes in the others' commit)."""
        outer = self._current.get()
        if outer is not None:
            with outer.begin_nested():
                yield
            return
        with self._writing() as s:
            token = self._current.set(s)
            try:
                yield
            finally:
                self._current.reset(token)

    @property
    def in_transaction(self) -> bool:
        return self._current.get() is not None

    @contextmanager
    def _writing(self, conflict: Conflict | None = None) -> Iterator[Session]:
        try:
            outer = self._current.get()
            if outer is not None:
                with outer.begin_nested():
                    yield outer
            else:
                with self._write_lock, self._wsession() as s, s.begin():
                    if self.fence is not None:
                        self.fence.check(s)
                    else:
                        # Connect now: a database that does not answer refuses the
                        # transaction at its start, before its caller changed anything.
                        s.connection()
                    yield s
        except IntegrityError as exc:
            raise (conflict or integrity_error)(exc) from exc
        except (OperationalError, InterfaceError) as exc:
            raise unavailable(exc) from exc

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        outer = self._current.get()
        try:
            if outer is not None:
                yield outer
            elif self._memory:  # one shared connection: reads queue behind the writer
                with self._write_lock, self._wsession() as s:
                    yield s
            else:
                with self._rsession() as s:
                    yield s
        except (OperationalError, InterfaceError) as exc:
            if outer is not None:
                raise  # the enclosing transaction's ``_writing`` translates it once
            raise unavailable(exc) from exc

    # ---- the common shapes of a noun's calls ------------------------------------------
    @staticmethod
    def _read(to: Reader[R], row: Any) -> R:
        return record_of(to, row) if isinstance(to, type) else to(row)

    def _get(self, model: type[Base], key: Any, to: Reader[R]) -> R | None:
        """The record of the row with primary key ``key``, or None."""
        with self._reading() as s:
            row = s.get(model, key)
            return self._read(to, row) if row is not None else None

    def _first(self, q: Select[Any], to: Reader[R]) -> R | None:
        """The record of the first row of ``q``, or None."""
        with self._reading() as s:
            row = s.execute(q).scalars().first()
            return self._read(to, row) if row is not None else None

    def _all(self, q: Select[Any], to: Reader[R]) -> list[R]:
        """The records of the rows of ``q``, in its order."""
        with self._reading() as s:
            return [self._read(to, row) for row in s.execute(q).scalars()]

    def _upsert(self, model: type[Base], rows: list[dict[str, Any]], keys: Sequence[str],
                conflict: Conflict | None = None) -> None:
        """Insert ``rows``, or update every other column of the row with the same ``keys``."""
        if not rows:
            return
        dialect = pg_dialect if self.dialect == "postgresql" else sqlite_dialect
        stmt = dialect.insert(table_of(model))
        update = {c.name: stmt.excluded[c.name] for c in table_of(model).columns if c.name not in keys}
        with self._writing(conflict) as s:
            s.execute(stmt.on_conflict_do_update(index_elements=list(keys), set_=update), rows)

    def _delete(self, stmt: Delete) -> int:
        """Run a DELETE; how many rows it deleted."""
        with self._writing() as s:
            # A DELETE without RETURNING gives a CursorResult; Session.execute is typed
            # with the wider Result (SQLAlchemy's documented remedy is this cast).
            return int(cast("CursorResult[Any]", s.execute(stmt)).rowcount or 0)


def unavailable(exc: OperationalError | InterfaceError) -> UnavailableError:
    """The database did not answer (down, a connection cut, a lock it gave up on): the
    caller may retry; nothing of this call was committed."""
    reason = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
    return UnavailableError(f"the store is unavailable ({reason[0][:200] if reason else type(exc).__name__}); "
                            "nothing was changed, retry shortly", retry_after_s=2)


def integrity_error(exc: IntegrityError) -> PodfleetError:
    orig = exc.orig
    reason = str(orig).splitlines()[0] if orig is not None else str(exc)
    if getattr(orig, "sqlstate", None) == "23503" or "FOREIGN KEY" in reason.upper():
        return NotFoundError(f"refers to a record that does not exist ({reason})")
    return ConflictError(f"conflicts with an existing record ({reason})")
