"""The leadership lease (``podfleet.store.lease``): servers sharing a PostgreSQL store
elect one leader through this row; its ``term`` is the fencing token every write of the
leader checks in its own transaction.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leader_lease",
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("url", sa.String(512), nullable=False),
        sa.Column("term", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_leader_lease"),
    )


def downgrade() -> None:
    op.drop_table("leader_lease")
