"""One migration history for both databases: up, all the way down, and up again."""

from __future__ import annotations

from sqlalchemy import inspect

from app.db.migrate import downgrade, upgrade
from app.db.session import Base, make_engine


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    expected = set(Base.metadata.tables)
    assert _tables(database_url) == expected  # the fixture upgraded to head
    downgrade(database_url, "base")
    assert _tables(database_url) == set()
    upgrade(database_url)
    assert _tables(database_url) == expected


def test_models_match_migrations(database_url: str) -> None:
    """The ORM and the migrations describe the same schema (autogenerate finds nothing)."""
    from alembic.autogenerate import compare_metadata  # noqa: PLC0415
    from alembic.migration import MigrationContext  # noqa: PLC0415

    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_architecture_columns_move_into_one_document_and_back(database_url: str) -> None:
    """0005 copies a model's thirteen architecture columns into `architecture` and 0004 gets
    them back: no stored model loses a field either way."""
    from sqlalchemy import text  # noqa: PLC0415

    downgrade(database_url, "0004")
    engine = make_engine(database_url)
    columns = {
        "num_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "ffn_type": "gated",
        "vocab_size": 128256,
        "max_context_tokens": 8192,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "checkpoint_dtype": "bf16",
    }
    try:
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM models"))
            names = ", ".join(columns)
            values = ", ".join(f":{name}" for name in columns)
            connection.execute(
                text(
                    "INSERT INTO models (id, origin, user_modified, version, created_at, "
                    f"updated_at, name, family, params_total, params_active, sources, {names}) "
                    "VALUES ('m', 'user', false, 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 'M', "
                    f"'llama', 8030261248, 8030261248, '[]', {values})"
                ),
                columns,
            )
        upgrade(database_url)
        with engine.connect() as connection:
            stored = connection.execute(text("SELECT architecture FROM models")).scalar_one()
        if isinstance(stored, str):
            import json  # noqa: PLC0415

            stored = json.loads(stored)
        assert stored == columns | {"moe": None}
        downgrade(database_url, "0004")
        with engine.connect() as connection:
            back = connection.execute(text("SELECT num_kv_heads, ffn_type FROM models")).one()
        assert tuple(back) == (8, "gated")
    finally:
        engine.dispose()
        upgrade(database_url)
