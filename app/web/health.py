"""Liveness, readiness and metrics: what an orchestrator and Prometheus ask."""

from __future__ import annotations

import anyio
from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import QueuePool

from app.db.session import DatabaseLimits, ping
from app.web.problems import PROBLEM_TYPES, ApiProblem
from app.web.schemas import problem_responses

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


# Readiness pings the database on threads of its own, so a thread pool full of stuck requests
# cannot keep the orchestrator from hearing about it.
_PING_THREADS = CapacityLimiter(2)


def _not_ready(detail: str) -> ApiProblem:
    return ApiProblem(503, "database-unavailable", detail, headers={"Retry-After": "5"})


@router.get(
    "/readyz",
    summary="Readiness: the database answers and the server has room for requests",
    description=(
        "200 when the database answers a query within the readiness timeout (0.8 s by "
        "default), a pooled connection is free, and the worker threads are not all taken with "
        "requests queued behind them; otherwise 503 naming which. Always answers within about "
        "a second: orchestrators restart on it."
    ),
    responses=problem_responses(503),
)
async def readyz(request: Request) -> dict[str, str]:
    threads = to_thread.current_default_thread_limiter()
    waiting = threads.statistics().tasks_waiting
    if threads.borrowed_tokens >= threads.total_tokens and waiting:
        raise _not_ready(
            f"All {int(threads.total_tokens)} worker threads are busy and {waiting} request(s) "
            "wait for one."
        )
    engine = request.app.state.engine
    limits: DatabaseLimits = request.app.state.database_limits
    pool = engine.pool
    if isinstance(pool, QueuePool) and pool.checkedout() >= limits.pool_size + limits.max_overflow:
        raise _not_ready(f"All {pool.checkedout()} database connections are in use.")
    timeout_s = request.app.state.settings.readiness_timeout_s
    try:
        with anyio.fail_after(timeout_s):
            await to_thread.run_sync(ping, engine, abandon_on_cancel=True, limiter=_PING_THREADS)
    except TimeoutError:
        raise _not_ready(f"The database did not answer within {timeout_s:g} s.") from None
    except SQLAlchemyError as error:
        raise _not_ready(f"The database cannot be reached: {type(error).__name__}.") from None
    return {"status": "ready"}


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
async def metrics(request: Request) -> Response:
    return Response(
        generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST
    )


@router.get("/problems/{slug}", include_in_schema=False)
async def problem_type(slug: str) -> dict[str, str]:
    if slug not in PROBLEM_TYPES:
        raise ApiProblem(404, "not-found", f"No problem type {slug!r}.")
    title, description = PROBLEM_TYPES[slug]
    return {"type": f"/problems/{slug}", "title": title, "description": description}
