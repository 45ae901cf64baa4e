"""serving-benchmark results users upload, with their validation

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 15:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "serving_runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("gpu_id", sa.String(length=64), nullable=False),
        sa.Column("model_id", sa.String(length=64), nullable=False),
        sa.Column("tool", sa.String(length=16), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("validation", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpus.id"], name=op.f("fk_serving_runs_gpu_id_gpus"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_serving_runs")),
    )
    op.create_index(op.f("ix_serving_runs_gpu_id"), "serving_runs", ["gpu_id"])
    op.create_index(op.f("ix_serving_runs_created_at"), "serving_runs", ["created_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_serving_runs_created_at"), table_name="serving_runs")
    op.drop_index(op.f("ix_serving_runs_gpu_id"), table_name="serving_runs")
    op.drop_table("serving_runs")
