"""Job metrics history: per-job rollups of the training loop's figures (loss, tokens/s,
step time), one row per (job, resolution, bucket) so a long run keeps a bounded history.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

from podfleet.store.migrations import ops

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    ops.create_rollups("job_metric_rollups", ops.ident("job_id"))


def downgrade() -> None:
    op.drop_table("job_metric_rollups")
