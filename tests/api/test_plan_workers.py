"""Plans across processes on one PostgreSQL database, through procrastinate's queue: a plan asked
of one server is polled to done on another, and a plan whose server is killed mid-plan is
finished by a `ridgeline worker` process once procrastinate finds its job stalled (no heartbeat
from its worker for `plan_lease_s`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.db.migrate import upgrade
from app.db.session import make_engine
from tests.api.test_plan_jobs import SIX_CANDIDATES, plan_jobs_of
from tests.api.test_plans import plan_body
from tests.conftest import AUTH, TEST_API_KEY, reset_database
from tests.servers import ROOT, served

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

# A worker silent for 2 s is dead (heartbeats every 0.67 s, stalled jobs looked for every
# second), and polls every 0.2 s: a dead worker's plan is taken over within seconds.
QUICK = {"plan_wait_s": "0", "plan_lease_s": "2", "plan_poll_s": "0.2"}


def quick_server(
    database: str, plan_workers: str = "1"
) -> AbstractContextManager[tuple[str, subprocess.Popen[bytes]]]:
    """A server answering plans at once (202), with `QUICK` leases and polls."""
    return served(
        database, plan_wait_s="0", plan_lease_s="2", plan_poll_s="0.2", plan_workers=plan_workers
    )


# Every priced GPU at tp 1, planned exhaustively with 3,000-request probes: some seconds.
MEDIUM_PLAN = plan_body(
    gpus=None, tp_candidates=[1], exhaustive=True, max_plans=50, probe_requests=3000
)


@pytest.fixture
def database(postgres_url: str) -> str:
    upgrade(postgres_url)
    reset_database(postgres_url)
    return postgres_url


def poll(
    base: str, location: str, until: Callable[[dict[str, Any]], bool], timeout_s: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        response = httpx.get(f"{base}{location}", timeout=10)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        if until(answer):
            return answer
        assert time.monotonic() < deadline, f"not reached in {timeout_s} s: {answer['status']}"
        time.sleep(0.1)


@contextmanager
def plan_worker(database_url: str, **settings: str) -> Iterator[subprocess.Popen[bytes]]:
    """A `ridgeline worker` process on `database_url`."""
    env = {
        **os.environ,
        "RIDGELINE_DATABASE_URL": database_url,
        "RIDGELINE_API_KEYS": TEST_API_KEY,
        "RIDGELINE_LOG_LEVEL": "WARNING",
        **{f"RIDGELINE_{name.upper()}": value for name, value in settings.items()},
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_a_plan_asked_of_one_server_is_polled_to_done_on_another(database: str) -> None:
    with (
        quick_server(database) as (a, _),
        quick_server(database, plan_workers="0") as (b, _),
    ):
        response = httpx.post(f"{a}/v1/plans", json=SIX_CANDIDATES, headers=AUTH, timeout=30)
        assert response.status_code == 202, response.text
        location = response.headers["location"]
        done = poll(b, location, lambda answer: answer["status"] == "done", timeout_s=120)
        assert done["progress"] == 1.0
        # The hand-checked case of test_plans.py: two H100s carry it.
        assert done["plans"][0]["gpus_total"] == 2
        assert httpx.get(f"{a}{location}", timeout=10).json() == done
    assert plan_jobs_of(database, done["id"]) == [("succeeded", 1)]


def test_a_plan_whose_server_is_killed_is_finished_by_a_worker_process(database: str) -> None:
    with (
        quick_server(database, plan_workers="0") as (api, _),
        quick_server(database) as (doomed, process),
    ):
        response = httpx.post(f"{doomed}/v1/plans", json=MEDIUM_PLAN, headers=AUTH, timeout=30)
        assert response.status_code == 202, response.text
        location = response.headers["location"]
        started = poll(api, location, lambda answer: answer["status"] == "running", timeout_s=120)
        assert started["progress"] < 1.0
        # A worker process starts while the server holds the plan's job, then the server dies.
        with plan_worker(database, **QUICK) as worker:
            process.send_signal(signal.SIGKILL)  # no clean stop: the plan stays `running`
            process.wait(10)
            done = poll(api, location, lambda answer: answer["status"] == "done", timeout_s=240)
            worker.send_signal(signal.SIGTERM)  # a clean stop
            _, errors = worker.communicate(timeout=30)
            assert worker.returncode == 0, errors.decode()
    assert done["progress"] == 1.0 and done["plans"]
    engine = make_engine(database)
    try:
        with engine.connect() as connection:
            attempts, owner = connection.execute(
                text("SELECT attempts, lease_owner FROM plans WHERE id = :id"),
                {"id": done["id"]},
            ).one()
    finally:
        engine.dispose()
    assert (attempts, owner) == (2, None)  # started by the killed server, then by the worker
    # One job: taken by the killed server, found stalled, retried, and done by the worker
    # (procrastinate counts the retry and the finish as attempts).
    assert plan_jobs_of(database, done["id"]) == [("succeeded", 2)]
