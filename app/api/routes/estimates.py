"""`/v1/estimates/*`, `/v1/recommendations/chunk-size` and `/v1/roofline`: the performance model
over HTTP. Each route parses, calls one service function, and shapes the answer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Response
from starlette.concurrency import run_in_threadpool

from app.api.charts import SVG_MEDIA_TYPE, prefill_curve_svg, roofline_svg, wants_svg
from app.api.deps import SpecCacheDep, json_response, resolved_off_the_loop
from app.api.schemas.common import problem_responses
from app.api.schemas.estimates import (
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
from app.services import estimates

router = APIRouter(prefix="/v1", tags=["estimates"])

_PROBLEMS = problem_responses(400, 413, 415, 422)
_SVG: dict[int | str, dict[str, Any]] = {
    200: {"content": {SVG_MEDIA_TYPE: {"schema": {"type": "string"}}}}
}
AcceptHeader = Annotated[
    str | None,
    Header(description="`image/svg+xml` for a chart instead of JSON."),
]


@router.post(
    "/estimates/prefill",
    response_model=PrefillResponse,
    summary="Time to first token of a prompt",
    responses=_PROBLEMS,
)
async def estimate_prefill(body: PrefillRequest, cache: SpecCacheDep) -> Response:
    target, result = await resolved_off_the_loop(
        cache, body.refs(), estimates.prefill, cache, body.target_kwargs(), **body.workload()
    )
    return json_response(PrefillResponse.of(target, result))


@router.post(
    "/estimates/prefill-curve",
    response_model=PrefillCurveResponse,
    summary="TTFT over many prompt lengths (JSON, or an SVG chart)",
    responses=_PROBLEMS | _SVG,
)
async def estimate_prefill_curve(
    body: PrefillCurveRequest, cache: SpecCacheDep, accept: AcceptHeader = None
) -> Response:
    target, curve = await resolved_off_the_loop(
        cache,
        body.refs(),
        estimates.prefill_points,
        cache,
        body.target_kwargs(),
        body.prompt_tokens,
        **body.workload(),
    )
    answer = PrefillCurveResponse.of(target, curve)
    if wants_svg(accept):  # matplotlib takes ~100 ms: off the event loop
        return Response(
            await run_in_threadpool(prefill_curve_svg, answer), media_type=SVG_MEDIA_TYPE
        )
    return json_response(answer)


@router.post(
    "/estimates/decode",
    response_model=DecodeResponse,
    summary="Time per output token of a decode batch",
    responses=_PROBLEMS,
)
async def estimate_decode(body: DecodeRequest, cache: SpecCacheDep) -> Response:
    target, result = await resolved_off_the_loop(
        cache, body.refs(), estimates.decode, cache, body.target_kwargs(), **body.workload()
    )
    return json_response(DecodeResponse.of(target, result))


@router.post(
    "/estimates/request",
    response_model=RequestResponse,
    summary="End-to-end latency of a request: TTFT + (T - 1) x TPOT",
    responses=_PROBLEMS,
)
async def estimate_request(body: RequestRequest, cache: SpecCacheDep) -> Response:
    target, result = await resolved_off_the_loop(
        cache, body.refs(), estimates.request, cache, body.target_kwargs(), **body.workload()
    )
    return json_response(RequestResponse.of(target, result))


@router.post(
    "/estimates/batch-ceiling",
    response_model=BatchCeilingResponse,
    summary="How many sequences fit, and whether memory or compute stops the batch first",
    responses=_PROBLEMS,
)
async def estimate_batch_ceiling(body: BatchCeilingRequest, cache: SpecCacheDep) -> Response:
    target, result = await resolved_off_the_loop(
        cache, body.refs(), estimates.batch_ceiling, cache, body.target_kwargs(), **body.workload()
    )
    return json_response(BatchCeilingResponse.of(target, result))


@router.post(
    "/estimates/tp-feasibility",
    response_model=TpFeasibilityResponse,
    summary="Which tensor-parallel degrees work, and what else to do when none does",
    responses=_PROBLEMS,
)
async def estimate_tp_feasibility(body: TpFeasibilityRequest, cache: SpecCacheDep) -> Response:
    target, result = await resolved_off_the_loop(
        cache, body.refs(), estimates.tp_feasibility, cache, body.target_kwargs(), **body.workload()
    )
    return json_response(TpFeasibilityResponse.of(target, result))


@router.post(
    "/recommendations/chunk-size",
    response_model=ChunkSizeResponse,
    summary="Chunked-prefill size that keeps the inter-token SLA",
    tags=["recommendations"],
    responses=_PROBLEMS,
)
async def recommend_chunk_size(body: ChunkSizeRequest, cache: SpecCacheDep) -> Response:
    target, result = await resolved_off_the_loop(
        cache, body.refs(), estimates.chunk_size, cache, body.target_kwargs(), **body.workload()
    )
    return json_response(ChunkSizeResponse.of(target, result))


@router.post(
    "/roofline",
    response_model=RooflineResponse,
    summary="Ridge point of a GPU and where each phase sits (JSON, or an SVG chart)",
    responses=_PROBLEMS | _SVG,
)
async def roofline(
    body: RooflineRequest, cache: SpecCacheDep, accept: AcceptHeader = None
) -> Response:
    gpu_id, model_id, result = await resolved_off_the_loop(
        cache, body.refs(), estimates.roofline_of, cache, **body.resolve_kwargs()
    )
    answer = RooflineResponse.of(gpu_id, model_id, result)
    if wants_svg(accept):
        return Response(await run_in_threadpool(roofline_svg, answer), media_type=SVG_MEDIA_TYPE)
    return json_response(answer)
