"""SQLAlchemy ORM tables (typed). The migrations in ``migrations/versions`` build exactly
these; ``tests/store`` checks the two agree.

Columns that are queried or constrained are first-class; what the control plane derives
lives in JSON (``spec``/``status``/``detail``) so new fields need no migration. Audit
``detail`` is stored as its canonical JSON text, so what is hashed is exactly what is kept.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Stable constraint names so migrations and error messages can refer to them.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def table_of(model: type[Base]) -> Table:
    """The Core table a mapped class maps (declarative types ``__table__`` as the wider
    ``FromClause``; every class here maps one ``Table``)."""
    table = model.__table__
    if not isinstance(table, Table):
        raise TypeError(f"{model.__name__} does not map a Table")
    return table


class ClusterRow(Base):
    __tablename__ = "clusters"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(32))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)

    __table_args__ = (
        # A name is unique among live clusters; a deleted one frees its name.
        Index(
            "uq_clusters_live_name", "name", unique=True,
            sqlite_where=text("state != 'deleted'"),
            postgresql_where=text("state != 'deleted'"),
        ),
    )


class JobRow(Base):
    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(String(64), ForeignKey("clusters.id"), index=True)
    state: Mapped[str] = mapped_column(String(32), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)


class ChipHealthRow(Base):
    __tablename__ = "chip_health"
    cluster_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("clusters.id"), primary_key=True
    )
    chip: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    state: Mapped[str] = mapped_column(String(32))
    spare: Mapped[bool] = mapped_column(Boolean)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class CheckpointRow(Base):
    __tablename__ = "checkpoints"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(64), ForeignKey("jobs.id"))
    step: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Double)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (Index("ix_checkpoints_job_id_step", "job_id", "step"),)


class IdempotencyKeyRow(Base):
    __tablename__ = "idempotency_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    operation: Mapped[str] = mapped_column(String(64))
    client_token: Mapped[str] = mapped_column(String(255))
    resource_id: Mapped[str] = mapped_column(String(64))
    request_hash: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Double)

    __table_args__ = (UniqueConstraint("operation", "client_token"),)


class TokenRow(Base):
    __tablename__ = "tokens"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(32))
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[float] = mapped_column(Double)
    revoked: Mapped[bool] = mapped_column(Boolean)


class AuditEventRow(Base):
    __tablename__ = "audit_events"
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    time: Mapped[float] = mapped_column(Double)
    actor: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(128))
    target: Mapped[str] = mapped_column(String(255))
    result: Mapped[str] = mapped_column(String(128))
    detail: Mapped[str] = mapped_column(Text)  # canonical JSON text
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # MAC key; NULL: plain SHA-256


class UserRow(Base):
    __tablename__ = "users"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    policies: Mapped[list[str]] = mapped_column(JSON)
    inline: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Double)
    mfa_secret: Mapped[str | None] = mapped_column(Text, nullable=True)
    mfa_last_step: Mapped[int] = mapped_column(Integer)
    recovery: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    mfa_failures: Mapped[int] = mapped_column(Integer, server_default="0")
    recovery_failures: Mapped[int] = mapped_column(Integer, server_default="0")
    mfa_blocked_until: Mapped[float] = mapped_column(Double, server_default="0")
    mfa_locked: Mapped[bool] = mapped_column(Boolean, server_default=false())


class AuditArchiveRow(Base):
    """An archived (then pruned) segment of the audit chain (``security/retention.py``)."""

    __tablename__ = "audit_archives"
    through_seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    first_seq: Mapped[int] = mapped_column(Integer)
    through_hash: Mapped[str] = mapped_column(String(64))
    location: Mapped[str] = mapped_column(String(1024))
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Double)


class TelemetryRollupRow(Base):
    __tablename__ = "telemetry_rollups"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster_id: Mapped[str] = mapped_column(String(64))
    scope: Mapped[str] = mapped_column(String(16))  # chip | link
    metric: Mapped[str] = mapped_column(String(64))
    resolution_s: Mapped[float] = mapped_column(Double)
    t_start: Mapped[float] = mapped_column(Double)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)  # {"avg": [...], "min": [...], "max": [...], "count": n}

    __table_args__ = (
        UniqueConstraint("cluster_id", "scope", "metric", "resolution_s", "t_start", name="uq_telemetry_rollups_bucket"),
        Index("ix_telemetry_rollups_resolution_s_t_start", "resolution_s", "t_start"),
    )


class JobMetricRollupRow(Base):
    __tablename__ = "job_metric_rollups"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(64))
    resolution_s: Mapped[float] = mapped_column(Double)
    t_start: Mapped[float] = mapped_column(Double)
    # {"steps": [first, last], "count": n, "loss": {avg,min,max}, "tokens_per_s": {...}, "step_time_s": {...}}
    data: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (
        UniqueConstraint("job_id", "resolution_s", "t_start", name="uq_job_metric_rollups_bucket"),
    )


class HealthReportRow(Base):
    __tablename__ = "health_reports"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Double)
    period_s: Mapped[float] = mapped_column(Double)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    json_text: Mapped[str] = mapped_column(Text)
    html_text: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_health_reports_cluster_id_created_at", "cluster_id", "created_at"),)


class QueueRow(Base):
    __tablename__ = "queues"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)

    __table_args__ = (UniqueConstraint("cluster_id", "name", name="uq_queues_cluster_id_name"),)


class ReservationRow(Base):
    __tablename__ = "reservations"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Double)

    __table_args__ = (UniqueConstraint("cluster_id", "name", name="uq_reservations_cluster_id_name"),)


class PriorityClassRow(Base):
    __tablename__ = "priority_classes"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer)
    preemption: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Double)


class LeaderLeaseRow(Base):
    """The leadership lease of the servers sharing this store (``store.lease``): one row per
    lease name; ``term`` is the fencing token, raised by every takeover."""

    __tablename__ = "leader_lease"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    url: Mapped[str] = mapped_column(String(512))
    term: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[float] = mapped_column(Double)
