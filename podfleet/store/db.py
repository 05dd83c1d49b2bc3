"""``Store``: the durable store (SQLAlchemy 2; SQLite by default, PostgreSQL by URL).

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

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, CursorResult, Engine
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from podfleet.errors import ConflictError, NotFoundError, PodfleetError, UnavailableError
from podfleet.store import convert
from podfleet.store.audit_log import AuditLog
from podfleet.store.convert import check_limit
from podfleet.store.engine import is_memory, make_engines, resolve_url
from podfleet.store.lease import Fence
from podfleet.store.migrate import upgrade_to_head
from podfleet.store.models import (
    Base,
    CheckpointRow,
    ChipHealthRow,
    ClusterRow,
    HealthReportRow,
    IdempotencyKeyRow,
    JobMetricRollupRow,
    JobRow,
    PriorityClassRow,
    QueueRow,
    ReservationRow,
    TelemetryRollupRow,
    TokenRow,
    table_of,
)
from podfleet.store.records import (
    CheckpointRecord,
    ChipHealthRecord,
    ClusterRecord,
    JobMetricRecord,
    JobRecord,
    PriorityClassRecord,
    QueueRecord,
    ReportRecord,
    ReservationRecord,
    RollupRecord,
    TokenRecord,
)
from podfleet.store.users import UserStore

R = TypeVar("R", QueueRecord, ReservationRecord)


class Store(AuditLog, UserStore):
    """Implements ``podfleet.store.protocol.StoreProtocol``; opening it migrates to head."""

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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

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
    def _writing(
        self, conflict: Callable[[IntegrityError], PodfleetError] | None = None
    ) -> Iterator[Session]:
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
            raise (conflict or _integrity_error)(exc) from exc
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

    def _upsert(self, s: Session, model: type[Base], rows: list[dict[str, Any]], keys: Sequence[str]) -> None:
        dialect = pg_dialect if self.dialect == "postgresql" else sqlite_dialect
        stmt = dialect.insert(table_of(model))
        update = {c.name: stmt.excluded[c.name] for c in table_of(model).columns if c.name not in keys}
        s.execute(stmt.on_conflict_do_update(index_elements=list(keys), set_=update), rows)

    # ---- clusters --------------------------------------------------------------------
    def save_cluster(self, rec: ClusterRecord) -> None:
        def conflict(exc: IntegrityError) -> PodfleetError:
            if "name" in str(exc.orig):
                return ConflictError(f"a cluster named {rec.name!r} already exists", field="name")
            return _integrity_error(exc)

        with self._writing(conflict) as s:
            self._upsert(s, ClusterRow, [convert.cluster_row(rec)], ["id"])

    def get_cluster(self, cluster_id: str) -> ClusterRecord | None:
        with self._reading() as s:
            row = s.get(ClusterRow, cluster_id)
            return convert.cluster_record(row) if row else None

    def find_cluster_by_name(self, name: str) -> ClusterRecord | None:
        q = select(ClusterRow).where(ClusterRow.name == name, ClusterRow.state != "deleted")
        with self._reading() as s:
            row = s.execute(q).scalars().first()
            return convert.cluster_record(row) if row else None

    def list_clusters(
        self, *, after: str | None = None, limit: int = 100, include_deleted: bool = False
    ) -> list[ClusterRecord]:
        check_limit(limit)
        q = select(ClusterRow).order_by(ClusterRow.id).limit(limit)
        if after is not None:
            q = q.where(ClusterRow.id > after)
        if not include_deleted:
            q = q.where(ClusterRow.state != "deleted")
        with self._reading() as s:
            return [convert.cluster_record(r) for r in s.execute(q).scalars()]

    # ---- jobs ------------------------------------------------------------------------
    def save_job(self, rec: JobRecord) -> None:
        with self._writing() as s:
            self._upsert(s, JobRow, [convert.row_of(rec)], ["id"])

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._reading() as s:
            row = s.get(JobRow, job_id)
            return convert.record_of(JobRecord, row) if row else None

    def list_jobs(
        self,
        *,
        cluster_id: str | None = None,
        states: Sequence[str] | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[JobRecord]:
        check_limit(limit)
        q = select(JobRow).order_by(JobRow.id).limit(limit)
        if cluster_id is not None:
            q = q.where(JobRow.cluster_id == cluster_id)
        if states is not None:
            q = q.where(JobRow.state.in_(list(states)))
        if after is not None:
            q = q.where(JobRow.id > after)
        with self._reading() as s:
            return [convert.record_of(JobRecord, r) for r in s.execute(q).scalars()]

    def job_ids(self) -> list[str]:
        """Every job's id (no other column): what a follower scans for jobs it has not seen."""
        with self._reading() as s:
            return [str(i) for i in s.execute(select(JobRow.id).order_by(JobRow.id)).scalars()]

    def job_specs(self, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored specs of ``job_ids`` (unknown ids left out), a few hundred per query."""
        out: dict[str, dict[str, Any]] = {}
        ids = list(job_ids)
        for lo in range(0, len(ids), 500):
            q = select(JobRow.id, JobRow.spec).where(JobRow.id.in_(ids[lo:lo + 500]))
            with self._reading() as s:
                out.update({str(i): dict(spec) for i, spec in s.execute(q)})
        return out

    # ---- chip health -----------------------------------------------------------------
    def save_chip_health(self, records: Sequence[ChipHealthRecord]) -> None:
        if not records:
            return
        with self._writing() as s:
            rows = [convert.row_of(r) for r in records]
            self._upsert(s, ChipHealthRow, rows, ["cluster_id", "chip"])

    def list_chip_health(self, cluster_id: str) -> list[ChipHealthRecord]:
        q = select(ChipHealthRow).where(ChipHealthRow.cluster_id == cluster_id)
        with self._reading() as s:
            return [convert.record_of(ChipHealthRecord, r) for r in s.execute(q.order_by(ChipHealthRow.chip)).scalars()]

    # ---- checkpoints -----------------------------------------------------------------
    def add_checkpoint(self, rec: CheckpointRecord) -> None:
        with self._writing() as s:
            s.execute(insert(table_of(CheckpointRow)), [convert.row_of(rec)])

    def latest_checkpoint(self, job_id: str) -> CheckpointRecord | None:
        q = (
            select(CheckpointRow)
            .where(CheckpointRow.job_id == job_id)
            .order_by(CheckpointRow.step.desc(), CheckpointRow.created_at.desc())
            .limit(1)
        )
        with self._reading() as s:
            row = s.execute(q).scalars().first()
            return convert.record_of(CheckpointRecord, row) if row else None

    def latest_checkpoint_steps(self, job_ids: Sequence[str]) -> dict[str, int]:
        """Each job's newest checkpoint step (jobs without one left out), in one query: a
        reload asks this for a page of jobs at a time instead of once per job (800 round
        trips were two thirds of a new leader's reload)."""
        if not job_ids:
            return {}
        q = (select(CheckpointRow.job_id, func.max(CheckpointRow.step))
             .where(CheckpointRow.job_id.in_(list(job_ids))).group_by(CheckpointRow.job_id))
        with self._reading() as s:
            return {str(job): int(step) for job, step in s.execute(q)}

    def list_checkpoints(self, job_id: str) -> list[CheckpointRecord]:
        q = select(CheckpointRow).where(CheckpointRow.job_id == job_id)
        q = q.order_by(CheckpointRow.step, CheckpointRow.created_at)
        with self._reading() as s:
            return [convert.record_of(CheckpointRecord, r) for r in s.execute(q).scalars()]

    # ---- telemetry rollups -------------------------------------------------------------
    def save_rollups(self, records: Sequence[RollupRecord]) -> None:
        """Upsert rollup buckets (a bucket re-sent after a restart replaces itself)."""
        if not records:
            return
        rows = [{"cluster_id": r.cluster_id, "scope": r.scope, "metric": r.metric,
                 "resolution_s": float(r.resolution_s), "t_start": float(r.t_start),
                 "data": {"avg": list(r.avg), "min": list(r.min), "max": list(r.max), "count": int(r.count)}}
                for r in records]
        with self._writing() as s:
            self._upsert(s, TelemetryRollupRow, rows, ["cluster_id", "scope", "metric", "resolution_s", "t_start"])

    def list_rollups(self, cluster_id: str, *, resolution_s: float, since: float = 0.0,
                     scope: str | None = None, metric: str | None = None, limit: int = 100_000) -> list[RollupRecord]:
        q = select(TelemetryRollupRow).where(
            TelemetryRollupRow.cluster_id == cluster_id,
            TelemetryRollupRow.resolution_s == float(resolution_s),
            TelemetryRollupRow.t_start >= since,
        )
        if scope is not None:
            q = q.where(TelemetryRollupRow.scope == scope)
        if metric is not None:
            q = q.where(TelemetryRollupRow.metric == metric)
        q = q.order_by(TelemetryRollupRow.t_start, TelemetryRollupRow.id).limit(limit)
        with self._reading() as s:
            return [RollupRecord(r.cluster_id, r.scope, r.metric, r.resolution_s, r.t_start, list(r.data["avg"]),
                                 list(r.data["min"]), list(r.data["max"]), int(r.data["count"]))
                    for r in s.execute(q).scalars()]

    def prune_rollups(self, *, resolution_s: float, before: float) -> int:
        """Delete buckets of this resolution older than ``before`` (retention); returns how many."""
        with self._writing() as s:
            # A DELETE without RETURNING gives a CursorResult; Session.execute is typed
            # with the wider Result (SQLAlchemy's documented remedy is this cast).
            res = cast("CursorResult[Any]", s.execute(delete(TelemetryRollupRow).where(
                TelemetryRollupRow.resolution_s == float(resolution_s), TelemetryRollupRow.t_start < before)))
            return int(res.rowcount or 0)

    # ---- job metrics history -----------------------------------------------------------
    def save_job_metrics(self, records: Sequence[JobMetricRecord]) -> None:
        """Upsert job metric buckets (an open bucket re-sent replaces itself)."""
        if not records:
            return
        rows = [{"job_id": r.job_id, "resolution_s": float(r.resolution_s), "t_start": float(r.t_start),
                 "data": dict(r.data)} for r in records]
        with self._writing() as s:
            self._upsert(s, JobMetricRollupRow, rows, ["job_id", "resolution_s", "t_start"])

    def list_job_metrics(self, job_id: str, *, resolution_s: float, since: float = 0.0,
                         limit: int = 100_000) -> list[JobMetricRecord]:
        q = select(JobMetricRollupRow).where(
            JobMetricRollupRow.job_id == job_id,
            JobMetricRollupRow.resolution_s == float(resolution_s),
            JobMetricRollupRow.t_start >= since,
        ).order_by(JobMetricRollupRow.t_start).limit(limit)
        with self._reading() as s:
            return [JobMetricRecord(r.job_id, r.resolution_s, r.t_start, dict(r.data)) for r in s.execute(q).scalars()]

    # ---- queues -------------------------------------------------------------------------
    # Queues and reservations are the same kind of row: a name unique on its cluster and a
    # JSON spec; one body each for saving, listing and deleting them.
    def _save_named(self, model: type[QueueRow | ReservationRow], noun: str,
                    rec: QueueRecord | ReservationRecord) -> None:
        def conflict(_exc: IntegrityError) -> PodfleetError:
            return ConflictError(f"a {noun} named {rec.name!r} already exists on cluster {rec.cluster_id}",
                                 field="name")

        with self._writing(conflict) as s:
            self._upsert(s, model, [{**convert.row_of(rec), "spec": dict(rec.spec)}], ["id"])

    def _list_named(self, model: type[QueueRow | ReservationRow], cls: type[R], cluster_id: str | None) -> list[R]:
        q = select(model).order_by(model.cluster_id, model.name)
        if cluster_id is not None:
            q = q.where(model.cluster_id == cluster_id)
        with self._reading() as s:
            return [convert.record_of(cls, r) for r in s.execute(q).scalars()]

    def _delete_id(self, model: type[QueueRow | ReservationRow], row_id: str) -> bool:
        with self._writing() as s:
            res = cast("CursorResult[Any]", s.execute(delete(model).where(model.id == row_id)))
            return bool(res.rowcount)

    def save_queue(self, rec: QueueRecord) -> None:
        self._save_named(QueueRow, "queue", rec)

    def list_queues(self, cluster_id: str | None = None) -> list[QueueRecord]:
        return self._list_named(QueueRow, QueueRecord, cluster_id)

    def delete_queue(self, queue_id: str) -> bool:
        return self._delete_id(QueueRow, queue_id)

    # ---- advance reservations -----------------------------------------------------------
    def save_reservation(self, rec: ReservationRecord) -> None:
        self._save_named(ReservationRow, "reservation", rec)

    def list_reservations(self, cluster_id: str | None = None) -> list[ReservationRecord]:
        return self._list_named(ReservationRow, ReservationRecord, cluster_id)

    def delete_reservation(self, reservation_id: str) -> bool:
        return self._delete_id(ReservationRow, reservation_id)

    def save_priority_class(self, rec: PriorityClassRecord) -> None:
        row = {"name": rec.name, "value": int(rec.value), "preemption": rec.preemption,
               "created_at": float(rec.created_at)}
        with self._writing() as s:
            self._upsert(s, PriorityClassRow, [row], ["name"])

    def list_priority_classes(self) -> list[PriorityClassRecord]:
        with self._reading() as s:
            return [PriorityClassRecord(r.name, r.value, r.preemption, r.created_at)
                    for r in s.execute(select(PriorityClassRow).order_by(PriorityClassRow.name)).scalars()]

    def delete_priority_class(self, name: str) -> bool:
        with self._writing() as s:
            res = cast("CursorResult[Any]", s.execute(delete(PriorityClassRow).where(PriorityClassRow.name == name)))
            return bool(res.rowcount)

    # ---- health reports ----------------------------------------------------------------
    def save_report(self, rec: ReportRecord) -> None:
        row = {"id": rec.id, "cluster_id": rec.cluster_id, "created_at": float(rec.created_at),
               "period_s": float(rec.period_s), "summary": dict(rec.summary), "json_text": rec.json_text,
               "html_text": rec.html_text}
        with self._writing() as s:
            self._upsert(s, HealthReportRow, [row], ["id"])

    @staticmethod
    def _report(r: HealthReportRow) -> ReportRecord:
        return ReportRecord(r.id, r.cluster_id, r.created_at, r.period_s, dict(r.summary), r.json_text, r.html_text)

    def get_report(self, report_id: str) -> ReportRecord | None:
        with self._reading() as s:
            r = s.get(HealthReportRow, report_id)
            return self._report(r) if r is not None else None

    def list_reports(self, cluster_id: str, *, limit: int = 1000) -> list[ReportRecord]:
        check_limit(limit)
        q = select(HealthReportRow).where(HealthReportRow.cluster_id == cluster_id).order_by(
            HealthReportRow.created_at, HealthReportRow.id).limit(limit)
        with self._reading() as s:
            return [self._report(r) for r in s.execute(q).scalars()]

    def prune_reports(self, *, before: float, cluster_id: str | None = None) -> int:
        q = delete(HealthReportRow).where(HealthReportRow.created_at < before)
        if cluster_id is not None:
            q = q.where(HealthReportRow.cluster_id == cluster_id)
        with self._writing() as s:
            res = cast("CursorResult[Any]", s.execute(q))
            return int(res.rowcount or 0)

    # ---- idempotency -----------------------------------------------------------------
    def _idem(self, operation: str, client_token: str) -> IdempotencyKeyRow | None:
        q = select(IdempotencyKeyRow).where(
            IdempotencyKeyRow.operation == operation,
            IdempotencyKeyRow.client_token == client_token,
        )
        with self._reading() as s:
            return s.execute(q).scalars().first()

    def get_idempotent(self, operation: str, client_token: str) -> str | None:
        row = self._idem(operation, client_token)
        return row.resource_id if row else None

    def idempotent_request_hash(self, operation: str, client_token: str) -> str | None:
        row = self._idem(operation, client_token)
        return row.request_hash if row else None

    def put_idempotent(
        self, operation: str, client_token: str, resource_id: str, request_hash: str,
        *, created_at: float = 0.0,
    ) -> None:
        def conflict(_exc: IntegrityError) -> PodfleetError:
            return ConflictError(
                f"clientToken {client_token!r} was already used for {operation}",
                field="clientToken",
            )

        row = {
            "operation": operation, "client_token": client_token, "resource_id": resource_id,
            "request_hash": request_hash, "created_at": created_at,
        }
        with self._writing(conflict) as s:
            s.execute(insert(table_of(IdempotencyKeyRow)), [row])

    # ---- tokens ----------------------------------------------------------------------
    def add_token(self, rec: TokenRecord) -> None:
        def conflict(exc: IntegrityError) -> PodfleetError:
            if "token_hash" in str(exc.orig):
                return ConflictError("this token is already registered", field="token")
            return ConflictError(f"token id {rec.id!r} already exists", field="id")

        with self._writing(conflict) as s:
            s.execute(insert(table_of(TokenRow)), [convert.row_of(rec)])

    def find_token_by_hash(self, token_hash: str) -> TokenRecord | None:
        with self._reading() as s:
            q = select(TokenRow).where(TokenRow.token_hash == token_hash)
            row = s.execute(q).scalars().first()
            return convert.record_of(TokenRecord, row) if row else None

    def get_token(self, token_id: str) -> TokenRecord | None:
        with self._reading() as s:
            row = s.get(TokenRow, token_id)
            return convert.record_of(TokenRecord, row) if row else None

    def list_tokens(self) -> list[TokenRecord]:
        with self._reading() as s:
            q = select(TokenRow).order_by(TokenRow.created_at, TokenRow.id)
            return [convert.record_of(TokenRecord, r) for r in s.execute(q).scalars()]

    def count_tokens(self) -> int:
        with self._reading() as s:
            return int(s.execute(select(func.count()).select_from(TokenRow)).scalar_one())

    def revoke_token(self, token_id: str) -> None:
        with self._writing() as s:
            row = s.get(TokenRow, token_id)
            if row is None:
                raise NotFoundError(f"token {token_id!r} does not exist", field="token_id")
            row.revoked = True


def unavailable(exc: OperationalError | InterfaceError) -> UnavailableError:
    """The database did not answer (down, a connection cut, a lock it gave up on): the
    caller may retry; nothing of this call was committed."""
    reason = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
    return UnavailableError(f"the store is unavailable ({reason[0][:200] if reason else type(exc).__name__}); "
                            "nothing was changed, retry shortly", retry_after_s=2)


def _integrity_error(exc: IntegrityError) -> PodfleetError:
    orig = exc.orig
    reason = str(orig).splitlines()[0] if orig is not None else str(exc)
    if getattr(orig, "sqlstate", None) == "23503" or "FOREIGN KEY" in reason.upper():
        return NotFoundError(f"refers to a record that does not exist ({reason})")
    return ConflictError(f"conflicts with an existing record ({reason})")


def open_store(url: str | None = None) -> Store:
    """Open (and migrate) the store at ``url``; None means ``$PODFLEET_DB`` or
    ``~/.podfleet/podfleet.db``."""
    return Store(resolve_url(url))
