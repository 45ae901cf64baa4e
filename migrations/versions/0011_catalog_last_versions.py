"""the last version of every deleted catalog entry, so a re-created id continues the count

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-08 01:40:00.000000

A model or GPU deleted and created again under the same id starts at the version after the
one it was deleted at, so an ETag (and a plan's `catalog_versions`) never names two different
entries. Entries deleted before this migration left no record and start at 1 again.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "catalog_last_versions",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("last_version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "id", name=op.f("pk_catalog_last_versions")),
    )


def downgrade() -> None:
    op.drop_table("catalog_last_versions")
