"""Health reports archived in the store: one row per report (``podfleet.advisor.reports``)
with its JSON and HTML as generated and the figures a listing shows; retention prunes
rows older than ``PODFLEET_REPORT_RETENTION_DAYS``.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "health_reports",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("period_s", sa.Double(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("json_text", sa.Text(), nullable=False),
        sa.Column("html_text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_health_reports"),
    )
    op.create_index("ix_health_reports_cluster_id_created_at", "health_reports", ["cluster_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_health_reports_cluster_id_created_at", table_name="health_reports")
    op.drop_table("health_reports")
