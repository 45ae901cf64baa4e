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

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from app.bundled import load_bundled_catalog
from app.db.migrate import upgrade
from app.db.session import make_engine, make_session_factory
from app.db.tables import Base
from app.main import create_app
from app.settings import Settings
from app.web.heavy import HeavyWork, HeavyWorkLimits

TEST_API_KEY = "test-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TEST_API_KEY}"}
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


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


def reset_database(url: str) -> None:
    """Empty every table and load the bundled catalog, as `make run` leaves a new database."""
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for table in reversed(Base.metadata.sorted_tables):
                connection.execute(table.delete())
        with make_session_factory(engine).begin() as session:
            load_bundled_catalog(session)
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


@pytest.fixture
def app(settings: Settings, heavy_work: HeavyWork) -> FastAPI:
    return create_app(settings, heavy_work)


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
    )
    with TestClient(create_app(settings, heavy_work), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]
