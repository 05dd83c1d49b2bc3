"""Failed second-factor attempts per user (``security/mfa.Attempts``), kept in the store
so a restart does not hand a brute-forcer a fresh count:

- ``users.mfa_failures`` / ``users.recovery_failures``: consecutive wrong TOTP and
  recovery codes;
- ``users.mfa_blocked_until``: wall-clock seconds before which no code is checked (the
  exponential back-off);
- ``users.mfa_locked``: set after ``MAX_FAILURES`` wrong codes of a kind, cleared only by
  an admin (``UnlockUser``).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    # Existing users start with no failures and unlocked (the server defaults).
    op.add_column("users", sa.Column("mfa_failures", sa.Integer(), server_default="0", nullable=False))
    op.add_column("users", sa.Column("recovery_failures", sa.Integer(), server_default="0", nullable=False))
    op.add_column("users", sa.Column("mfa_blocked_until", sa.Double(), server_default="0", nullable=False))
    op.add_column("users", sa.Column("mfa_locked", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        for column in ("mfa_locked", "mfa_blocked_until", "recovery_failures", "mfa_failures"):
            batch.drop_column(column)
