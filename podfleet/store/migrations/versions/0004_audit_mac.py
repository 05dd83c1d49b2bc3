"""The audit trail, keyed and with retention:

- ``audit_events.key_id``: the id of the MAC key that chains each record
  (``security/audit.py``); NULL for records written before the chain was keyed (plain
  SHA-256), so an upgraded trail still verifies from its first record.
- ``users``: people and automation owning tokens, with their policies and (sealed) TOTP.
- ``audit_archives``: one row per archived segment (records ``first_seq..through_seq``,
  the last one's hash, where the compressed, encrypted archive went, its SHA-256).
- The append-only triggers now let a DELETE through for records an archive row covers,
  and for nothing else: retention prunes what was archived; UPDATE and TRUNCATE stay
  forbidden.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from podfleet.store.migrations import ops

revision = "0004"
down_revision = "0003"

APPEND_ONLY = "audit_events is append-only"


def upgrade() -> None:
    # ADD COLUMN touches no row, so the append-only triggers (0001) are not involved.
    op.add_column("audit_events", sa.Column("key_id", sa.String(64), nullable=True))
    ops.create_table(
        "audit_archives",
        ops.column("through_seq", sa.Integer(), autoincrement=False),
        ops.column("first_seq", sa.Integer()),
        ops.column("through_hash", sa.String(64)),
        ops.column("location", sa.String(1024)),
        ops.column("sha256", sa.String(64)),
        ops.seconds("created_at"),
        primary_key=("through_seq",),
    )
    ops.create_table(
        "users",
        ops.column("name", sa.String(64)),
        ops.doc("policies"),
        ops.doc("inline"),
        ops.seconds("created_at"),
        ops.column("mfa_secret", sa.Text(), nullable=True),
        ops.column("mfa_last_step", sa.Integer()),
        ops.column("recovery", sa.JSON(), nullable=True),
        primary_key=("name",),
    )
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER audit_events_no_delete")
        op.execute(
            "CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events "
            "WHEN OLD.seq > (SELECT COALESCE(MAX(through_seq), 0) FROM audit_archives) "
            f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END"
        )
    elif dialect == "postgresql":
        op.execute(
            "CREATE OR REPLACE FUNCTION podfleet_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF TG_OP = 'DELETE' AND OLD.seq <= (SELECT COALESCE(MAX(through_seq), 0) FROM audit_archives) "
            f"THEN RETURN OLD; END IF; RAISE EXCEPTION '{APPEND_ONLY}'; END $$"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER audit_events_no_delete")
        op.execute(f"CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events "
                   f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END")
    elif dialect == "postgresql":
        op.execute("CREATE OR REPLACE FUNCTION podfleet_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
                   f"$$ BEGIN RAISE EXCEPTION '{APPEND_ONLY}'; END $$")
    op.drop_table("users")
    op.drop_table("audit_archives")
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_column("key_id")
