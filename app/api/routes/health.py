"""Liveness, readiness and metrics: what an orchestrator and Prometheus ask."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from app.api.problems import PROBLEM_TYPES, ApiProblem
from app.api.schemas.common import problem_responses
from app.catalog.db import ping

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the database answers", responses=problem_responses(503))
def readyz(request: Request) -> dict[str, str]:
    try:
        ping(request.app.state.engine)
    except SQLAlchemyError as error:
        raise ApiProblem(
            503,
            "database-unavailable",
            f"The database cannot be reached: {type(error).__name__}.",
            headers={"Retry-After": "5"},
        ) from None
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
