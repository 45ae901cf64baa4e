"""`/v1/plans`: plan GPUs, replicas and cost for a traffic under latency SLOs, as jobs; stored
plans."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request, Response, status

from app.engine.planning import DEFAULT_MAX_SIMULATED_STEPS, MAX_CANDIDATES
from app.plans import service as plans
from app.plans.queue import PlanJobs
from app.plans.schemas import Detail, PlanAnswer, PlanList, PlanRequest, PlanSummary
from app.principals import Role
from app.web.charts import SVG_MEDIA_TYPE, plan_svg, wants_svg
from app.web.deps import (
    ApiKeyDep,
    HeavyWorkDep,
    LimitQuery,
    OffsetQuery,
    ReaderDep,
    SettingsDep,
    SpecCacheDep,
    json_response,
    read_in_session,
    read_json,
    text_filter,
    write_in_session,
)
from app.web.schemas import problem_responses

router = APIRouter(prefix="/v1", tags=["plans"])

PlanId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="Plan id.")]
DetailQuery = Annotated[
    Detail,
    Query(
        description="`compact`: the planned candidates, the others grouped by reason; `full`: "
        "every candidate (`plans` with the infeasible ones, and `pruned`)."
    ),
]


def _location(plan_id: str) -> dict[str, str]:
    return {"Location": f"/v1/plans/{plan_id}"}


@router.post(
    "/plans",
    response_model=PlanAnswer,
    status_code=status.HTTP_201_CREATED,
    summary="Plan a deployment: GPUs, tp, formats, replicas and cost",
    description=(
        "For every candidate (GPU, tp, weight/KV format, max_num_seqs, chunk) the fewest "
        "replicas whose simulated p99 TTFT and TPOT meet the SLOs at traffic x (1 + headroom), "
        "their cost, and the predicted latencies at the planned load; ranked by cost, infeasible "
        "candidates with their reasons. Candidates that provably cannot beat the plans returned "
        "are pruned before simulation (`exhaustive` plans them all). The work is bounded: at "
        f"most {MAX_CANDIDATES:,} candidates and {DEFAULT_MAX_SIMULATED_STEPS:,} simulated steps "
        "per plan (422 beyond). A plan is a job: done within `RIDGELINE_PLAN_WAIT_S` (2 s), the "
        "answer is 201 with the plan; else 202 with its `status` and `progress`, and `Location` "
        "to poll (`GET`) or cancel (`DELETE`). A plan refused within the wait (a 422) is not "
        "stored; one the job queue cannot take is a 503 (stored as failed). The plan is "
        "stored with the catalog versions it used. Needs an API key."
    ),
    responses=problem_responses(400, 401, 403, 413, 415, 422, 429, 503)
    | {202: {"model": PlanAnswer, "description": "Queued or running: poll `Location`."}},
)
async def create_plan_route(
    body: PlanRequest,
    cache: SpecCacheDep,
    settings: SettingsDep,
    request: Request,
    principal: ApiKeyDep,
    detail: DetailQuery = "compact",
) -> Response:
    query = body.query()
    job = await read_in_session(request, lambda session: plans.prepare_plan(session, cache, query))
    document = body.model_dump(mode="json")
    plan_id = await write_in_session(
        request,
        lambda session: plans.queue_plan(
            session, job, document, settings.plan_queue_limit, principal.name
        ),
        lambda row: row.id,
    )
    jobs: PlanJobs = request.app.state.plan_jobs
    await jobs.submit(plan_id)
    row = await jobs.wait(plan_id, settings.plan_wait_s)
    if row is not None and row.status == "failed" and row.error is not None:
        # Refused as fast as a synchronous plan would have been: answered so, not stored.
        await write_in_session(
            request, lambda session: plans.forget_plan(session, plan_id), lambda _: None
        )
        raise plans.PlanFailed(row.error)
    if row is not None and row.status == "done":
        return json_response(PlanAnswer.of(row, detail), 201, _location(plan_id))
    current = await read_in_session(request, lambda session: plans.get_plan(session, plan_id))
    return json_response(
        PlanAnswer.of(current, detail), 202, _location(plan_id) | {"Retry-After": "1"}
    )


@router.get(
    "/plans/{plan_id}",
    response_model=PlanAnswer,
    summary="Get a plan: its status and progress, and its answer when done (JSON, or its "
    "candidates drawn as cost against predicted p99)",
    responses=problem_responses(404, 409) | {200: {"content": {SVG_MEDIA_TYPE: {}}}},
)
async def get_plan_route(
    plan_id: PlanId,
    request: Request,
    heavy: HeavyWorkDep,
    detail: DetailQuery = "compact",
    accept: Annotated[
        str | None,
        Header(
            description="`image/svg+xml`: the candidates' cost against predicted p99 (a done "
            "plan; 409 before)."
        ),
    ] = None,
) -> Response:
    if wants_svg(accept):
        answer = await read_in_session(
            request, lambda session: plans.plan_in_full(session, plan_id)
        )
        chart = await heavy.run(request, plan_svg, answer)
        return Response(chart, media_type=SVG_MEDIA_TYPE)
    return await read_json(
        request, lambda session: PlanAnswer.of(plans.get_plan(session, plan_id), detail)
    )


@router.delete(
    "/plans/{plan_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Cancel a queued or running plan, or delete a finished one",
    description=(
        "A queued or running plan is cancelled (200 with its status, `cancelled`): its worker "
        "stops before its next candidate. A finished plan (done, failed or cancelled) is "
        "deleted (204). Needs the key of the principal that created it, or an admin key (403 "
        "otherwise)."
    ),
    responses=problem_responses(401, 403, 404)
    | {200: {"model": PlanAnswer, "description": "Cancelled."}},
)
async def delete_plan_route(plan_id: PlanId, request: Request, principal: ApiKeyDep) -> Response:
    cancelled = await write_in_session(
        request,
        lambda session: plans.cancel_or_delete_plan(
            session, plan_id, principal.name, admin=principal.may(Role.ADMIN)
        ),
        lambda row: None if row is None else PlanAnswer.of(row),
    )
    if cancelled is None:
        return Response(status_code=204)
    jobs: PlanJobs = request.app.state.plan_jobs
    await jobs.cancel(plan_id)  # stops its worker now, not at its next progress check
    return json_response(cancelled, 200)


@router.get(
    "/plans",
    response_model=PlanList,
    summary="List plans with their status, newest first",
    description=(
        "The caller's own plans (those its key's principal created); an admin key lists every "
        "plan. Needs an API key of any role."
    ),
    responses=problem_responses(401, 403),
)
async def list_plans_route(
    request: Request,
    principal: ReaderDep,
    limit: LimitQuery = 50,
    offset: OffsetQuery = 0,
    model: Annotated[str | None, text_filter("Only plans for this model id.")] = None,
) -> Response:
    owner = None if principal.may(Role.ADMIN) else principal.name
    return await read_json(
        request,
        lambda session: PlanList.of(
            plans.list_plans(session, limit=limit, offset=offset, model_id=model, owner=owner),
            PlanSummary.of,
        ),
    )
