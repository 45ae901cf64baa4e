"""profiles users upload: measured kernel times of a GPU under a serving engine version

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("gpu_id", sa.String(length=64), nullable=False),
        sa.Column("engine", sa.String(length=16), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpus.id"], name=op.f("fk_profiles_gpu_id_gpus"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_profiles")),
    )
    op.create_index(op.f("ix_profiles_gpu_id"), "profiles", ["gpu_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_profiles_gpu_id"), table_name="profiles")
    op.drop_table("profiles")
