"""Plans as jobs in one process: 201 within the wait, else 202 and a `Location` polled to done;
progress; DELETE cancelling a running plan (its worker stops) and deleting a finished one; a
plan failing with its problem; the compact and full answers; SQLite's claims and leases; on
PostgreSQL, procrastinate's jobs: aborted with their plan, retried when their worker stops, a
plan whose job could not be deferred failed with a 503, and one left without a job recovered."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import anyio
import pytest
from anyio import to_thread
from fastapi import FastAPI
from fastapi.testclient import TestClient
from procrastinate.exceptions import ConnectorException
from procrastinate.manager import JobManager
from sqlalchemy import text

from app.catalog.orm import utcnow
from app.db.session import make_engine, make_session_factory
from app.engine.planning.progress import PlanCancelled
from app.main import create_app
from app.plans.jobs import ProgressTarget, StoredProgress
from app.plans.queue import worker_catalog
from app.plans.repository import PlanRepository, PlanRow, PlanStatus
from app.plans.schemas import PlanRequest
from app.settings import Settings
from app.web.heavy import HeavyWork
from tests.api.test_plans import PLAN, plan_body
from tests.conftest import AUTH, PLAN_WAIT_S, TEST_API_KEY, reset_database

# Every priced GPU, four tp and two formats, planned exhaustively: over a hundred candidates,
# many seconds of simulation (a plan to watch running, and to cancel).
LONG_PLAN = plan_body(
    gpus=None,
    tp_candidates=[1, 2, 4, 8],
    weight_dtypes=["bf16", "fp8"],
    exhaustive=True,
    max_plans=50,
)
# The hand-checked case of tests/api/test_plans.py over three tp and two chunks: 6 candidates.
SIX_CANDIDATES = plan_body(tp_candidates=[1, 2, 4], chunk_tokens=[512, 2048])


@pytest.fixture
def queued_client(
    settings: Settings, heavy_work: HeavyWork
) -> Iterator[tuple[TestClient, FastAPI]]:
    """A client whose POSTs answer at once (no wait), with progress stored at every candidate."""
    quick = settings.model_copy(update={"plan_wait_s": 0.0, "plan_progress_interval_s": 0.001})
    app = create_app(quick, heavy_work)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, app


def poll(
    client: TestClient, location: str, until: Callable[[dict[str, Any]], bool], timeout_s: float
) -> list[dict[str, Any]]:
    """GET `location` every 50 ms until `until(answer)`; every answer seen."""
    seen = []
    deadline = time.monotonic() + timeout_s
    while True:
        response = client.get(location)
        assert response.status_code == 200, response.text
        seen.append(response.json())
        if until(seen[-1]):
            return seen
        assert time.monotonic() < deadline, f"not reached in {timeout_s} s: {seen[-1]['status']}"
        time.sleep(0.05)


def plan_jobs_of(database_url: str, plan_id: str) -> list[tuple[str, int]]:
    """PostgreSQL: (status, attempts) of each procrastinate job of `plan_id`, oldest first."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT status::text, attempts FROM procrastinate_jobs "
                    "WHERE lock = :id AND task_name = 'ridgeline.run_plan' ORDER BY id"
                ),
                {"id": plan_id},
            ).all()
    finally:
        engine.dispose()
    return [(status, attempts) for status, attempts in rows]


def on_postgres(settings: Settings) -> bool:
    return settings.database_url.startswith("postgresql")


def test_a_plan_done_within_the_wait_is_201_with_its_answer(client: TestClient) -> None:
    response = client.post("/v1/plans", json=plan_body(), headers=AUTH)
    assert response.status_code == 201, response.text
    answer = response.json()
    assert response.headers["location"] == f"/v1/plans/{answer['id']}"
    assert (answer["status"], answer["progress"], answer["detail"]) == ("done", 1.0, "compact")
    assert answer["error"] is None
    assert answer["plans"][0]["replicas"] == 2  # the hand-checked case (test_plans.py)
    listed = client.get("/v1/plans", headers=AUTH).json()["items"][0]
    assert (listed["status"], listed["progress"], listed["best"]["replicas"]) == ("done", 1.0, 2)


def test_a_plan_not_done_within_the_wait_is_202_and_polled_to_done(
    queued_client: tuple[TestClient, FastAPI],
) -> None:
    client, _ = queued_client
    response = client.post("/v1/plans", json=SIX_CANDIDATES, headers=AUTH)
    assert response.status_code == 202, response.text
    accepted = response.json()
    location = response.headers["location"]
    assert location == f"/v1/plans/{accepted['id']}"
    assert accepted["status"] in {"queued", "running"}
    assert accepted["plans"] is None and accepted["detail"] is None
    assert 0.0 <= accepted["progress"] < 1.0
    listed = client.get("/v1/plans", headers=AUTH).json()["items"]
    assert listed[0]["id"] == accepted["id"]
    assert listed[0]["status"] == "done" or listed[0]["best"] is None

    seen = poll(client, location, lambda a: a["status"] == "done", timeout_s=120)
    progress = [a["progress"] for a in seen]
    assert progress == sorted(progress)  # it only rises
    assert progress[-1] == 1.0
    done = seen[-1]
    # The hand-checked case (test_plans.py) needs two H100s: two tp-1 replicas or one tp 2.
    assert done["plans"][0]["gpus_total"] == 2
    full = client.get(location, params={"detail": "full"}).json()
    assert len(full["plans"]) + len(full["pruned"]) == 6


def test_delete_cancels_a_running_plan_and_its_worker_stops(
    settings: Settings, heavy_work: HeavyWork
) -> None:
    """On SQLite the plan's next progress check stops it. On PostgreSQL DELETE aborts its
    procrastinate job, which stops it at once: there, progress is checked once a minute, so
    only the abort can stop it within the test's wait."""
    interval_s = 60.0 if on_postgres(settings) else 0.001
    quick = settings.model_copy(update={"plan_wait_s": 0.0, "plan_progress_interval_s": interval_s})
    with TestClient(create_app(quick, heavy_work), raise_server_exceptions=False) as client:
        _cancel_a_running_plan(client, settings)


def _cancel_a_running_plan(client: TestClient, settings: Settings) -> None:
    response = client.post("/v1/plans", json=LONG_PLAN, headers=AUTH)
    assert response.status_code == 202, response.text
    location = response.headers["location"]
    running = poll(
        client,
        location,
        lambda a: a["status"] == "running" and a["progress"] > 0,
        timeout_s=120,
    )[-1]
    assert running["progress"] < 1.0
    # Not done: nothing to draw yet.
    chart = client.get(location, headers={"Accept": "image/svg+xml"})
    assert chart.status_code == 409, chart.text
    assert chart.headers["content-type"] == "application/problem+json"
    assert "running" in chart.json()["detail"]

    assert client.delete(location).status_code == 401  # it writes: a key
    cancelled = client.delete(location, headers=AUTH)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    runner = client.app.state.plan_jobs.runner  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while runner.running:
        assert time.monotonic() < deadline, "the worker did not stop"
        time.sleep(0.05)
    assert runner.outcomes["cancelled"] == 1 and runner.outcomes["done"] == 0
    final = client.get(location).json()
    assert final["status"] == "cancelled" and final["plans"] is None
    assert final["progress"] < 1.0
    if on_postgres(settings):  # aborted, not retried
        assert plan_jobs_of(settings.database_url, running["id"]) == [("aborted", 1)]
    # Cancelled is finished: DELETE now deletes it.
    assert client.delete(location, headers=AUTH).status_code == 204
    assert client.get(location).status_code == 404
    assert client.delete(location, headers=AUTH).status_code == 404


def test_a_plan_that_fails_in_its_worker_says_why(
    queued_client: tuple[TestClient, FastAPI],
) -> None:
    """The step-budget case of test_plans.py, past the wait: the job fails with the 422 a
    synchronous plan answers, as its `error`."""
    client, _ = queued_client
    body = plan_body(
        traffic=dict(PLAN["traffic"], requests_per_s=0.05), probe_requests=20_000, max_plans=1
    )
    response = client.post("/v1/plans", json=body, headers=AUTH)
    assert response.status_code == 202, response.text
    location = response.headers["location"]
    failed = poll(client, location, lambda a: a["status"] == "failed", timeout_s=60)[-1]
    error = failed["error"]
    assert (error["status"], error["title"], error["type"]) == (
        422,
        "Invalid input",
        "/problems/invalid-input",
    )
    assert error["errors"][0]["field"] == "probe_requests"
    assert "known before any ran" in error["detail"]
    assert failed["plans"] is None
    assert client.delete(location, headers=AUTH).status_code == 204  # finished: deleted


def test_the_compact_answer_groups_what_was_not_planned(client: TestClient) -> None:
    """tp 3 cannot split Llama-3-8B's 32 heads evenly (in both formats); the rest is planned
    or pruned. Compact: the planned candidates, and the others grouped by reason; full: every
    candidate, as `plans` and `pruned`."""
    body = plan_body(tp_candidates=[1, 3], weight_dtypes=["bf16", "fp8"])
    compact = client.post("/v1/plans", json=body, headers=AUTH)
    assert compact.status_code == 201, compact.text
    brief = compact.json()
    full = client.get(compact.headers["location"], params={"detail": "full"}).json()
    assert (brief["detail"], full["detail"]) == ("compact", "full")
    assert brief["pruned"] is None
    assert all(c["status"] == "planned" for c in brief["plans"])
    assert brief["plans"] == [c for c in full["plans"] if c["status"] == "planned"]
    everything = full["plans"] + full["pruned"]
    assert len(everything) == 4  # 1 GPU x 2 tp x 2 formats
    groups = brief["not_planned"]
    assert groups == full["not_planned"]
    assert sum(g["count"] for g in groups) + len(brief["plans"]) == 4
    (split,) = [g for g in groups if "split evenly" in g["examples"][0]["reason"]]
    assert (split["status"], split["count"]) == ("infeasible", 2)
    assert {e["weight_dtype"] for e in split["examples"]} == {"bf16", "fp8"}
    assert all(e["tp"] == 3 for e in split["examples"])
    assert "3" not in split["reason"]  # figures are masked: one group for any tp


def _sessions(url: str) -> Any:
    engine = make_engine(url)
    return engine, make_session_factory(engine)


def _queued(plan_id: str) -> PlanRow:
    return PlanRow(
        id=plan_id,
        created_at=utcnow(),
        model_id="llama-3-8b",
        requests_per_s=1.0,
        request={},
        response=None,
        catalog_versions={},
        summary=None,
        status=PlanStatus.QUEUED,
        progress=0.0,
        attempts=0,
    )


def test_a_job_is_claimed_once_and_taken_over_when_its_lease_expires(settings: Settings) -> None:
    """SQLite's in-process workers claim plans from the table, under leases."""
    if on_postgres(settings):
        pytest.skip("on PostgreSQL procrastinate delivers plans: no claims, no leases")
    engine, sessions = _sessions(settings.database_url)
    try:
        with sessions.begin() as session:
            PlanRepository(session).add(_queued("a" * 32))
        with sessions.begin() as session:
            first = PlanRepository(session).claim("worker-a", lease_s=30)
        assert first is not None and (first.plan_id, first.attempts) == ("a" * 32, 1)
        with sessions.begin() as session:
            assert PlanRepository(session).claim("worker-b", lease_s=30) is None  # held
            assert PlanRepository(session).report("a" * 32, "worker-a", 0.25)
        # worker-a dies: its lease runs out.
        with sessions.begin() as session:
            row = PlanRepository(session).get("a" * 32)
            assert row is not None and row.progress == 0.25
            row.lease_expires_at = utcnow() - timedelta(seconds=1)
        with sessions.begin() as session:
            second = PlanRepository(session).claim("worker-b", lease_s=30)
        assert second is not None and second.attempts == 2
        with sessions.begin() as session:
            repository = PlanRepository(session)
            # A revived worker-a can write nothing more: its progress check stops it.
            assert not repository.report("a" * 32, "worker-a", 0.5)
            assert not repository.finish("a" * 32, "worker-a", {"status": PlanStatus.DONE})
            assert repository.finish("a" * 32, "worker-b", {"status": PlanStatus.FAILED})
            assert not repository.cancel("a" * 32)  # finished: nothing to cancel
    finally:
        engine.dispose()


def test_a_delivered_plan_is_taken_over_from_its_earlier_attempt(settings: Settings) -> None:
    """A job delivered again (its first worker died) starts the plan under a new owner: the
    first can write nothing more; a finished plan is not started again."""
    engine, sessions = _sessions(settings.database_url)
    try:
        with sessions.begin() as session:
            PlanRepository(session).add(_queued("c" * 32))
        with sessions.begin() as session:
            first = PlanRepository(session).start("c" * 32, "worker-a:7.0")
            assert first is not None and first.attempts == 1
            assert PlanRepository(session).report("c" * 32, "worker-a:7.0", 0.5)
        with sessions.begin() as session:
            second = PlanRepository(session).start("c" * 32, "worker-b:7.1")
        assert second is not None and second.attempts == 2
        with sessions.begin() as session:
            repository = PlanRepository(session)
            assert not repository.report("c" * 32, "worker-a:7.0", 0.75)
            assert not repository.finish("c" * 32, "worker-a:7.0", {"status": PlanStatus.DONE})
            assert repository.finish("c" * 32, "worker-b:7.1", {"status": PlanStatus.DONE})
        with sessions.begin() as session:
            assert PlanRepository(session).start("c" * 32, "worker-c:7.2") is None
            row = PlanRepository(session).get("c" * 32)
            assert row is not None and (row.status, row.progress, row.attempts) == ("done", 0.5, 2)
    finally:
        engine.dispose()


def test_progress_never_goes_backwards_and_an_earlier_attempt_writes_nothing(
    settings: Settings, client: TestClient
) -> None:
    """A plan started again under the same owner name (a worker that took its own plan back
    after its lease ran out; a planning process left running when its parent died): the
    earlier attempt's progress, verdict and release are refused, and what pollers read
    (GET /v1/plans/{id}) never goes down, though the new attempt starts from nothing."""
    engine, sessions = _sessions(settings.database_url)
    plan_id = "e" * 32
    try:
        with sessions.begin() as session:
            PlanRepository(session).add(_queued(plan_id))
            first = PlanRepository(session).start(plan_id, "worker-a")
        assert first is not None and first.attempts == 1
        early = StoredProgress(
            sessions, ProgressTarget(settings.database_url, plan_id, "worker-a", 0.0, 1)
        )
        early.update(72, 100)

        def polled() -> float:
            answer = client.get(f"/v1/plans/{plan_id}")
            assert answer.status_code == 200 and answer.json()["status"] == "running"
            return float(answer.json()["progress"])

        assert polled() == 0.72
        with sessions.begin() as session:
            second = PlanRepository(session).start(plan_id, "worker-a")
        assert second is not None and second.attempts == 2
        late = StoredProgress(
            sessions, ProgressTarget(settings.database_url, plan_id, "worker-a", 0.0, 2)
        )
        late.update(10, 100)  # the new attempt, behind the old one's 0.72: stored as 0.72
        assert polled() == 0.72
        with pytest.raises(PlanCancelled):
            early.update(100, 100)  # the earlier attempt is fenced off
        assert polled() == 0.72
        late.update(90, 100)
        assert polled() == 0.9
        with sessions.begin() as session:
            repository = PlanRepository(session)
            repository.release(plan_id, "worker-a", attempt=1)  # refused: not its attempt
            assert not repository.finish(plan_id, "worker-a", {"status": "done"}, attempt=1)
            assert repository.finish(plan_id, "worker-a", {"status": "failed"}, attempt=2)
        answer = client.get(f"/v1/plans/{plan_id}").json()
        assert (answer["status"], answer["progress"]) == ("failed", 0.9)
    finally:
        engine.dispose()


def test_progress_is_stored_at_most_every_interval_and_stops_a_cancelled_plan(
    settings: Settings,
) -> None:
    engine, sessions = _sessions(settings.database_url)
    now = [100.0]
    try:
        with sessions.begin() as session:
            PlanRepository(session).add(_queued("b" * 32))
            PlanRepository(session).start("b" * 32, "worker-a")
        target = ProgressTarget(settings.database_url, "b" * 32, "worker-a", interval_s=0.5)
        progress = StoredProgress(sessions, target, clock=lambda: now[0])

        def stored() -> float:
            with sessions() as session:
                row = PlanRepository(session).get("b" * 32)
                assert row is not None
                return row.progress

        progress.update(1, 8)  # the first is written
        now[0] += 0.3
        progress.update(2, 8)  # 0.3 s later: not
        assert (progress.writes, stored()) == (1, 1 / 8)
        now[0] += 0.25
        progress.update(3, 8)  # 0.55 s after the first: written
        assert (progress.writes, stored()) == (2, 3 / 8)
        now[0] += 0.01
        progress.update(8, 8)  # the last always
        assert (progress.writes, stored()) == (3, 1.0)
        with sessions.begin() as session:
            assert PlanRepository(session).cancel("b" * 32)
        now[0] += 1
        with pytest.raises(PlanCancelled):
            progress.update(8, 8)
        assert stored() == 1.0  # nothing written once cancelled
    finally:
        engine.dispose()


def test_without_a_worker_plans_wait_queued_up_to_the_queue_limit(
    settings: Settings, heavy_work: HeavyWork
) -> None:
    """`plan_workers` 0: this process plans nothing, its plans wait `queued` for a worker
    elsewhere; past `plan_queue_limit` waiting plans, a 429."""
    alone = settings.model_copy(
        update={"plan_wait_s": 0.3, "plan_workers": 0, "plan_queue_limit": 1}
    )
    with TestClient(create_app(alone, heavy_work), raise_server_exceptions=False) as client:
        first = client.post("/v1/plans", json=plan_body(), headers=AUTH)
        assert first.status_code == 202, first.text
        assert (first.json()["status"], first.json()["progress"]) == ("queued", 0.0)
        assert first.headers["retry-after"] == "1"
        second = client.post("/v1/plans", json=plan_body(), headers=AUTH)
        assert second.status_code == 429, second.text
        assert second.headers["content-type"] == "application/problem+json"
        assert "1 plan(s) queued or running already" in second.json()["detail"]
        assert int(second.headers["retry-after"]) >= 1
        time.sleep(0.5)
        assert client.get(first.headers["location"]).json()["status"] == "queued"
        # Cancelled before any worker took it.
        cancelled = client.delete(first.headers["location"], headers=AUTH)
        assert cancelled.json()["status"] == "cancelled"
        assert client.post("/v1/plans", json=plan_body(), headers=AUTH).status_code == 202


def test_a_stopping_server_puts_its_running_plan_back_in_the_queue(
    settings: Settings, heavy_work: HeavyWork
) -> None:
    """A clean stop (SIGTERM: the app's shutdown) stops the plan running here and puts it back
    `queued`, untried, for the next worker to take at once."""
    quick = settings.model_copy(update={"plan_wait_s": 0.0, "plan_progress_interval_s": 0.001})
    with TestClient(create_app(quick, heavy_work), raise_server_exceptions=False) as client:
        response = client.post("/v1/plans", json=LONG_PLAN, headers=AUTH)
        assert response.status_code == 202, response.text
        location = response.headers["location"]
        poll(client, location, lambda a: a["status"] == "running", timeout_s=120)
        runner = client.app.state.plan_jobs.runner  # type: ignore[attr-defined]
    assert runner.outcomes["released"] == 1 and not runner.running
    alone = settings.model_copy(update={"plan_workers": 0})
    with TestClient(create_app(alone, heavy_work), raise_server_exceptions=False) as client:
        answer = client.get(location).json()
        assert answer["status"] == "queued"
    engine, sessions = _sessions(settings.database_url)
    try:
        with sessions() as session:
            row = PlanRepository(session).get(answer["id"])
            assert row is not None and (row.attempts, row.lease_owner) == (0, None)
    finally:
        engine.dispose()
    if on_postgres(settings):
        # Its job is waiting again (retried once), for the next worker to take.
        assert plan_jobs_of(settings.database_url, answer["id"]) == [("todo", 1)]


@pytest.mark.postgres
def test_a_plan_the_job_queue_cannot_take_fails_with_a_503(
    postgres_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def away(*_: object, **__: object) -> int:
        raise ConnectorException("the database went away")

    monkeypatch.setattr(JobManager, "defer_job_async", away)
    response = postgres_client.post("/v1/plans", json=plan_body(), headers=AUTH)
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "5"
    assert response.json()["type"] == "/problems/queue-unavailable"
    # Stored failed with that problem, not left queued for no one.
    listed = postgres_client.get("/v1/plans", headers=AUTH).json()["items"][0]
    assert (listed["status"], listed["progress"]) == ("failed", 0.0)
    stored = postgres_client.get(f"/v1/plans/{listed['id']}").json()
    assert stored["error"]["status"] == 503
    assert stored["error"]["type"] == "/problems/queue-unavailable"


@pytest.mark.postgres
def test_a_plan_left_without_a_job_is_deferred_and_planned(
    postgres_url: str, heavy_work: HeavyWork
) -> None:
    """A plan stored queued whose job was never deferred (the database went away between the
    POST's commit and its defer) is found by the periodic recovery and planned."""
    reset_database(postgres_url)
    request = PlanRequest.model_validate(plan_body()).model_dump(mode="json")
    engine, sessions = _sessions(postgres_url)
    try:
        with sessions.begin() as session:
            row = _queued("d" * 32)
            row.request = request
            row.created_at = utcnow() - timedelta(minutes=1)
            PlanRepository(session).add(row)
    finally:
        engine.dispose()
    settings = Settings(
        database_url=postgres_url,
        api_keys=[TEST_API_KEY],
        log_level="WARNING",
        plan_wait_s=PLAN_WAIT_S,
        plan_lease_s=2,  # recovery every second
    )
    with TestClient(create_app(settings, heavy_work), raise_server_exceptions=False) as client:
        done = poll(client, f"/v1/plans/{'d' * 32}", lambda a: a["status"] == "done", 60)[-1]
    assert done["plans"][0]["replicas"] == 2  # the hand-checked case (test_plans.py)
    assert plan_jobs_of(postgres_url, "d" * 32) == [("succeeded", 1)]


@pytest.mark.postgres
def test_a_worker_process_sees_catalog_writes_made_through_the_api(
    postgres_client: TestClient, postgres_url: str
) -> None:
    """A `ridgeline worker` plans with the catalog of now: a price PATCHed through an API
    process reaches the worker's specs by NOTIFY within a second, however long they are
    cached (300 s here)."""
    engine = make_engine(postgres_url)
    sessions = make_session_factory(engine)
    settings = Settings(database_url=postgres_url, catalog_cache_ttl_s=300)
    invalidation, cache = worker_catalog(sessions, settings)

    async def patch_and_watch() -> tuple[float | None, float | None]:
        async with invalidation.listening(postgres_url):
            before = cache.gpu("h100-sxm5-80gb").price_per_gpu_hour_usd
            patched = await to_thread.run_sync(
                lambda: postgres_client.patch(
                    "/v1/gpus/h100-sxm5-80gb",
                    json={"price_per_gpu_hour_usd": 99.0},
                    headers=AUTH,
                )
            )
            assert patched.status_code == 200, patched.text
            deadline = time.monotonic() + 1.0
            while cache.gpu("h100-sxm5-80gb").price_per_gpu_hour_usd != 99.0:
                assert time.monotonic() < deadline, "the worker's cache kept the old price"
                await anyio.sleep(0.01)
            return before, cache.gpu("h100-sxm5-80gb").price_per_gpu_hour_usd

    try:
        before, after = anyio.run(patch_and_watch)
    finally:
        engine.dispose()
    assert before != 99.0
    assert after == 99.0
