"""each GPU's expected error, stored when a run, a calibration or the GPU changes

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 13:40:00.000000

The next `ridgeline load-catalog` (or `make run`) computes it for every GPU.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_expected_errors",
        sa.Column("gpu_id", sa.String(length=64), nullable=False),
        sa.Column("expected_error_pct", sa.JSON(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["gpu_id"],
            ["gpus.id"],
            name=op.f("fk_gpu_expected_errors_gpu_id_gpus"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("gpu_id", name=op.f("pk_gpu_expected_errors")),
    )


def downgrade() -> None:
    op.drop_table("gpu_expected_errors")
