"""Initial schema: clusters, jobs, chip_health, checkpoints, idempotency_keys, tokens,
audit_events (append-only, enforced by triggers on both SQLite and PostgreSQL).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

APPEND_ONLY = "audit_events is append-only"


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_clusters"),
    )
    op.create_index(
        "uq_clusters_live_name", "clusters", ["name"], unique=True,
        sqlite_where=sa.text("state != 'deleted'"),
        postgresql_where=sa.text("state != 'deleted'"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"], name="fk_jobs_cluster_id_clusters"),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_cluster_id", "jobs", ["cluster_id"])
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_table(
        "chip_health",
        sa.Column("cluster_id", sa.String(64), nullable=False),
        sa.Column("chip", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("spare", sa.Boolean(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"], name="fk_chip_health_cluster_id_clusters"),
        sa.PrimaryKeyConstraint("cluster_id", "chip", name="pk_chip_health"),
    )
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_checkpoints_job_id_jobs"),
        sa.PrimaryKeyConstraint("id", name="pk_checkpoints"),
    )
    op.create_index("ix_checkpoints_job_id_step", "checkpoints", ["job_id", "step"])
    op.create_table(
        "idempotency_keys",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("client_token", sa.String(255), nullable=False),
        sa.Column("resource_id", sa.String(64), nullable=False),
        sa.Column("request_hash", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_idempotency_keys"),
        sa.UniqueConstraint("operation", "client_token", name="uq_idempotency_keys_operation_client_token"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("token_hash", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_tokens_token_hash"),
    )
    op.create_table(
        "audit_events",
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("action", sa.String(128), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("result", sa.String(128), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_audit_events"),
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
