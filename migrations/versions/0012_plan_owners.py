"""plans belong to the principal whose key created them

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-08 02:20:00.000000

Plans stored before have no owner: only an admin key lists, cancels or deletes them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=64), nullable=True))
        batch.create_index(batch.f("ix_plans_owner"), ["owner"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_index(batch.f("ix_plans_owner"))
        batch.drop_column("owner")
