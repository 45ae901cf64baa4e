"""`/v1/plans`: plan GPUs, replicas and cost for a traffic under latency SLOs; stored plans."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from app.api.deps import ApiKeyDep, SessionDep, SpecCacheDep
from app.api.schemas.common import problem_responses
from app.api.schemas.plans import PlanList, PlanRead, PlanRequest, PlanSummary
from app.services import plans

router = APIRouter(prefix="/v1", tags=["plans"])


@router.post(
    "/plans",
    response_model=PlanRead,
    status_code=status.HTTP_201_CREATED,
    summary="Plan a deployment: GPUs, tp, formats, replicas and cost",
    description=(
        "For every candidate (GPU, tp, weight/KV format, max_num_seqs, chunk) the fewest "
        "replicas whose simulated p99 TTFT and TPOT meet the SLOs at traffic x (1 + headroom), "
        "their cost, and the predicted latencies at the planned load; ranked by cost, infeasible "
        "candidates with their reasons. Candidates that provably cannot beat the plans returned "
        "are pruned before simulation (`exhaustive` plans them all). The plan is stored with the "
        "catalog versions it used: `Location` names it. Needs an API key (it writes)."
    ),
    responses=problem_responses(400, 401, 403, 413, 415, 422),
)
def create_plan_route(
    body: PlanRequest,
    session: SessionDep,
    cache: SpecCacheDep,
    response: Response,
    _key: ApiKeyDep,
) -> PlanRead:
    row = plans.create_plan(session, cache, body.query(), body.model_dump(mode="json"))
    response.headers["Location"] = f"/v1/plans/{row.id}"
    return PlanRead.of(row)


@router.get(
    "/plans/{plan_id}",
    response_model=PlanRead,
    summary="Get a stored plan",
    responses=problem_responses(404),
)
def get_plan_route(
    plan_id: Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="Plan id.")],
    session: SessionDep,
) -> PlanRead:
    return PlanRead.of(plans.get_plan(session, plan_id))


@router.get("/plans", response_model=PlanList, summary="List stored plans, newest first")
def list_plans_route(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500, description="Page size.")] = 50,
    offset: Annotated[int, Query(ge=0, le=10**6, description="Plans to skip.")] = 0,
    model: Annotated[
        str | None, Query(max_length=64, description="Only plans for this model id.")
    ] = None,
) -> PlanList:
    rows, total = plans.list_plans(session, limit=limit, offset=offset, model_id=model)
    return PlanList(
        items=[PlanSummary.of(row) for row in rows], total=total, limit=limit, offset=offset
    )
