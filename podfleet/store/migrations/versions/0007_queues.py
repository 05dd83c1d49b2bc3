"""Cluster queues (``podfleet.scheduler.queues``): one row per queue of a cluster, its
spec (nominal quota, cohort, limits, weight, reclaim policy) as JSON; and priority
classes (``control.priorities``): a name for a priority value and preemption policy.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queues",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_queues"),
        sa.UniqueConstraint("cluster_id", "name", name="uq_queues_cluster_id_name"),
    )
    op.create_table(
        "priority_classes",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.Column("preemption", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_priority_classes"),
    )


def downgrade() -> None:
    op.drop_table("priority_classes")
    op.drop_table("queues")
