"""`/v1/plans`: plan GPUs, replicas and cost for a traffic under latency SLOs; stored plans."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Request, Response, status

from app.engine.planning import DEFAULT_MAX_SIMULATED_STEPS, MAX_CANDIDATES
from app.plans import service as plans
from app.plans.schemas import PlanList, PlanRead, PlanRequest, PlanSummary
from app.web.charts import SVG_MEDIA_TYPE, plan_svg, wants_svg
from app.web.deps import (
    ApiKeyDep,
    HeavyWorkDep,
    LimitQuery,
    OffsetQuery,
    SpecCacheDep,
    json_response,
    read_in_session,
    read_json,
    text_filter,
    write_in_session,
)
from app.web.schemas import problem_responses

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
        "are pruned before simulation (`exhaustive` plans them all). The work is bounded: at "
        f"most {MAX_CANDIDATES:,} candidates and {DEFAULT_MAX_SIMULATED_STEPS:,} simulated steps "
        "per plan (422 beyond). The plan is stored with the catalog versions it used: `Location` "
        "names it. Needs an API key (it writes)."
    ),
    responses=problem_responses(400, 401, 403, 413, 415, 422, 429, 503),
)
async def create_plan_route(
    body: PlanRequest,
    cache: SpecCacheDep,
    heavy: HeavyWorkDep,
    request: Request,
    _key: ApiKeyDep,
) -> Response:
    query = body.query()
    job = await read_in_session(request, lambda session: plans.prepare_plan(session, cache, query))
    computed = await heavy.run(request, plans.compute_plan, job)
    document = body.model_dump(mode="json")
    return await write_in_session(
        request,
        lambda session: plans.store_plan(session, job, computed, document),
        lambda row: json_response(PlanRead.of(row), 201, {"Location": f"/v1/plans/{row.id}"}),
    )


@router.get(
    "/plans/{plan_id}",
    response_model=PlanRead,
    summary="Get a stored plan (JSON, or its candidates drawn as cost against predicted p99)",
    responses=problem_responses(404) | {200: {"content": {SVG_MEDIA_TYPE: {}}}},
)
async def get_plan_route(
    plan_id: Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="Plan id.")],
    request: Request,
    heavy: HeavyWorkDep,
    accept: Annotated[
        str | None,
        Header(description="`image/svg+xml`: the candidates' cost against predicted p99."),
    ] = None,
) -> Response:
    if wants_svg(accept):
        answer = await read_in_session(
            request, lambda session: PlanRead.of(plans.get_plan(session, plan_id))
        )
        chart = await heavy.run(request, plan_svg, answer)
        return Response(chart, media_type=SVG_MEDIA_TYPE)
    return await read_json(request, lambda session: PlanRead.of(plans.get_plan(session, plan_id)))


@router.get("/plans", response_model=PlanList, summary="List stored plans, newest first")
async def list_plans_route(
    request: Request,
    limit: LimitQuery = 50,
    offset: OffsetQuery = 0,
    model: Annotated[str | None, text_filter("Only plans for this model id.")] = None,
) -> Response:
    return await read_json(
        request,
        lambda session: PlanList.of(
            plans.list_plans(session, limit=limit, offset=offset, model_id=model),
            PlanSummary.of,
        ),
    )
