"""Racing writers on real concurrent connections: exactly one wins a version, nothing is lost."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.catalog import service as catalog
from app.catalog.orm import GpuRow
from app.catalog.service import Precondition
from app.db.migrate import upgrade
from app.db.session import make_engine, make_session_factory
from app.errors import AlreadyExists, PreconditionFailed
from app.main import create_app
from app.settings import Settings
from app.web.heavy import HeavyWork
from tests.api.catalog_helpers import new_model
from tests.conftest import AUTH, TEST_API_KEY, reset_database

WRITERS = 8


def test_racing_if_match_writers_exactly_one_wins(client: TestClient) -> None:
    start = threading.Barrier(WRITERS)

    def write(watts: int) -> int:
        start.wait()
        return client.patch(
            "/v1/gpus/l40s-48gb", json={"tdp_watts": watts}, headers={**AUTH, "If-Match": '"1"'}
        ).status_code

    with ThreadPoolExecutor(WRITERS) as pool:
        statuses = list(pool.map(write, range(301, 301 + WRITERS)))
    assert Counter(statuses) == {200: 1, 412: WRITERS - 1}
    final = client.get("/v1/gpus/l40s-48gb").json()
    assert final["version"] == 2
    assert 301 <= final["tdp_watts"] < 301 + WRITERS


def test_racing_patches_without_if_match_all_land(client: TestClient) -> None:
    """Each writer adds a different key of the same JSON column: a lost update would drop one."""
    start = threading.Barrier(WRITERS)
    keys = ["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]

    def write(index: int) -> int:
        start.wait()
        body = {"peak_flops_per_s": {keys[index]: float(index + 1) * 1e12}}
        return client.patch("/v1/gpus/a10g-24gb", json=body, headers=AUTH).status_code

    with ThreadPoolExecutor(WRITERS) as pool:
        statuses = list(pool.map(write, range(WRITERS)))
    assert statuses == [200] * WRITERS
    final = client.get("/v1/gpus/a10g-24gb").json()
    assert final["version"] == 1 + WRITERS
    assert final["peak_flops_per_s"] == {key: (i + 1) * 1e12 for i, key in enumerate(keys)}


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> Settings:
    url = f"sqlite:///{tmp_path / 'ridgeline.db'}"
    upgrade(url)
    reset_database(url)
    return Settings(database_url=url, api_keys=[TEST_API_KEY], log_level="WARNING")


@pytest.mark.parametrize("conditional", [True, False], ids=["if-match", "no-if-match"])
def test_both_read_before_either_writes_on_sqlite(
    sqlite_settings: Settings, monkeypatch: pytest.MonkeyPatch, conditional: bool
) -> None:
    """SQLite has no row locks: force the interleaving where both sessions hold version 1
    before either flushes. The version check on UPDATE decides."""
    both_read = threading.Barrier(2, timeout=10)
    real_current = catalog.CatalogEntries._current
    first_reads: set[int] = set()

    def current_then_wait(self, entry_id, if_match):  # type: ignore[no-untyped-def]
        row = real_current(self, entry_id, if_match)
        ident = threading.get_ident()
        if ident not in first_reads:  # only the first read of each writer waits
            first_reads.add(ident)
            both_read.wait()
        return row

    monkeypatch.setattr(catalog.CatalogEntries, "_current", current_then_wait)
    engine = make_engine(sqlite_settings.database_url)
    factory = make_session_factory(engine)
    outcomes: dict[str, str] = {}

    def writer(name: str, watts: float) -> None:
        # As a request's unit of work does (app.web.deps.write_in_session): commit at the end.
        with factory() as session:
            try:
                catalog.gpu_entries(session).patch(
                    "l4-24gb",
                    {"tdp_watts": watts} | ({"price_note": name} if name == "a" else {}),
                    Precondition.at(1) if conditional else None,
                    lambda document: document,
                )
                session.commit()
                outcomes[name] = "won"
            except PreconditionFailed:
                outcomes[name] = "412"

    threads = [
        threading.Thread(target=writer, args=("a", 71.0)),
        threading.Thread(target=writer, args=("b", 73.0)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    with factory() as session:
        row = session.get(GpuRow, "l4-24gb")
        assert row is not None
        version, watts, note = row.version, row.tdp_watts, row.price_note
    engine.dispose()
    if conditional:
        assert sorted(outcomes.values()) == ["412", "won"]
        assert version == 2
        winner = next(name for name, outcome in outcomes.items() if outcome == "won")
        assert watts == (71.0 if winner == "a" else 73.0)
    else:
        assert outcomes == {"a": "won", "b": "won"}
        assert version == 3  # the loser re-read version 2 and applied its patch on top
        assert note == "a"  # writer a's other field survived writer b's patch


@pytest.mark.postgres
@pytest.mark.parametrize("conditional", [True, False], ids=["if-match", "no-if-match"])
def test_row_lock_queues_the_second_writer_on_postgres(
    postgres_url: str, conditional: bool
) -> None:
    """On PostgreSQL the first writer's read locks the row (SELECT ... FOR UPDATE): the second
    writer's read waits for its commit and then sees version 2, so it answers 412 (If-Match 1)
    or applies its patch on top (without), never from a stale read."""
    upgrade(postgres_url)
    reset_database(postgres_url)
    engine = make_engine(postgres_url)
    factory = make_session_factory(engine)
    first_holds = threading.Event()
    release_first = threading.Event()
    second_read_done = threading.Event()
    outcomes: dict[str, str] = {}

    def first() -> None:
        with factory() as session:
            entries = catalog.gpu_entries(session)
            entries._current(
                "l4-24gb", Precondition.at(1)
            )  # take the row lock, as a patch does first
            first_holds.set()
            release_first.wait(10)
            entries.patch(
                "l4-24gb", {"tdp_watts": 71.0, "price_note": "a"}, Precondition.at(1), lambda d: d
            )
            session.commit()
            outcomes["a"] = "won"

    def second() -> None:
        with factory() as session:
            try:
                catalog.gpu_entries(session).patch(
                    "l4-24gb",
                    {"tdp_watts": 73.0},
                    Precondition.at(1) if conditional else None,
                    lambda d: d,
                )
                second_read_done.set()
                session.commit()
                outcomes["b"] = "won"
            except PreconditionFailed:
                second_read_done.set()
                outcomes["b"] = "412"

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_holds.wait(10)
    threads[1].start()
    assert not second_read_done.wait(0.5)  # queued behind the row lock
    release_first.set()
    for thread in threads:
        thread.join(30)
    with factory() as session:
        row = session.get(GpuRow, "l4-24gb")
        assert row is not None
        version, watts, note = row.version, row.tdp_watts, row.price_note
    engine.dispose()
    if conditional:
        assert outcomes == {"a": "won", "b": "412"}
        assert (version, watts) == (2, 71.0)
    else:
        assert outcomes == {"a": "won", "b": "won"}
        assert (version, watts, note) == (3, 73.0, "a")


def test_racing_creates_of_one_id_are_one_201_and_409s(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both writers find the id free before either inserts: the loser's INSERT meets the
    winner's row, and that is a 409, not an IntegrityError's 500."""
    both_checked = threading.Barrier(2, timeout=10)
    real_columns = catalog.CatalogEntries.columns

    def columns_then_wait(self, fields, entry_id):  # type: ignore[no-untyped-def]
        both_checked.wait()  # create() calls it after the existence check, before the insert
        return real_columns(self, fields, entry_id)

    monkeypatch.setattr(catalog.CatalogEntries, "columns", columns_then_wait)
    engine = make_engine(settings.database_url)
    factory = make_session_factory(engine)
    outcomes: list[str] = []

    def writer() -> None:
        with factory() as session:
            try:
                catalog.model_entries(session).create("raced-model", _model_fields())
                session.commit()
                outcomes.append("created")
            except AlreadyExists:
                outcomes.append("409")

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    engine.dispose()
    assert sorted(outcomes) == ["409", "created"]


def _model_fields() -> dict[str, object]:
    return {name: value for name, value in new_model().items() if name != "id"}


def test_a_locked_sqlite_database_is_503_busy_then_the_write_lands(
    sqlite_settings: Settings, heavy_work: HeavyWork
) -> None:
    """Another process holds SQLite's write lock past the busy timeout: the write is retried,
    then answered 503 `busy` with Retry-After (contention, not "the database cannot be
    reached"), and nothing of it is stored; once the lock is free the same write lands."""
    settings = sqlite_settings.model_copy(update={"sqlite_busy_timeout_ms": 100})
    path = settings.database_url.removeprefix("sqlite:///")
    holder = sqlite3.connect(path, isolation_level=None)
    with TestClient(create_app(settings, heavy_work), raise_server_exceptions=False) as client:
        version = client.get("/v1/gpus/l4-24gb").json()["version"]
        holder.execute("BEGIN IMMEDIATE")
        try:
            started = time.perf_counter()
            response = client.patch("/v1/gpus/l4-24gb", json={"tdp_watts": 71}, headers=AUTH)
            elapsed = time.perf_counter() - started
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert response.status_code == 503, response.text
        assert response.json()["type"] == "/problems/busy"
        assert response.headers["retry-after"] == "1"
        assert elapsed < 3.0
        assert client.get("/v1/gpus/l4-24gb").json()["version"] == version
        landed = client.patch("/v1/gpus/l4-24gb", json={"tdp_watts": 71}, headers=AUTH)
        assert landed.status_code == 200
        assert landed.json()["version"] == version + 1
