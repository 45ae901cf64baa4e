"""catalog: gpus, models, tombstones

Revision ID: 0001
Revises:
Create Date: 2026-11-29 08:51:44.833942
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "catalog_tombstones",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("kind", "id", name=op.f("pk_catalog_tombstones")),
    )
    op.create_table(
        "gpus",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("vendor", sa.String(length=32), nullable=False),
        sa.Column("architecture", sa.String(length=32), nullable=True),
        sa.Column("form_factor", sa.String(length=32), nullable=True),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("memory_type", sa.String(length=32), nullable=True),
        sa.Column("memory_bandwidth_bytes_per_s", sa.Float(), nullable=False),
        sa.Column("peak_flops_per_s", sa.JSON(), nullable=False),
        sa.Column("interconnect", sa.JSON(), nullable=False),
        sa.Column("tdp_watts", sa.Float(), nullable=True),
        sa.Column("aliases", sa.JSON(), nullable=False),
        sa.Column("price_per_gpu_hour_usd", sa.Float(), nullable=True),
        sa.Column("price_note", sa.Text(), nullable=True),
        sa.Column("efficiency", sa.JSON(), nullable=True),
        sa.Column("sources", sa.JSON(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("user_modified", sa.Boolean(), nullable=False),
        sa.Column("bundled_digest", sa.String(length=64), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpus")),
    )
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpus_memory_bytes"), ["memory_bytes"], unique=False)
        batch_op.create_index(batch_op.f("ix_gpus_vendor"), ["vendor"], unique=False)

    op.create_table(
        "models",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("hf_repo", sa.String(length=200), nullable=True),
        sa.Column("num_layers", sa.Integer(), nullable=False),
        sa.Column("hidden_size", sa.Integer(), nullable=False),
        sa.Column("num_attention_heads", sa.Integer(), nullable=False),
        sa.Column("num_kv_heads", sa.Integer(), nullable=False),
        sa.Column("head_dim", sa.Integer(), nullable=False),
        sa.Column("intermediate_size", sa.Integer(), nullable=False),
        sa.Column("ffn_type", sa.String(length=16), nullable=False),
        sa.Column("vocab_size", sa.Integer(), nullable=False),
        sa.Column("max_context_tokens", sa.Integer(), nullable=False),
        sa.Column("tie_word_embeddings", sa.Boolean(), nullable=False),
        sa.Column("attention_bias", sa.Boolean(), nullable=False),
        sa.Column("moe", sa.JSON(), nullable=True),
        sa.Column("params_total", sa.BigInteger(), nullable=False),
        sa.Column("params_active", sa.BigInteger(), nullable=False),
        sa.Column("published_params", sa.BigInteger(), nullable=True),
        sa.Column("sources", sa.JSON(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("user_modified", sa.Boolean(), nullable=False),
        sa.Column("bundled_digest", sa.String(length=64), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
    )
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_models_family"), ["family"], unique=False)
        batch_op.create_index(batch_op.f("ix_models_params_total"), ["params_total"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_models_params_total"))
        batch_op.drop_index(batch_op.f("ix_models_family"))

    op.drop_table("models")
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpus_vendor"))
        batch_op.drop_index(batch_op.f("ix_gpus_memory_bytes"))

    op.drop_table("gpus")
    op.drop_table("catalog_tombstones")
