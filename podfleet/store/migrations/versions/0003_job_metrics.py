"""Job metrics history: per-job rollups of the training loop's figures (loss, tokens/s,
step time), one row per (job, resolution, bucket) so a long run keeps a bounded history.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_metric_rollups",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("resolution_s", sa.Double(), nullable=False),
        sa.Column("t_start", sa.Double(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_metric_rollups"),
        sa.UniqueConstraint("job_id", "resolution_s", "t_start", name="uq_job_metric_rollups_bucket"),
    )


def downgrade() -> None:
    op.drop_table("job_metric_rollups")
