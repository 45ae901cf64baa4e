"""`/v1/estimates/*`, `/v1/recommendations/chunk-size` and `/v1/roofline`: the performance model
over HTTP. Each route parses, calls one service function, and shapes the answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import APIRouter, Header, Request, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from app.catalog.spec_cache import SpecCache
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
from app.web.deps import EstimateBody, HeavyWorkDep, SpecCacheDep, memoized_answer
from app.web.estimate_routing import EstimateRoute
from app.web.heavy import HeavyWork
from app.web.json_writer import JsonWriter
from app.web.schemas import problem_responses

router = APIRouter(prefix="/v1", tags=["estimates"], route_class=EstimateRoute)

_PROBLEMS = problem_responses(400, 413, 415, 422)
_SVG: dict[int | str, dict[str, Any]] = {
    200: {"content": {SVG_MEDIA_TYPE: {"schema": {"type": "string"}}}}
}
AcceptHeader = Annotated[
    str | None,
    Header(description="`image/svg+xml` for a chart instead of JSON."),
]


A = TypeVar("A", bound=BaseModel)
Q_co = TypeVar("Q_co", covariant=True)


class _Body(EstimateBody, Protocol[Q_co]):
    def query(self) -> Q_co: ...


def _given(answer: object) -> tuple[object, dict[str, object]]:
    """(source, given) of a service answer for its schema's `JsonWriter`: `target` and
    `expected_error_pct` from an `Answer` (and `warnings`, when its target has some, before the
    result's), every other field from its engine result, by attribute (a `RooflineAnswer`: all
    by attribute)."""
    if isinstance(answer, estimates.Answer):
        given: dict[str, object] = {
            "target": answer.target,
            "expected_error_pct": answer.expected_error_pct,
            "error_interval_pct": answer.error_interval_pct,
        }
        if answer.warnings:
            given["warnings"] = [*answer.warnings, *getattr(answer.result, "warnings", ())]
        return answer.result, given
    return answer, {}


def _shaped(schema: type[A], answer: object) -> A:
    """The answer schema's model of a service answer (what a chart draws)."""
    source, given = _given(answer)
    return JsonWriter.of(schema).model(source, given)


def _written(schema: type[BaseModel], answer: object) -> bytes:
    """The answer schema's JSON of a service answer, written without building the model."""
    source, given = _given(answer)
    return JsonWriter.of(schema).dumps(source, given)


async def _estimate(
    request: Request,
    body: _Body[Q_co],
    cache: SpecCache,
    schema: type[A],
    answer: Callable[[SpecCache, Q_co], object],
) -> Response:
    """The answer to `body`, from the memo or computed, as `schema`."""
    query = body.query()
    return await memoized_answer(request, body, lambda: _written(schema, answer(cache, query)))


async def _estimate_or_chart(
    request: Request,
    body: _Body[Q_co],
    cache: SpecCache,
    heavy: HeavyWork,
    accept: str | None,
    schema: type[A],
    answer: Callable[[SpecCache, Q_co], object],
    draw: Callable[[A], str],
) -> Response:
    """`_estimate`, or on `Accept: image/svg+xml` the answer (computed in the thread pool: it
    may read the database) drawn by `draw` in the heavy-work pool (a chart takes ~100 ms of
    CPU)."""
    if not wants_svg(accept):
        return await _estimate(request, body, cache, schema, answer)
    query = body.query()
    shaped = await run_in_threadpool(lambda: _shaped(schema, answer(cache, query)))
    chart = await heavy.run(request, draw, shaped)
    return Response(chart, media_type=SVG_MEDIA_TYPE)


@router.post(
    "/estimates/prefill",
    response_model=PrefillResponse,
    summary="Time to first token of a prompt",
    responses=_PROBLEMS,
)
async def estimate_prefill(body: PrefillRequest, cache: SpecCacheDep, request: Request) -> Response:
    return await _estimate(request, body, cache, PrefillResponse, estimates.prefill)


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
    return await _estimate_or_chart(
        request,
        body,
        cache,
        heavy,
        accept,
        PrefillCurveResponse,
        estimates.prefill_points,
        prefill_curve_svg,
    )


@router.post(
    "/estimates/decode",
    response_model=DecodeResponse,
    summary="Time per output token of a decode batch",
    responses=_PROBLEMS,
)
async def estimate_decode(body: DecodeRequest, cache: SpecCacheDep, request: Request) -> Response:
    return await _estimate(request, body, cache, DecodeResponse, estimates.decode)


@router.post(
    "/estimates/request",
    response_model=RequestResponse,
    summary="End-to-end latency of a request: TTFT + (T - 1) x TPOT",
    responses=_PROBLEMS,
)
async def estimate_request(body: RequestRequest, cache: SpecCacheDep, request: Request) -> Response:
    return await _estimate(request, body, cache, RequestResponse, estimates.request)


@router.post(
    "/estimates/batch-ceiling",
    response_model=BatchCeilingResponse,
    summary="How many sequences fit, and whether memory or compute stops the batch first",
    responses=_PROBLEMS,
)
async def estimate_batch_ceiling(
    body: BatchCeilingRequest, cache: SpecCacheDep, request: Request
) -> Response:
    return await _estimate(request, body, cache, BatchCeilingResponse, estimates.batch_ceiling)


@router.post(
    "/estimates/tp-feasibility",
    response_model=TpFeasibilityResponse,
    summary="Which tensor-parallel degrees work, and what else to do when none does",
    responses=_PROBLEMS,
)
async def estimate_tp_feasibility(
    body: TpFeasibilityRequest, cache: SpecCacheDep, request: Request
) -> Response:
    return await _estimate(request, body, cache, TpFeasibilityResponse, estimates.tp_feasibility)


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
    return await _estimate(request, body, cache, ChunkSizeResponse, estimates.chunk_size)


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
    return await _estimate_or_chart(
        request, body, cache, heavy, accept, RooflineResponse, estimates.roofline_of, roofline_svg
    )
