"""the format a model's published weights are in

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(
            sa.Column(
                "checkpoint_dtype", sa.String(length=16), nullable=False, server_default="bf16"
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("checkpoint_dtype")
