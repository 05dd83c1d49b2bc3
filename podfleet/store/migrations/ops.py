"""What the version files share: the schema's conventions and the column kinds it repeats.

- Every column is NOT NULL unless it says ``nullable=True``.
- Constraint and index names follow ``store.models.NAMING``, spelled out here (not read
  from the models) so that a released migration never changes with them: ``pk_<table>``,
  ``ix_<table>_<columns>``, ``uq_<table>_<columns>``, ``fk_<table>_<column>_<referred>``.
- An id, or a reference to one, is ``String(64)``; times and durations are seconds in a
  ``Double``.

A released migration's DDL must never change, so neither may what a helper here emits: a
new convention is a new helper.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.types import TypeEngine


def column(name: str, type_: TypeEngine[Any], **kw: Any) -> sa.Column[Any]:
    """A column, NOT NULL unless ``nullable=True``."""
    kw.setdefault("nullable", False)
    return sa.Column(name, type_, **kw)


def ident(name: str = "id") -> sa.Column[Any]:
    """An id, or a reference to one (``String(64)``)."""
    return column(name, sa.String(64))


def serial(name: str = "id") -> sa.Column[Any]:
    """An integer key the database numbers."""
    return column(name, sa.Integer(), autoincrement=True)


def seconds(name: str) -> sa.Column[Any]:
    """A time (Unix seconds) or a duration (seconds)."""
    return column(name, sa.Double())


def doc(name: str) -> sa.Column[Any]:
    """A JSON document."""
    return column(name, sa.JSON())


def timestamps() -> tuple[sa.Column[Any], sa.Column[Any]]:
    """``created_at`` and ``updated_at``."""
    return seconds("created_at"), seconds("updated_at")


def record() -> tuple[sa.Column[Any], ...]:
    """The columns of a record with a lifecycle (a cluster, a job): its state, the spec it
    was asked with, its status as last observed, and when it was made and last changed."""
    return column("state", sa.String(32)), doc("spec"), doc("status"), *timestamps()


def create_table(
    name: str,
    *columns: sa.Column[Any],
    primary_key: Sequence[str] = ("id",),
    references: Mapping[str, str] | None = None,
    unique: Sequence[str] = (),
    unique_name: str | None = None,
) -> None:
    """Create table ``name`` with its primary key, the foreign keys ``references``
    (column -> referred table, on its ``id``) and at most one unique constraint, all named
    by the conventions (``unique_name`` overrides the unique constraint's)."""
    constraints: list[sa.Constraint] = [
        sa.ForeignKeyConstraint([col], [f"{table}.id"], name=f"fk_{name}_{col}_{table}")
        for col, table in (references or {}).items()
    ]
    constraints.append(sa.PrimaryKeyConstraint(*primary_key, name=f"pk_{name}"))
    if unique:
        constraints.append(
            sa.UniqueConstraint(*unique, name=unique_name or f"uq_{name}_{'_'.join(unique)}")
        )
    op.create_table(name, *columns, *constraints)


def create_rollups(name: str, *owner: sa.Column[Any]) -> None:
    """A table of rollups: one row per ``owner`` (the columns a series is kept for),
    resolution and bucket start, the bucket's figures as JSON; unique per bucket."""
    keys = [col.name for col in owner]
    create_table(
        name,
        serial(),
        *owner,
        seconds("resolution_s"),
        seconds("t_start"),
        doc("data"),
        unique=(*keys, "resolution_s", "t_start"),
        unique_name=f"uq_{name}_bucket",
    )


def create_cluster_specs(name: str, *, updated_at: bool = False) -> None:
    """A table of named objects of a cluster (queues, reservations): the object's spec as
    JSON, one name per cluster."""
    stamps = timestamps() if updated_at else (seconds("created_at"),)
    create_table(
        name,
        ident(),
        ident("cluster_id"),
        column("name", sa.String(64)),
        doc("spec"),
        *stamps,
        unique=("cluster_id", "name"),
    )


def index_name(table: str, columns: Sequence[str]) -> str:
    return f"ix_{table}_{'_'.join(columns)}"


def create_index(table: str, *columns: str) -> None:
    """A plain index on ``columns``, named by the convention."""
    op.create_index(index_name(table, columns), table, list(columns))


def drop_table(name: str, *indexed: Sequence[str]) -> None:
    """Drop table ``name`` after the indexes on each of ``indexed`` (column lists)."""
    for columns in indexed:
        op.drop_index(index_name(name, columns), table_name=name)
    op.drop_table(name)
