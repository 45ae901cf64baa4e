"""`POST /v1/simulations`: one replica serving a workload, simulated; `POST
/v1/simulations/sweeps`: the same at several loads. Open: they store nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from app.simulations.schemas import (
    SimulationRequest,
    SimulationResponse,
    SimulationSlo,
    SweepRequest,
    SweepResponse,
)
from app.simulations.service import (
    ANONYMOUS_BUDGET,
    KEYED_BUDGET,
    prepare_simulation,
    run_simulation_job,
)
from app.simulations.sweeps import CHOSEN_SPAN, prepare_sweep, run_sweep_job
from app.web.charts import SVG_MEDIA_TYPE, simulation_svg, sweep_svg, wants_svg
from app.web.deps import HeavyWorkDep, OptionalApiKeyDep, SpecCacheDep
from app.web.heavy import HeavyWork
from app.web.schemas import problem_responses

router = APIRouter(prefix="/v1", tags=["simulations"])

Answer = TypeVar("Answer", SimulationResponse, SweepResponse)


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
    return await _answer_or_chart(request, heavy, accept, answer, simulation_svg, body.slo)


@router.post(
    "/simulations/sweeps",
    response_model=SweepResponse,
    summary="Simulate one replica at several loads: latency against load up to saturation",
    description=(
        "The same requests (one seed) served at each arrival rate (open loop) or number of "
        "users (closed loop): given, or chosen up to saturation (a search by simulation finds "
        "the lowest rate at which the backlog grows; the rates span "
        f"{CHOSEN_SPAN[0]:g} to {CHOSEN_SPAN[1]:g} times it). Each point has its TTFT and TPOT "
        "percentiles, throughput, goodput and whether it saturates; `Accept: image/svg+xml` "
        "draws p50, p90 and p99 against the load with the SLOs. It runs in a heavy-work "
        "process, and the forward steps of all its points together are bounded as one "
        "simulation's are (a 422 naming the field beyond)."
    ),
    responses=problem_responses(400, 403, 413, 415, 422, 429, 503)
    | {200: {"content": {SVG_MEDIA_TYPE: {}}}},
)
async def sweep_route(
    body: SweepRequest,
    cache: SpecCacheDep,
    heavy: HeavyWorkDep,
    key: OptionalApiKeyDep,
    request: Request,
    accept: Annotated[
        str | None,
        Header(description="`image/svg+xml` for a chart (TTFT and TPOT against the load)."),
    ] = None,
) -> Response:
    budget = KEYED_BUDGET if key is not None else ANONYMOUS_BUDGET
    job = await run_in_threadpool(prepare_sweep, cache, body.query(), budget)
    run = await heavy.run(request, run_sweep_job, job)
    answer = SweepResponse.of(run, body.slo)
    return await _answer_or_chart(request, heavy, accept, answer, sweep_svg, body.slo)


async def _answer_or_chart(
    request: Request,
    heavy: HeavyWork,
    accept: str | None,
    answer: Answer,
    draw: Callable[[Answer, float | None, float | None], str],
    slo: SimulationSlo | None,
) -> Response:
    """The answer as JSON or, when `accept` prefers SVG, drawn with the SLOs (a heavy-work job)."""
    if not wants_svg(accept):
        return JSONResponse(answer.model_dump(mode="json"))
    chart = await heavy.run(
        request, draw, answer, slo.ttft_ms if slo else None, slo.tpot_ms if slo else None
    )
    return Response(chart, media_type=SVG_MEDIA_TYPE)
