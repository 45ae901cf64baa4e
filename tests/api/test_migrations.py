"""One migration history for both databases: up, all the way down, and up again."""

from __future__ import annotations

from pathlib import Path

from procrastinate.schema import SchemaManager
from sqlalchemy import inspect

from app.db.migrate import downgrade, upgrade
from app.db.session import Base, make_engine
from app.plans.queue import procrastinate_owns

# Procrastinate's job queue (plan jobs on PostgreSQL), created by 0010 from the library's SQL.
PROCRASTINATE_TABLES = {
    "procrastinate_events",
    "procrastinate_jobs",
    "procrastinate_periodic_defers",
    "procrastinate_workers",
}


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    expected = set(Base.metadata.tables)
    if database_url.startswith("postgresql"):
        expected |= PROCRASTINATE_TABLES  # SQLite runs plans in-process: no queue schema
    assert _tables(database_url) == expected  # the fixture upgraded to head
    downgrade(database_url, "0009")  # before the queue schema and the catalog's records
    assert _tables(database_url) == set(Base.metadata.tables) - {
        "catalog_last_versions",
        "catalog_changes",
    }
    downgrade(database_url, "base")
    assert _tables(database_url) == set()
    upgrade(database_url)
    assert _tables(database_url) == expected


def test_the_queue_schema_is_the_installed_procrastinate_release() -> None:
    """0010 applies procrastinate's own schema as of the pinned release; a new release needs a
    migration applying its `sql/migrations` files (then this file is the new schema)."""
    vendored = Path(__file__).resolve().parents[2] / "migrations/sql/procrastinate-3.10.0.sql"
    assert vendored.read_text(encoding="utf-8") == SchemaManager.get_schema()
    assert {name for name in PROCRASTINATE_TABLES if procrastinate_owns(name)} == (
        PROCRASTINATE_TABLES
    )
    assert not any(procrastinate_owns(name) for name in Base.metadata.tables)


def test_models_match_migrations(database_url: str) -> None:
    """The ORM and the migrations describe the same schema (autogenerate finds nothing).
    Procrastinate's tables are left out, as migrations/env.py leaves them out: the library
    owns them (0010 creates them from its SQL), and they are not in `Base.metadata`, so
    autogenerate would otherwise ask to drop them."""
    from alembic.autogenerate import compare_metadata  # noqa: PLC0415
    from alembic.migration import MigrationContext  # noqa: PLC0415

    def include_name(name: str | None, type_: str, _parents: object) -> bool:
        return not (type_ == "table" and name is not None and procrastinate_owns(name))

    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "include_name": include_name}
            )
            assert compare_metadata(context, Base.metadata) == []
            if database_url.startswith("postgresql"):
                unfiltered = MigrationContext.configure(connection, opts={"compare_type": True})
                diffs = compare_metadata(unfiltered, Base.metadata)
                dropped = {diff[1].name for diff in diffs if diff[0] == "remove_table"}
                assert dropped == PROCRASTINATE_TABLES  # what the filter is there for
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


def test_plans_stored_before_jobs_become_done_and_unanswered_ones_go_back(
    database_url: str,
) -> None:
    """0009 makes the plans table a job queue: a plan stored before is `done`, progress 1,
    finished when created; going back to 0008, plans without an answer are dropped."""
    import json  # noqa: PLC0415

    from sqlalchemy import text  # noqa: PLC0415

    downgrade(database_url, "0008")
    engine = make_engine(database_url)
    insert = text(
        "INSERT INTO plans (id, created_at, model_id, requests_per_s, request, response, "
        "catalog_versions, summary) VALUES (:id, :created_at, 'llama-3-8b', 10, '{}', "
        ":response, '{}', '{}')"
    )
    try:
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM plans"))
            connection.execute(
                insert,
                {"id": "old", "created_at": "2026-11-30 12:00:00", "response": '{"plans": []}'},
            )
        upgrade(database_url)
        with engine.begin() as connection:
            old = connection.execute(
                text("SELECT status, progress, attempts, finished_at, created_at FROM plans")
            ).one()
            assert (old.status, old.progress, old.attempts) == ("done", 1.0, 0)
            assert str(old.finished_at) == str(old.created_at)
            connection.execute(
                text(
                    "INSERT INTO plans (id, created_at, model_id, requests_per_s, request, "
                    "catalog_versions, status, progress) VALUES ('new', CURRENT_TIMESTAMP, "
                    "'llama-3-8b', 10, '{}', '{}', 'queued', 0)"
                )
            )
        downgrade(database_url, "0008")
        with engine.connect() as connection:
            kept = connection.execute(text("SELECT id, response FROM plans")).all()
        assert [row.id for row in kept] == ["old"]
        response = kept[0].response
        assert (json.loads(response) if isinstance(response, str) else response) == {"plans": []}
    finally:
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM plans"))
        engine.dispose()
        upgrade(database_url)
