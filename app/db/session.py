"""Database engines and sessions. Engines are built by the app's lifespan, never at import."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    DateTime,
    Dialect,
    Engine,
    MetaData,
    TypeDecorator,
    create_engine,
    event,
    text,
)
from sqlalchemy.orm import DeclarativeBase, sessionmaker

__all__ = [
    "Base",
    "DatabaseLimits",
    "UtcDateTime",
    "make_engine",
    "make_session_factory",
    "ping",
]

# Stable constraint names, so migrations read the same on SQLite and PostgreSQL.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC, also on SQLite (which stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime: pass an aware UTC datetime")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


@dataclass(frozen=True, slots=True)
class DatabaseLimits:
    """How long anything may wait on the database, so a stuck lock or a lost client becomes an
    error instead of a hang (see `app.web.problems`: they answer 503 `busy`)."""

    pool_size: int = 8
    """Connections kept open: one per worker thread."""
    max_overflow: int = 4
    """Connections opened beyond `pool_size` at a peak (readiness pings, cache fills)."""
    pool_timeout_s: float = 5.0
    """Wait for a free pooled connection."""
    lock_timeout_ms: int = 5_000
    """PostgreSQL: wait for a row or table lock."""
    statement_timeout_ms: int = 30_000
    """PostgreSQL: longest statement."""
    idle_in_transaction_timeout_ms: int = 30_000
    """PostgreSQL: a session idle inside a transaction is ended (its locks released)."""
    sqlite_busy_timeout_ms: int = 5_000
    """SQLite: wait for the database's write lock."""


def make_engine(url: str, limits: DatabaseLimits | None = None, **kwargs: Any) -> Engine:
    """An engine for `url`, set up for a multi-threaded web server, with `limits` on every wait."""
    limits = limits or DatabaseLimits()
    if ":memory:" not in url:  # an in-memory SQLite database has one connection, no pool
        kwargs.setdefault("pool_size", limits.pool_size)
        kwargs.setdefault("max_overflow", limits.max_overflow)
        kwargs.setdefault("pool_timeout", limits.pool_timeout_s)
    if url.startswith("sqlite"):
        kwargs.setdefault("connect_args", {"check_same_thread": False})
        engine = create_engine(url, **kwargs)
        busy_ms = limits.sqlite_busy_timeout_ms

        def pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")  # readers do not block the one writer
            cursor.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
            cursor.close()

        event.listen(engine, "connect", pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    if url.startswith("postgresql"):
        options = " ".join(
            (
                f"-c lock_timeout={int(limits.lock_timeout_ms)}",
                f"-c statement_timeout={int(limits.statement_timeout_ms)}",
                "-c idle_in_transaction_session_timeout="
                f"{int(limits.idle_in_transaction_timeout_ms)}",
            )
        )
        connect_args = dict(kwargs.pop("connect_args", {}))
        connect_args.setdefault("options", options)
        connect_args.setdefault("connect_timeout", 5)
        kwargs["connect_args"] = connect_args
    return create_engine(url, **kwargs)


def ping(engine: Engine) -> None:
    """One round trip to the database; raises `SQLAlchemyError` when it cannot be reached."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def make_session_factory(engine: Engine) -> sessionmaker[Any]:
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)
