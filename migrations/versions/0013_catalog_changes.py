"""each catalog write, with the principal that made it: an entry's history

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-08 02:30:00.000000

Writes before this migration left no record.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "catalog_changes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("entry_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("principal", sa.String(length=64), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catalog_changes")),
    )
    with op.batch_alter_table("catalog_changes") as batch:
        batch.create_index(batch.f("ix_catalog_changes_entry_id"), ["entry_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("catalog_changes") as batch:
        batch.drop_index(batch.f("ix_catalog_changes_entry_id"))
    op.drop_table("catalog_changes")
