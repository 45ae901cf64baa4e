"""Real server processes (`ridgeline serve`) over one database: racing writers across replicas,
readiness under contention, and a bounded graceful shutdown."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from app.db.migrate import upgrade
from tests.conftest import AUTH, reset_database
from tests.servers import served

WRITERS = 32
ROUNDS = 10

LONG_SIMULATION = {
    "model": "llama-3-8b",
    "gpu": "h100-sxm5-80gb",
    "workload": {
        "requests_per_s": 0.5,
        "num_requests": 20_000,
        "prompt_tokens": {"p50": 512, "p90": 512, "p99": 512},
        "output_tokens": {"p50": 400, "p90": 400, "p99": 400},
    },
}
SHORT_SIMULATION = {
    **LONG_SIMULATION,
    "workload": {**LONG_SIMULATION["workload"], "num_requests": 50},  # type: ignore[dict-item]
}


@pytest.fixture
def database(postgres_url: str) -> str:
    upgrade(postgres_url)
    reset_database(postgres_url)
    return postgres_url


async def _patch_round(
    bases: list[str], bodies: list[dict[str, object]], headers: dict[str, str]
) -> tuple[list[int], float]:
    async with httpx.AsyncClient(timeout=30) as client:
        started = time.perf_counter()

        async def patch(index: int) -> int:
            base = bases[index % len(bases)]
            response = await client.patch(
                f"{base}/v1/gpus/l4-24gb", json=bodies[index], headers=headers
            )
            return response.status_code

        statuses = await asyncio.gather(*(patch(i) for i in range(len(bodies))))
        return list(statuses), time.perf_counter() - started


@pytest.mark.postgres
@pytest.mark.slow
def test_conditional_writers_over_two_replicas_one_wins_per_round(database: str) -> None:
    """32 concurrent PATCHes of one row with the same If-Match, split over two server
    processes, ten rounds: exactly one 200 per round, the rest 412, each round well under
    10 s, and both replicas ready after. Then 32 patches without If-Match: all land."""
    with served(database) as (first, _), served(database) as (second, _):
        bases = [first, second]
        times = []
        for round_index in range(ROUNDS):
            etag = httpx.get(f"{first}/v1/gpus/l4-24gb").headers["etag"]
            bodies: list[dict[str, object]] = [
                {"tdp_watts": 1000 + round_index * WRITERS + i} for i in range(WRITERS)
            ]
            statuses, elapsed = asyncio.run(_patch_round(bases, bodies, {**AUTH, "If-Match": etag}))
            assert Counter(statuses) == {200: 1, 412: WRITERS - 1}, (round_index, statuses)
            assert elapsed < 10.0
            times.append(elapsed)
        for base in bases:
            ready = httpx.get(f"{base}/readyz", timeout=2)
            assert ready.status_code == 200, ready.text
        assert httpx.get(f"{first}/v1/gpus/l4-24gb").json()["version"] == 1 + ROUNDS

        keys = ["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]
        peaks: list[dict[str, object]] = [
            {"peak_flops_per_s": {keys[i]: float(i + 1) * 1e12}} for i in range(len(keys))
        ]
        notes: list[dict[str, object]] = [
            {"price_note": f"writer {i}"} for i in range(len(keys), WRITERS)
        ]
        unconditional = peaks + notes
        statuses, elapsed = asyncio.run(_patch_round(bases, unconditional, AUTH))
        assert statuses == [200] * WRITERS
        final = httpx.get(f"{second}/v1/gpus/l4-24gb").json()
        assert final["version"] == 1 + ROUNDS + WRITERS
        assert {key: final["peak_flops_per_s"][key] for key in keys} == {
            key: (i + 1) * 1e12 for i, key in enumerate(keys)
        }
    print(f"\nrounds: {ROUNDS} x {WRITERS} writers; slowest {max(times):.2f} s")


@pytest.mark.postgres
@pytest.mark.slow
def test_a_held_row_lock_is_a_503_busy_and_readiness_stays_fast(database: str) -> None:
    """Another client holds the row lock (an open transaction): a write to that row answers
    503 `busy` with Retry-After once the lock timeout passes, never hangs, and /readyz answers
    within a second meanwhile."""
    import psycopg  # noqa: PLC0415

    dsn = database.replace("postgresql+psycopg://", "postgresql://")
    with served(database, db_lock_timeout_ms="1000") as (base, _), psycopg.connect(dsn) as holder:
        holder.execute("SELECT id FROM gpus WHERE id = 'l4-24gb' FOR UPDATE")
        started = time.perf_counter()
        response = httpx.patch(
            f"{base}/v1/gpus/l4-24gb", json={"tdp_watts": 77}, headers=AUTH, timeout=10
        )
        elapsed = time.perf_counter() - started
        assert response.status_code == 503, response.text
        assert response.json()["type"] == "/problems/busy"
        assert response.headers["retry-after"] == "1"
        assert elapsed < 3.0
        started = time.perf_counter()
        assert httpx.get(f"{base}/readyz", timeout=2).status_code == 200
        assert time.perf_counter() - started < 1.0
        holder.rollback()
        after = httpx.patch(f"{base}/v1/gpus/l4-24gb", json={"tdp_watts": 77}, headers=AUTH)
        assert after.status_code == 200


@pytest.mark.postgres
@pytest.mark.slow
def test_sigterm_ends_the_server_within_the_graceful_bound(database: str) -> None:
    """A request still running when SIGTERM comes (a long simulation) does not keep the
    process alive past RIDGELINE_GRACEFUL_SHUTDOWN_S."""
    with served(database, graceful_shutdown_s="2") as (base, process):

        async def start_and_stop() -> float:
            async with httpx.AsyncClient(timeout=60) as client:
                pending = asyncio.ensure_future(
                    client.post(f"{base}/v1/simulations", json=LONG_SIMULATION, headers=AUTH)
                )
                await asyncio.sleep(1.0)
                assert not pending.done()
                started = time.perf_counter()
                process.send_signal(signal.SIGTERM)
                while process.poll() is None and time.perf_counter() - started < 15:
                    await asyncio.sleep(0.05)
                pending.cancel()
                return time.perf_counter() - started

        stopped_after = asyncio.run(start_and_stop())
        assert process.poll() is not None
        assert stopped_after < 2.0 + 3.0


@pytest.mark.slow
def test_heavy_work_is_admitted_refused_and_cancelled(tmp_path: Path) -> None:
    """One heavy-work process and no queue: a second simulation while one runs is a 429 with
    Retry-After; a client that hangs up frees the process at once (its run is stopped), so the
    next simulation is answered in about its own time, not after the abandoned one."""
    url = f"sqlite:///{tmp_path / 'ridgeline.db'}"
    upgrade(url)
    reset_database(url)
    with served(url, heavy_work_processes="1", heavy_work_queue="0") as (base, _):

        async def scenario() -> None:
            async with httpx.AsyncClient(timeout=60) as client:
                first = asyncio.ensure_future(
                    client.post(f"{base}/v1/simulations", json=LONG_SIMULATION, headers=AUTH)
                )
                # Wait until the server holds it (a loaded machine may take over a second).
                for _ in range(200):
                    metrics = (await client.get(f"{base}/metrics")).text
                    if "ridgeline_heavy_jobs_admitted 1.0" in metrics:
                        break
                    await asyncio.sleep(0.05)
                else:
                    pytest.fail("the long simulation was never admitted")
                refused = await client.post(f"{base}/v1/simulations", json=SHORT_SIMULATION)
                assert refused.status_code == 429, refused.text
                assert refused.headers["content-type"] == "application/problem+json"
                assert int(refused.headers["retry-after"]) >= 1
                cheap = await client.get(f"{base}/v1/gpus/h100-sxm5-80gb")
                assert cheap.status_code == 200
                first.cancel()  # the client hangs up
                await asyncio.sleep(0.5)
            async with httpx.AsyncClient(timeout=60) as client:
                started = time.perf_counter()
                short = await client.post(f"{base}/v1/simulations", json=SHORT_SIMULATION)
                assert short.status_code == 200, short.text
                # The abandoned run had over 10 s to go; a new worker starts in about one.
                assert time.perf_counter() - started < 6.0
                metrics = (await client.get(f"{base}/metrics")).text
                assert 'ridgeline_heavy_jobs_total{outcome="cancelled"} 1.0' in metrics
                assert 'ridgeline_heavy_jobs_total{outcome="refused"} 1.0' in metrics

        asyncio.run(scenario())


@pytest.mark.postgres
@pytest.mark.slow
def test_readiness_reports_exhausted_worker_threads_within_a_second(database: str) -> None:
    """Writers queued behind a held row lock take every worker thread and more wait: /readyz
    answers 503 naming it, within a second; once the lock goes, 200 again."""
    import psycopg  # noqa: PLC0415

    dsn = database.replace("postgresql+psycopg://", "postgresql://")
    with (
        served(database, db_lock_timeout_ms="4000", worker_threads="4") as (base, _),
        psycopg.connect(dsn) as holder,
    ):
        holder.execute("SELECT id FROM gpus WHERE id = 'l4-24gb' FOR UPDATE")

        async def scenario() -> None:
            async with httpx.AsyncClient(timeout=30) as client:
                writers = [
                    asyncio.ensure_future(
                        client.patch(
                            f"{base}/v1/gpus/l4-24gb", json={"tdp_watts": 70 + i}, headers=AUTH
                        )
                    )
                    for i in range(8)
                ]
                await asyncio.sleep(1.0)
                started = time.perf_counter()
                ready = await client.get(f"{base}/readyz")
                assert time.perf_counter() - started < 1.0
                assert ready.status_code == 503, ready.text
                assert "worker threads are busy" in ready.json()["detail"]
                holder.rollback()
                await asyncio.gather(*writers)
                assert (await client.get(f"{base}/readyz")).status_code == 200

        asyncio.run(scenario())
