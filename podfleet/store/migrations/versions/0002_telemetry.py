"""Telemetry rollups: one row per (cluster, scope, metric, resolution, bucket) holding the
whole fabric's avg/min/max arrays as JSON (64 chips x 8 metrics is 8 rows a minute).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa

from podfleet.store.migrations import ops

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    ops.create_rollups(
        "telemetry_rollups",
        ops.ident("cluster_id"),
        ops.column("scope", sa.String(16)),
        ops.column("metric", sa.String(64)),
    )
    ops.create_index("telemetry_rollups", "resolution_s", "t_start")


def downgrade() -> None:
    ops.drop_table("telemetry_rollups", ("resolution_s", "t_start"))
