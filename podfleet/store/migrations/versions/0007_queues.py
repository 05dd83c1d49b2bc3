"""Cluster queues (``podfleet.scheduler.queues``): one row per queue of a cluster, its
spec (nominal quota, cohort, limits, weight, reclaim policy) as JSON; and priority
classes (``control.priorities``): a name for a priority value and preemption policy.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from podfleet.store.migrations import ops

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    ops.create_cluster_specs("queues", updated_at=True)
    ops.create_table(
        "priority_classes",
        ops.column("name", sa.String(64)),
        ops.column("value", sa.Integer()),
        ops.column("preemption", sa.String(16)),
        ops.seconds("created_at"),
        primary_key=("name",),
    )


def downgrade() -> None:
    op.drop_table("priority_classes")
    op.drop_table("queues")
