"""`POST /v1/capacity` and `GET /v1/capacity/metrics`: what one replica of a deployment sustains
within its SLOs, for autoscalers (JSON, or Prometheus text on `Accept: text/plain`)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from starlette.concurrency import run_in_threadpool

from app.capacity import service as capacity
from app.capacity.schemas import CapacityRequest, CapacityResponse
from app.capacity.search import CapacityAnswer
from app.catalog.spec_cache import NotCached, SpecCache
from app.web.deps import HeavyWorkDep, OptionalApiKeyDep, SpecCacheDep
from app.web.heavy import HeavyWork
from app.web.negotiation import JSON, TEXT, preferred
from app.web.schemas import problem_responses

router = APIRouter(prefix="/v1", tags=["capacity"])

PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
_METRIC_NAMES = ", ".join(f"`{name}`" for name, _ in capacity.METRICS)


def store_of(request: Request) -> capacity.CapacityStore:
    """The app's capacity cache, made on first use (only the event loop calls this)."""
    store: capacity.CapacityStore | None = getattr(request.app.state, "capacity_store", None)
    if store is None:
        store = capacity.CapacityStore()
        request.app.state.capacity_store = store
    return store


async def _simulated(
    request: Request,
    cache: SpecCache,
    heavy: HeavyWork,
    store: capacity.CapacityStore,
    resolved: capacity.ResolvedDeployment,
) -> CapacityAnswer:
    """The rate searched by simulation, once per key at a time: a question asked again while
    its first asking is still simulating waits for that answer (an autoscaler polling every few
    seconds must not queue one search per poll). If the first asking fails (its client left),
    a waiter searches itself."""
    key = resolved.key
    running = store.pending.get(key)
    if running is not None:
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            if not running.cancelled():
                raise  # this request itself was cancelled
        except Exception:  # the first asking failed: this one tries itself
            pass
    future: asyncio.Future[CapacityAnswer] = asyncio.get_running_loop().create_future()
    store.pending[key] = future
    try:
        question = await run_in_threadpool(capacity.prepare_question, cache, resolved)
        found: CapacityAnswer = await heavy.run(request, capacity.compute_capacity, question)
    except asyncio.CancelledError:
        future.cancel()
        raise
    except Exception as error:
        future.set_exception(error)
        future.exception()  # retrieved: no "never retrieved" log when nobody waited
        raise
    finally:
        if store.pending.get(key) is future:
            del store.pending[key]
    store.put(key, found)
    future.set_result(found)
    return found


@router.post(
    "/capacity",
    response_model=CapacityResponse,
    summary="The request rate one replica sustains within SLOs, and replicas for a rate",
    description=(
        "For a deployment (model, GPU, tp/pp/dp/ep, formats, max_num_seqs, chunk_tokens, "
        "engine), a request mix and p99 SLOs: the highest request rate one replica sustains "
        "with the SLOs met, found by simulation with the capacity planner's probes (within "
        "1 %), the predicted latencies there and, for `observed_requests_per_s`, the replicas "
        "it needs with `headroom`. The first question about a deployment and mix simulates "
        "(seconds, in a heavy-work process); repeats are answered from a cache. "
        f"`Accept: text/plain` answers Prometheus text: {_METRIC_NAMES}, labelled by "
        "`deployment` and `engine`."
    ),
    responses=problem_responses(400, 413, 415, 422, 429, 503)
    | {200: {"content": {TEXT: {"schema": {"type": "string"}}}}},
)
async def capacity_route(
    body: CapacityRequest,
    cache: SpecCacheDep,
    heavy: HeavyWorkDep,
    request: Request,
    key: OptionalApiKeyDep,
    accept: Annotated[
        str | None, Header(description="`text/plain` for Prometheus text instead of JSON.")
    ] = None,
) -> Response:
    store = store_of(request)
    try:
        with cache.cached_only():  # on the event loop: never blocks on the database
            resolved = capacity.resolve_deployment(cache, body)
    except NotCached:
        resolved = await run_in_threadpool(capacity.resolve_deployment, cache, body)
    found = store.get(resolved.key)
    cached = found is not None
    if found is None:
        found = await _simulated(request, cache, heavy, store, resolved)
    answer = capacity.answer(resolved, found, cached=cached)
    if key is not None:
        # What autoscalers scrape (`/v1/capacity/metrics`) is written by callers with a key
        # only: anyone may ask, nobody anonymous may change a deployment's replica count.
        store.remember(answer)
    if preferred(accept, (JSON, TEXT)) == TEXT:
        return Response(capacity.prometheus_text([answer]), media_type=PROMETHEUS)
    return Response(answer.model_dump_json(), media_type=JSON)


@router.get(
    "/capacity/metrics",
    summary="Prometheus text of every deployment this process answered capacity for",
    description=(
        f"The latest capacity answer per deployment name: {_METRIC_NAMES}, labelled by "
        "`deployment` and `engine`; a scrape target for an autoscaler's Prometheus. Each "
        "process answers for the deployments it was asked about (answers are deterministic: "
        "any process asked the same question gives the same numbers)."
    ),
    response_class=Response,
    responses={200: {"content": {PROMETHEUS: {"schema": {"type": "string"}}}}},
)
async def capacity_metrics_route(request: Request) -> Response:
    return Response(capacity.prometheus_text(store_of(request).named()), media_type=PROMETHEUS)
