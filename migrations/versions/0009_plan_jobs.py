"""plans as jobs: status, progress, error and the worker's lease; stored plans are done

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 20:15:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("status", sa.String(length=16), server_default="done", nullable=False)
        )
        batch_op.add_column(sa.Column("progress", sa.Float(), server_default="1", nullable=False))
        batch_op.add_column(sa.Column("error", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("attempts", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.alter_column("response", existing_type=sa.JSON(), nullable=True)
        batch_op.alter_column("summary", existing_type=sa.JSON(), nullable=True)
        batch_op.create_index(batch_op.f("ix_plans_status"), ["status"], unique=False)
    # Plans stored before jobs were planned at once: done, finished when created.
    op.execute("UPDATE plans SET finished_at = created_at")


def downgrade() -> None:
    # Plans without an answer (queued, running, failed, cancelled) cannot be kept.
    op.execute("DELETE FROM plans WHERE response IS NULL OR summary IS NULL")
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_plans_status"))
        batch_op.alter_column("summary", existing_type=sa.JSON(), nullable=False)
        batch_op.alter_column("response", existing_type=sa.JSON(), nullable=False)
        batch_op.drop_column("finished_at")
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("lease_owner")
        batch_op.drop_column("attempts")
        batch_op.drop_column("error")
        batch_op.drop_column("progress")
        batch_op.drop_column("status")
