"""Shared fixtures: a migrated database per backend, and an app and client over it.

The API suite runs on SQLite and on PostgreSQL. PostgreSQL comes from
RIDGELINE_TEST_POSTGRES_URL, or the local server on 127.0.0.1:5432 (user postgres); where none
answers, PostgreSQL tests are skipped with the reason, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Table, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from app.bundled import load_bundled_catalog
from app.db.migrate import upgrade
from app.db.session import make_engine, make_session_factory
from app.main import create_app
from app.settings import Settings
from app.tables import Base
from app.web.heavy import HeavyWork, HeavyWorkLimits

TEST_API_KEY = "test-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TEST_API_KEY}"}
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
PLAN_WAIT_S = 60.0
"""Tests see a plan answered at once (201) unless they ask for a shorter wait: a loaded test
machine may take seconds to start the first heavy-work process."""


def _postgres_admin_url() -> str:
    return os.environ.get("RIDGELINE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test session, dropped at the end."""
    admin_url = make_url(_postgres_admin_url())
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"ridgeline_test_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as error:
        admin.dispose()
        reason = f"PostgreSQL at {admin_url.render_as_string()} is not reachable: {error}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true needs PostgreSQL. {reason}")
        pytest.skip(reason)
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(
    scope="session",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database migrated to head, once per backend per session."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'ridgeline.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    upgrade(url)
    return url


_LOADED: dict[str, list[tuple[Table, list[dict[str, Any]]]]] = {}
"""Per database URL: every row the bundled catalog left there the first time it was loaded."""


def reset_database(url: str) -> None:
    """Empty every table (procrastinate's jobs too) and load the bundled catalog, as `make
    run` leaves a new database.

    The loader runs once per database and session; later resets write back the rows it left
    (one multi-row insert per table, a tenth of the loader's time). The loader's own behaviour
    is tested in tests/api/test_catalog_loader.py."""
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            if engine.dialect.name == "postgresql":  # plan jobs' queue (migration 0010)
                connection.execute(text("DELETE FROM procrastinate_periodic_defers"))
                connection.execute(text("DELETE FROM procrastinate_jobs"))
                connection.execute(text("DELETE FROM procrastinate_workers"))
            for table in reversed(Base.metadata.sorted_tables):
                connection.execute(table.delete())
            loaded = _LOADED.get(url)
            if loaded is not None:
                for table, rows in loaded:
                    if rows:
                        connection.execute(table.insert(), rows)
        if loaded is None:
            with make_session_factory(engine).begin() as session:
                load_bundled_catalog(session)
            with engine.connect() as connection:
                # The catalog's history is left empty: its ids come from a sequence on
                # PostgreSQL, which rows written back with their ids would not advance.
                _LOADED[url] = [
                    (table, [dict(row) for row in connection.execute(table.select()).mappings()])
                    for table in Base.metadata.sorted_tables
                    if table.name != "catalog_changes"
                ]
    finally:
        engine.dispose()


@pytest.fixture
def settings(database_url: str) -> Settings:
    reset_database(database_url)
    return Settings(
        database_url=database_url,
        api_keys=[TEST_API_KEY],
        log_level="WARNING",
        catalog_cache_ttl_s=300.0,
        plan_wait_s=PLAN_WAIT_S,
        warm_on_start=False,  # a second of profile parsing per app; tests/api/test_ready.py
    )


@pytest.fixture(scope="session")
def heavy_work() -> Iterator[HeavyWork]:
    """One pool of heavy-work processes for every app of the session: starting worker
    processes per test would cost more than most tests."""
    heavy = HeavyWork(HeavyWorkLimits(processes=1, queue=16))
    try:
        yield heavy
    finally:
        heavy.close()


@pytest.fixture(scope="session")
def _apps() -> dict[str, FastAPI]:
    return {}


@pytest.fixture
def app(settings: Settings, heavy_work: HeavyWork, _apps: dict[str, FastAPI]) -> FastAPI:
    """The app over `settings`, one per distinct settings for the session.

    What a request can change lives in the lifespan (engine, spec cache, response memo), which
    each test's client starts afresh; the app object itself keeps only its routes, whose
    first use FastAPI spends a tenth of a second preparing, and its metrics registry (tests of
    counts use `fresh_app`)."""
    key = settings.model_dump_json()
    if key not in _apps:
        _apps[key] = create_app(settings, heavy_work)
    return _apps[key]


@pytest.fixture
def fresh_app(settings: Settings, heavy_work: HeavyWork) -> FastAPI:
    """An app of its own, counters at zero."""
    return create_app(settings, heavy_work)


@pytest.fixture
def fresh_client(fresh_app: FastAPI) -> Iterator[TestClient]:
    with TestClient(fresh_app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def postgres_client(postgres_url: str, heavy_work: HeavyWork) -> Iterator[TestClient]:
    """A client over PostgreSQL only, for behaviour SQLite cannot show."""
    upgrade(postgres_url)
    reset_database(postgres_url)
    settings = Settings(
        database_url=postgres_url,
        api_keys=[TEST_API_KEY],
        log_level="WARNING",
        catalog_cache_ttl_s=300.0,
        plan_wait_s=PLAN_WAIT_S,
        warm_on_start=False,  # a second of profile parsing per app; tests/api/test_ready.py
    )
    with TestClient(create_app(settings, heavy_work), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first: spread over the workers of `pytest -n auto` from the start, they do not
    leave one worker running them alone at the end (the order is otherwise unchanged)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
