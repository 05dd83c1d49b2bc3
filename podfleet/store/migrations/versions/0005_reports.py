"""Health reports archived in the store: one row per report (``podfleet.advisor.reports``)
with its JSON and HTML as generated and the figures a listing shows; retention prunes
rows older than ``PODFLEET_REPORT_RETENTION_DAYS``.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa

from podfleet.store.migrations import ops

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    ops.create_table(
        "health_reports",
        ops.ident(),
        ops.ident("cluster_id"),
        ops.seconds("created_at"),
        ops.seconds("period_s"),
        ops.doc("summary"),
        ops.column("json_text", sa.Text()),
        ops.column("html_text", sa.Text()),
    )
    ops.create_index("health_reports", "cluster_id", "created_at")


def downgrade() -> None:
    ops.drop_table("health_reports", ("cluster_id", "created_at"))
