"""benchmark runs, their points, and GPU calibrations

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 09:07:14.810363
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "benchmark_runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("bundled_digest", sa.String(length=64), nullable=True),
        sa.Column("gpu_id", sa.String(length=64), nullable=True),
        sa.Column("model_id", sa.String(length=64), nullable=True),
        sa.Column("device_name", sa.String(length=200), nullable=False),
        sa.Column("device_kind", sa.String(length=16), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("tp", sa.Integer(), nullable=False),
        sa.Column("provenance_kind", sa.String(length=32), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmark_runs")),
    )
    with op.batch_alter_table("benchmark_runs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_benchmark_runs_device_name"), ["device_name"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_benchmark_runs_gpu_id"), ["gpu_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_benchmark_runs_model_id"), ["model_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_benchmark_runs_stored_at"), ["stored_at"], unique=False
        )

    op.create_table(
        "benchmark_points",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("context_tokens", sa.Integer(), nullable=True),
        sa.Column("median_ms", sa.Float(), nullable=True),
        sa.Column("p10_ms", sa.Float(), nullable=True),
        sa.Column("p90_ms", sa.Float(), nullable=True),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("skipped_reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["benchmark_runs.id"],
            name=op.f("fk_benchmark_points_run_id_benchmark_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "position", name=op.f("pk_benchmark_points")),
    )

    op.create_table(
        "calibrations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("gpu_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_ids", sa.JSON(), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("before", sa.JSON(), nullable=False),
        sa.Column("after", sa.JSON(), nullable=False),
        sa.Column("before_mape_pct", sa.Float(), nullable=False),
        sa.Column("after_mape_pct", sa.Float(), nullable=False),
        sa.Column("before_mape_pct_by_phase", sa.JSON(), nullable=False),
        sa.Column("after_mape_pct_by_phase", sa.JSON(), nullable=False),
        sa.Column("gpu_version_before", sa.Integer(), nullable=False),
        sa.Column("gpu_version_after", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["gpu_id"],
            ["gpus.id"],
            name=op.f("fk_calibrations_gpu_id_gpus"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibrations")),
    )
    with op.batch_alter_table("calibrations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_calibrations_gpu_id"), ["gpu_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("calibrations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_calibrations_gpu_id"))

    op.drop_table("calibrations")
    op.drop_table("benchmark_points")
    with op.batch_alter_table("benchmark_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_benchmark_runs_stored_at"))
        batch_op.drop_index(batch_op.f("ix_benchmark_runs_model_id"))
        batch_op.drop_index(batch_op.f("ix_benchmark_runs_gpu_id"))
        batch_op.drop_index(batch_op.f("ix_benchmark_runs_device_name"))

    op.drop_table("benchmark_runs")
