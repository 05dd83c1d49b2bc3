"""Initial schema: clusters, jobs, chip_health, checkpoints, idempotency_keys, tokens,
audit_events (append-only, enforced by triggers on both SQLite and PostgreSQL).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from podfleet.store.migrations import ops

revision = "0001"
down_revision = None

APPEND_ONLY = "audit_events is append-only"


def upgrade() -> None:
    ops.create_table("clusters", ops.ident(), ops.column("name", sa.String(255)), *ops.record())
    op.create_index(
        "uq_clusters_live_name", "clusters", ["name"], unique=True,
        sqlite_where=sa.text("state != 'deleted'"),
        postgresql_where=sa.text("state != 'deleted'"),
    )
    ops.create_table("jobs", ops.ident(), ops.ident("cluster_id"), *ops.record(),
                     references={"cluster_id": "clusters"})
    ops.create_index("jobs", "cluster_id")
    ops.create_index("jobs", "state")
    ops.create_table(
        "chip_health",
        ops.ident("cluster_id"),
        ops.column("chip", sa.Integer(), autoincrement=False),
        ops.column("state", sa.String(32)),
        ops.column("spare", sa.Boolean()),
        ops.doc("detail"),
        primary_key=("cluster_id", "chip"),
        references={"cluster_id": "clusters"},
    )
    ops.create_table(
        "checkpoints",
        ops.ident(),
        ops.ident("job_id"),
        ops.column("step", sa.Integer()),
        ops.column("path", sa.Text()),
        ops.seconds("created_at"),
        ops.doc("detail"),
        references={"job_id": "jobs"},
    )
    ops.create_index("checkpoints", "job_id", "step")
    ops.create_table(
        "idempotency_keys",
        ops.serial(),
        ops.column("operation", sa.String(64)),
        ops.column("client_token", sa.String(255)),
        ops.ident("resource_id"),
        ops.column("request_hash", sa.String(128)),
        ops.seconds("created_at"),
        unique=("operation", "client_token"),
    )
    ops.create_table(
        "tokens",
        ops.ident(),
        ops.column("name", sa.String(255)),
        ops.column("role", sa.String(32)),
        ops.column("token_hash", sa.String(128)),
        ops.seconds("created_at"),
        ops.column("revoked", sa.Boolean()),
        unique=("token_hash",),
    )
    ops.create_table(
        "audit_events",
        ops.column("seq", sa.Integer(), autoincrement=False),
        ops.seconds("time"),
        ops.column("actor", sa.String(255)),
        ops.column("action", sa.String(128)),
        ops.column("target", sa.String(255)),
        ops.column("result", sa.String(128)),
        ops.column("detail", sa.Text()),
        ops.column("prev_hash", sa.String(64)),
        ops.column("hash", sa.String(64)),
        primary_key=("seq",),
    )
    _append_only_triggers()


def _append_only_triggers() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_events_no_{verb.lower()} BEFORE {verb} ON audit_events "
                f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END"
            )
    elif dialect == "postgresql":
        op.execute(
            "CREATE FUNCTION podfleet_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{APPEND_ONLY}'; END $$"
        )
        op.execute(
            "CREATE TRIGGER audit_events_no_update_delete BEFORE UPDATE OR DELETE ON audit_events "
            "FOR EACH ROW EXECUTE FUNCTION podfleet_audit_append_only()"
        )
        op.execute(
            "CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events "
            "FOR EACH STATEMENT EXECUTE FUNCTION podfleet_audit_append_only()"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS audit_events_no_update")
        op.execute("DROP TRIGGER IF EXISTS audit_events_no_delete")
    elif dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_events_no_update_delete ON audit_events")
        op.execute("DROP TRIGGER IF EXISTS audit_events_no_truncate ON audit_events")
        op.execute("DROP FUNCTION IF EXISTS podfleet_audit_append_only()")
    for table in ("audit_events", "tokens", "idempotency_keys", "checkpoints", "chip_health", "jobs", "clusters"):
        op.drop_table(table)
