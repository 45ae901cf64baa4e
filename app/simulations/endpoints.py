"""`POST /v1/simulations`: one replica serving a workload, simulated. Open: it stores nothing."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from app.simulations.schemas import SimulationRequest, SimulationResponse
from app.simulations.service import (
    ANONYMOUS_BUDGET,
    KEYED_BUDGET,
    prepare_simulation,
    run_simulation_job,
)
from app.web.charts import SVG_MEDIA_TYPE, simulation_svg, wants_svg
from app.web.deps import HeavyWorkDep, OptionalApiKeyDep, SpecCacheDep
from app.web.schemas import problem_responses

router = APIRouter(prefix="/v1", tags=["simulations"])


@router.post(
    "/simulations",
    response_model=SimulationResponse,
    summary="Simulate one replica serving a workload or a trace",
    description=(
        "A discrete-event simulation of continuous batching with chunked prefill, KV-limited "
        "admission and preemption (vLLM's scheduler), each step timed by the performance model. "
        "Deterministic: the same request gives the same answer. It runs in a heavy-work process "
        "(429 with `Retry-After` when those are all busy; a client that disconnects stops its "
        "run). The work is bounded before it starts, from an estimate of the forward steps: "
        f"without an API key up to {ANONYMOUS_BUDGET.max_requests:,} requests and about "
        f"{ANONYMOUS_BUDGET.max_steps:,} steps (a few seconds), with one up to "
        f"{KEYED_BUDGET.max_requests:,} requests and {KEYED_BUDGET.max_steps:,} steps; beyond, "
        "a 422 naming the field."
    ),
    responses=problem_responses(400, 403, 413, 415, 422, 429, 503)
    | {200: {"content": {SVG_MEDIA_TYPE: {}}}},
)
async def simulate_route(
    body: SimulationRequest,
    cache: SpecCacheDep,
    heavy: HeavyWorkDep,
    key: OptionalApiKeyDep,
    request: Request,
    accept: Annotated[
        str | None,
        Header(description="`image/svg+xml` for a chart (the queue, the percentiles, the SLOs)."),
    ] = None,
) -> Response:
    budget = KEYED_BUDGET if key is not None else ANONYMOUS_BUDGET
    job = await run_in_threadpool(prepare_simulation, cache, body.query(), budget)
    run = await heavy.run(request, run_simulation_job, job)
    answer = SimulationResponse.model_validate(run, from_attributes=True)
    if wants_svg(accept):
        slo = body.slo
        draw = partial(
            simulation_svg,
            ttft_slo_ms=slo.ttft_ms if slo else None,
            tpot_slo_ms=slo.tpot_ms if slo else None,
        )
        chart = await heavy.run(request, draw, answer)
        return Response(chart, media_type=SVG_MEDIA_TYPE)
    return JSONResponse(answer.model_dump(mode="json"))
