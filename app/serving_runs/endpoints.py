"""`/v1/serving-runs`: serving-benchmark result files, compared with the simulator."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status
from starlette.concurrency import run_in_threadpool

from app.serving_runs import service
from app.serving_runs.schemas import ServingRunCreate, ServingRunList, ServingRunRead
from app.targets.service import resolve_gpu_spec, resolve_model
from app.web.deps import (
    ApiKeyDep,
    HeavyWorkDep,
    LimitQuery,
    OffsetQuery,
    SpecCacheDep,
    json_response,
    read_json,
    text_filter,
    write_in_session,
)
from app.web.schemas import problem_responses

router = APIRouter(prefix="/v1", tags=["serving runs"])


@router.post(
    "/serving-runs",
    response_model=ServingRunRead,
    status_code=status.HTTP_201_CREATED,
    summary="Upload a serving benchmark's result file; compare it with the simulator",
    description=(
        "Takes the result file of vLLM's `bench serve`, SGLang's `bench_serving`, genai-perf, "
        "AIPerf or GuideLLM, with the model, GPU, layout and engine the run used. Each "
        "measurement is replayed on one simulated replica at the run's load and mean lengths; "
        "the answer gives both and the signed error. Stored; `Location` names it. Needs an API "
        "key."
    ),
    responses=problem_responses(400, 401, 403, 413, 415, 422, 429, 503),
)
async def create_serving_run_route(
    body: ServingRunCreate,
    cache: SpecCacheDep,
    heavy: HeavyWorkDep,
    request: Request,
    _key: ApiKeyDep,
) -> Response:
    upload = body.upload()
    measurements = service.measurements_of(upload)

    def prepare() -> tuple[list[service.SimulationJob], str, str]:
        jobs = service.prepare_replays(cache, upload, measurements)
        model = resolve_model(cache, upload.target.model)[1]
        gpu = resolve_gpu_spec(cache, upload.target.gpu)[1]
        return jobs, model, gpu

    jobs, model_id, gpu_id = await run_in_threadpool(prepare)  # the spec cache reads the catalog
    validation = await heavy.run(request, service.compare, measurements, jobs)
    document = body.model_dump(mode="json")
    return await write_in_session(
        request,
        lambda session: service.store_serving_run(
            session,
            upload,
            document=document,
            gpu_id=gpu_id,
            model_id=model_id,
            validation=validation,
        ),
        lambda row: json_response(
            ServingRunRead.of(row), 201, {"Location": f"/v1/serving-runs/{row.id}"}
        ),
    )


@router.get(
    "/serving-runs/{serving_run_id}",
    response_model=ServingRunRead,
    summary="Get a serving run and its comparison",
    responses=problem_responses(404, 422),
)
async def get_serving_run_route(
    serving_run_id: Annotated[
        str,
        Path(pattern=r"^[0-9a-f]{32}$", description="Serving-run id (its upload's Location)."),
    ],
    request: Request,
) -> Response:
    return await read_json(
        request, lambda session: ServingRunRead.of(service.get_serving_run(session, serving_run_id))
    )


@router.get("/serving-runs", response_model=ServingRunList, summary="List serving runs")
async def list_serving_runs_route(
    request: Request,
    gpu: Annotated[str | None, text_filter("Only runs on this GPU catalog id.")] = None,
    limit: LimitQuery = 50,
    offset: OffsetQuery = 0,
) -> Response:
    return await read_json(
        request,
        lambda session: ServingRunList(
            items=[
                ServingRunRead.of(row)
                for row in service.list_serving_runs(session, gpu, limit, offset)
            ]
        ),
    )
