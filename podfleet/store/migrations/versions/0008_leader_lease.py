"""The leadership lease (``podfleet.store.lease``): servers sharing a PostgreSQL store
elect one leader through this row; its ``term`` is the fencing token every write of the
leader checks in its own transaction.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from podfleet.store.migrations import ops

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    ops.create_table(
        "leader_lease",
        ops.column("name", sa.String(32)),
        ops.column("holder", sa.String(128)),
        ops.column("url", sa.String(512)),
        ops.column("term", sa.Integer()),
        ops.seconds("expires_at"),
        primary_key=("name",),
    )


def downgrade() -> None:
    op.drop_table("leader_lease")
