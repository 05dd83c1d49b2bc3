"""Telemetry rollups: one row per (cluster, scope, metric, resolution, bucket) holding the
whole fabric's avg/min/max arrays as JSON (64 chips x 8 metrics is 8 rows a minute).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "telemetry_rollups",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cluster_id", sa.String(64), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("resolution_s", sa.Double(), nullable=False),
        sa.Column("t_start", sa.Double(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_telemetry_rollups"),
        sa.UniqueConstraint("cluster_id", "scope", "metric", "resolution_s", "t_start",
                            name="uq_telemetry_rollups_bucket"),
    )
    op.create_index("ix_telemetry_rollups_resolution_s_t_start", "telemetry_rollups", ["resolution_s", "t_start"])


def downgrade() -> None:
    op.drop_index("ix_telemetry_rollups_resolution_s_t_start", table_name="telemetry_rollups")
    op.drop_table("telemetry_rollups")
