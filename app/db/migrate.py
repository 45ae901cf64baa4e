"""Run the Alembic migrations from code (the CLI, the tests, the container's start)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config

from app.db.session import make_engine

__all__ = ["alembic_config", "downgrade", "upgrade"]

_ROOT = Path(__file__).resolve().parents[2]


def alembic_config() -> Config:
    config = Config(str(_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(_ROOT / "migrations"))
    config.attributes["configure_logger"] = False
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate the database at `database_url` up to `revision`, in one transaction."""
    _run(command.upgrade, database_url, revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    """Migrate the database at `database_url` down to `revision`, in one transaction."""
    _run(command.downgrade, database_url, revision)


def _run(step: Callable[[Config, str], None], database_url: str, revision: str) -> None:
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            step(config, revision)
    finally:
        engine.dispose()
