"""a model's architecture as one JSON document, derived from the engine's ModelSpec

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 12:30:00.000000

The thirteen architecture columns become `architecture`, the document
`app.formats.specs.spec_document` writes, so that a field added to the spec needs no migration.
Existing rows are copied over as they stand (the JSON keys are the column names).
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The columns as 0001 and 0004 made them, in ModelSpec's order.
_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("num_layers", sa.Integer()),
    ("hidden_size", sa.Integer()),
    ("num_attention_heads", sa.Integer()),
    ("num_kv_heads", sa.Integer()),
    ("head_dim", sa.Integer()),
    ("intermediate_size", sa.Integer()),
    ("ffn_type", sa.String(length=16)),
    ("vocab_size", sa.Integer()),
    ("max_context_tokens", sa.Integer()),
    ("tie_word_embeddings", sa.Boolean()),
    ("attention_bias", sa.Boolean()),
    ("moe", sa.JSON()),
    ("checkpoint_dtype", sa.String(length=16)),
)


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("architecture", sa.JSON(), nullable=True))
    models = sa.table(
        "models",
        sa.column("id", sa.String()),
        sa.column("architecture", sa.JSON()),
        *(sa.column(name, kind) for name, kind in _COLUMNS),
    )
    connection = op.get_bind()
    rows = connection.execute(sa.select(models)).mappings().all()
    for row in rows:
        document = {name: row[name] for name, _ in _COLUMNS}
        connection.execute(
            models.update().where(models.c.id == row["id"]).values(architecture=document)
        )
    with op.batch_alter_table("models") as batch:
        batch.alter_column("architecture", existing_type=sa.JSON(), nullable=False)
        for name, _ in _COLUMNS:
            batch.drop_column(name)


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        for name, kind in _COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    models = sa.table(
        "models",
        sa.column("id", sa.String()),
        sa.column("architecture", sa.JSON()),
        *(sa.column(name, kind) for name, kind in _COLUMNS),
    )
    connection = op.get_bind()
    for row in connection.execute(sa.select(models.c.id, models.c.architecture)).all():
        document = row.architecture or {}
        connection.execute(
            models.update()
            .where(models.c.id == row.id)
            .values({name: document.get(name) for name, _ in _COLUMNS})
        )
    with op.batch_alter_table("models") as batch:
        batch.drop_column("architecture")
