"""Advance reservations (``podfleet.control.reservations``): one row per reservation of a
cluster, its spec (chips, window, queue) as JSON.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

from podfleet.store.migrations import ops

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    ops.create_cluster_specs("reservations")


def downgrade() -> None:
    op.drop_table("reservations")
