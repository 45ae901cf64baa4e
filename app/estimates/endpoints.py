"""`/v1/estimates/*`, `/v1/recommendations/chunk-size` and `/v1/roofline`: the performance model
over HTTP. Each route parses, calls one service function, and shapes the answer."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Header, Request, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from app.estimates import service as estimates
from app.estimates.schemas import (
    BatchCeilingRequest,
    BatchCeilingResponse,
    ChunkSizeRequest,
    ChunkSizeResponse,
    DecodeRequest,
    DecodeResponse,
    PrefillCurveRequest,
    PrefillCurveResponse,
    PrefillRequest,
    PrefillResponse,
    RequestRequest,
    RequestResponse,
    RooflineRequest,
    RooflineResponse,
    TpFeasibilityRequest,
    TpFeasibilityResponse,
)
from app.web.charts import SVG_MEDIA_TYPE, prefill_curve_svg, roofline_svg, wants_svg
from app.web.deps import HeavyWorkDep, SpecCacheDep, memoized_answer
from app.web.schemas import problem_responses

router = APIRouter(prefix="/v1", tags=["estimates"])

_PROBLEMS = problem_responses(400, 413, 415, 422)
_SVG: dict[int | str, dict[str, Any]] = {
    200: {"content": {SVG_MEDIA_TYPE: {"schema": {"type": "string"}}}}
}
AcceptHeader = Annotated[
    str | None,
    Header(description="`image/svg+xml` for a chart instead of JSON."),
]


A = TypeVar("A", bound=BaseModel)


def _shaped(schema: type[A], answer: object) -> A:
    """The answer schema read from an engine result by attribute (`Estimated`)."""
    return schema.model_validate(answer, from_attributes=True)


@router.post(
    "/estimates/prefill",
    response_model=PrefillResponse,
    summary="Time to first token of a prompt",
    responses=_PROBLEMS,
)
async def estimate_prefill(body: PrefillRequest, cache: SpecCacheDep, request: Request) -> Response:
    query = body.query()
    return await memoized_answer(
        request, body, lambda: _shaped(PrefillResponse, estimates.prefill(cache, query))
    )


@router.post(
    "/estimates/prefill-curve",
    response_model=PrefillCurveResponse,
    summary="TTFT over many prompt lengths (JSON, or an SVG chart)",
    responses=_PROBLEMS | _SVG | problem_responses(429, 503),
)
async def estimate_prefill_curve(
    body: PrefillCurveRequest,
    cache: SpecCacheDep,
    heavy: HeavyWorkDep,
    request: Request,
    accept: AcceptHeader = None,
) -> Response:
    query = body.query()

    def answer() -> PrefillCurveResponse:
        return _shaped(PrefillCurveResponse, estimates.prefill_points(cache, query))

    if wants_svg(accept):  # drawing takes ~100 ms of CPU: a heavy job
        chart = await heavy.run(request, prefill_curve_svg, await run_in_threadpool(answer))
        return Response(chart, media_type=SVG_MEDIA_TYPE)
    return await memoized_answer(request, body, answer)


@router.post(
    "/estimates/decode",
    response_model=DecodeResponse,
    summary="Time per output token of a decode batch",
    responses=_PROBLEMS,
)
async def estimate_decode(body: DecodeRequest, cache: SpecCacheDep, request: Request) -> Response:
    query = body.query()
    return await memoized_answer(
        request, body, lambda: _shaped(DecodeResponse, estimates.decode(cache, query))
    )


@router.post(
    "/estimates/request",
    response_model=RequestResponse,
    summary="End-to-end latency of a request: TTFT + (T - 1) x TPOT",
    responses=_PROBLEMS,
)
async def estimate_request(body: RequestRequest, cache: SpecCacheDep, request: Request) -> Response:
    query = body.query()
    return await memoized_answer(
        request, body, lambda: _shaped(RequestResponse, estimates.request(cache, query))
    )


@router.post(
    "/estimates/batch-ceiling",
    response_model=BatchCeilingResponse,
    summary="How many sequences fit, and whether memory or compute stops the batch first",
    responses=_PROBLEMS,
)
async def estimate_batch_ceiling(
    body: BatchCeilingRequest, cache: SpecCacheDep, request: Request
) -> Response:
    query = body.query()
    return await memoized_answer(
        request, body, lambda: _shaped(BatchCeilingResponse, estimates.batch_ceiling(cache, query))
    )


@router.post(
    "/estimates/tp-feasibility",
    response_model=TpFeasibilityResponse,
    summary="Which tensor-parallel degrees work, and what else to do when none does",
    responses=_PROBLEMS,
)
async def estimate_tp_feasibility(
    body: TpFeasibilityRequest, cache: SpecCacheDep, request: Request
) -> Response:
    query = body.query()
    return await memoized_answer(
        request,
        body,
        lambda: _shaped(TpFeasibilityResponse, estimates.tp_feasibility(cache, query)),
    )


@router.post(
    "/recommendations/chunk-size",
    response_model=ChunkSizeResponse,
    summary="Chunked-prefill size that keeps the inter-token SLA",
    tags=["recommendations"],
    responses=_PROBLEMS,
)
async def recommend_chunk_size(
    body: ChunkSizeRequest, cache: SpecCacheDep, request: Request
) -> Response:
    query = body.query()
    return await memoized_answer(
        request, body, lambda: _shaped(ChunkSizeResponse, estimates.chunk_size(cache, query))
    )


@router.post(
    "/roofline",
    response_model=RooflineResponse,
    summary="Ridge point of a GPU and where each phase sits (JSON, or an SVG chart)",
    responses=_PROBLEMS | _SVG | problem_responses(429, 503),
)
async def roofline(
    body: RooflineRequest,
    cache: SpecCacheDep,
    heavy: HeavyWorkDep,
    request: Request,
    accept: AcceptHeader = None,
) -> Response:
    query = body.query()

    def answer() -> RooflineResponse:
        return _shaped(RooflineResponse, estimates.roofline_of(cache, query))

    if wants_svg(accept):
        chart = await heavy.run(request, roofline_svg, await run_in_threadpool(answer))
        return Response(chart, media_type=SVG_MEDIA_TYPE)
    return await memoized_answer(request, body, answer)
