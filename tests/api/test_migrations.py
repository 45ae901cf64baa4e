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
