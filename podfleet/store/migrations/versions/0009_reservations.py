"""Advance reservations (``podfleet.control.reservations``): one row per reservation of a
cluster, its spec (chips, window, queue) as JSON.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reservations"),
        sa.UniqueConstraint("cluster_id", "name", name="uq_reservations_cluster_id_name"),
    )


def downgrade() -> None:
    op.drop_table("reservations")
