"""`/v1/benchmark-runs` and `/v1/gpus/{gpu_id}/calibrations`: measured runs, each run's
estimate-against-measurement report, and the calibrations fitted from them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Request, Response, status

from app.catalog.orm import GpuRow
from app.catalog.schemas import EfficiencyValues
from app.formats.run_document import RunDocument
from app.runs.calibration import (
    calibrate_gpu,
    calibration_warnings,
    efficiency_document,
    get_calibration,
    list_calibrations,
)
from app.runs.orm import BenchmarkRunRow, CalibrationRow
from app.runs.schemas import (
    BenchmarkRunPage,
    BenchmarkRunRead,
    BenchmarkRunSummary,
    CalibrationCreate,
    CalibrationPage,
    CalibrationRead,
    GpuBasisRead,
    PhaseValidationRead,
    PointValidationRead,
    RunValidationRead,
)
from app.runs.service import get_run, list_runs, store_run
from app.runs.validation import RunValidation, validate_run
from app.web.deps import (
    ApiKeyDep,
    IfMatchDep,
    LimitQuery,
    OffsetQuery,
    etag_for,
    json_response,
    read_json,
    text_filter,
    write_in_session,
)
from app.web.schemas import ID_PATTERN, problem_responses

run_router = APIRouter(prefix="/v1", tags=["benchmark runs"])

_RUN_ID = Path(
    pattern=ID_PATTERN,
    description="Benchmark run id.",
    examples=["ref-seed000-a100-sxm4-80gb-llama-3-8b"],
)


def _run_read(row: BenchmarkRunRow) -> BenchmarkRunRead:
    return BenchmarkRunRead.model_validate(
        {**row.document, "id": row.id, "stored_at": row.stored_at, "origin": row.origin}
    )


def _summary(row: BenchmarkRunRow) -> BenchmarkRunSummary:
    points = row.document.get("points", [])
    return BenchmarkRunSummary(
        id=row.id,
        gpu=row.gpu_id,
        model=row.model_id,
        device_name=row.device_name,
        device_kind=row.device_kind,
        dtype=row.dtype,
        tp=row.tp,
        provenance=row.provenance_kind,
        created_at=row.started_at,
        stored_at=row.stored_at,
        origin=row.origin,
        points=len(points),
        measured_points=sum(1 for p in points if p.get("skipped") is None),
    )


@run_router.post(
    "/benchmark-runs",
    response_model=BenchmarkRunRead,
    status_code=status.HTTP_201_CREATED,
    summary="Upload a benchmark run",
    description=(
        "The run document `ridgeline-bench` writes (schema_version 1), with `id` null. Unknown "
        "schema versions, negative or disordered times, and points the run's own model spec "
        "cannot take get 422 naming the field, and nothing is stored."
    ),
    responses=problem_responses(400, 401, 403, 413, 415, 422),
)
async def upload_run(
    document: Annotated[RunDocument, Body()],
    request: Request,
    _key: ApiKeyDep,
) -> Response:
    return await write_in_session(
        request,
        lambda session: store_run(session, document),
        lambda row: json_response(
            _run_read(row), 201, {"Location": f"{run_router.prefix}/benchmark-runs/{row.id}"}
        ),
    )


@run_router.get(
    "/benchmark-runs",
    response_model=BenchmarkRunPage,
    summary="List benchmark runs, newest first",
    responses=problem_responses(422),
)
async def list_runs_route(
    request: Request,
    gpu: Annotated[str | None, text_filter("Only runs naming this GPU catalog id.")] = None,
    model: Annotated[str | None, text_filter("Only runs of this model catalog id.")] = None,
    limit: LimitQuery = 50,
    offset: OffsetQuery = 0,
) -> Response:
    return await read_json(
        request,
        lambda session: BenchmarkRunPage.of(
            list_runs(session, gpu=gpu, model=model, limit=limit, offset=offset), _summary
        ),
    )


@run_router.get(
    "/benchmark-runs/{run_id}",
    response_model=BenchmarkRunRead,
    summary="Get a benchmark run",
    responses=problem_responses(404),
)
async def get_run_route(run_id: Annotated[str, _RUN_ID], request: Request) -> Response:
    return await read_json(request, lambda session: _run_read(get_run(session, run_id)))


@run_router.get(
    "/benchmark-runs/{run_id}/validation",
    response_model=RunValidationRead,
    summary="Compare a run's measurements with the engine's estimates",
    description=(
        "Each measured point beside the estimate for exactly its workload, with the run's own "
        "model spec, dtype and tp, on the run's catalog GPU at its current efficiency (or the "
        "catalog GPU whose alias is the run's device; else the run's own microbenchmarks as "
        "peaks, at 100 % and no overhead). 422 when there is nothing to compare against."
    ),
    responses=problem_responses(404, 422),
)
async def validate_run_route(run_id: Annotated[str, _RUN_ID], request: Request) -> Response:
    return await read_json(request, lambda session: _validation(validate_run(session, run_id)))


def _validation(report: RunValidation) -> RunValidationRead:
    basis = report.basis
    return RunValidationRead(
        run_id=report.run_id,
        gpu_basis=GpuBasisRead(
            kind=basis.kind,
            gpu=basis.gpu_id,
            gpu_version=basis.gpu_version,
            calibration_id=basis.calibration_id,
            efficiency=EfficiencyValues.model_validate(
                efficiency_document(report.efficiency, basis.calibration_id)
            ),
            note=basis.note,
        ),
        points=[PointValidationRead.model_validate(point) for point in report.points],
        skipped_points=report.skipped_points,
        mape_pct=report.mape_pct,
        phases=[PhaseValidationRead.model_validate(phase) for phase in report.phases],
    )


calibration_router = APIRouter(prefix="/v1", tags=["calibrations"])

_GPU_ID = Path(pattern=ID_PATTERN, description="GPU catalog id.", examples=["a100-sxm4-80gb"])
_CALIBRATION_ID = Path(pattern=ID_PATTERN, description="Calibration id.")


def _calibration_read(row: CalibrationRow) -> CalibrationRead:
    return CalibrationRead.model_validate(
        {
            "id": row.id,
            "gpu": row.gpu_id,
            "created_at": row.created_at,
            "run_ids": row.run_ids,
            "parameters": row.parameters,
            "points": row.points,
            "before": row.before,
            "efficiency": row.after,
            "before_mape_pct": row.before_mape_pct,
            "after_mape_pct": row.after_mape_pct,
            "before_mape_pct_by_phase": row.before_mape_pct_by_phase,
            "after_mape_pct_by_phase": row.after_mape_pct_by_phase,
            "gpu_version_before": row.gpu_version_before,
            "gpu_version_after": row.gpu_version_after,
            "warnings": calibration_warnings(row.parameters, list(row.before_mape_pct_by_phase)),
        }
    )


@calibration_router.post(
    "/gpus/{gpu_id}/calibrations",
    response_model=CalibrationRead,
    status_code=status.HTTP_201_CREATED,
    summary="Calibrate a GPU from benchmark runs",
    description=(
        "Fits the GPU's `gemm`, `attention`, `memory` efficiencies and per-step `overhead_ms` "
        "(or the subset in `parameters`) to every measured point of the runs: least squares on "
        "log error, fractions bounded to (0, 1]. Applies the result to the GPU's `efficiency` "
        "and keeps it in the history. `If-Match` with the GPU's ETag makes it conditional; "
        "without it, a GPU changed by another writer during the fit is a 412 as well, so two "
        "calibrations never silently overwrite each other. The response's ETag is the GPU's "
        "new version."
    ),
    responses=problem_responses(400, 401, 403, 404, 412, 413, 415, 422),
)
async def calibrate(
    gpu_id: Annotated[str, _GPU_ID],
    body: Annotated[CalibrationCreate, Body()],
    request: Request,
    if_match: IfMatchDep,
    _key: ApiKeyDep,
) -> Response:
    def present(result: tuple[CalibrationRow, GpuRow]) -> Response:
        row, gpu = result
        headers = {
            "ETag": etag_for(gpu.version),
            "Location": f"{calibration_router.prefix}/gpus/{gpu_id}/calibrations/{row.id}",
        }
        return json_response(_calibration_read(row), 201, headers)

    return await write_in_session(
        request,
        lambda session: calibrate_gpu(session, gpu_id, body.run_ids, body.parameters, if_match),
        present,
    )


@calibration_router.get(
    "/gpus/{gpu_id}/calibrations",
    response_model=CalibrationPage,
    summary="List a GPU's calibrations, newest first",
    responses=problem_responses(404, 422),
)
async def list_calibrations_route(
    gpu_id: Annotated[str, _GPU_ID],
    request: Request,
    limit: LimitQuery = 50,
    offset: OffsetQuery = 0,
) -> Response:
    return await read_json(
        request,
        lambda session: CalibrationPage.of(
            list_calibrations(session, gpu_id, limit=limit, offset=offset), _calibration_read
        ),
    )


@calibration_router.get(
    "/gpus/{gpu_id}/calibrations/{calibration_id}",
    response_model=CalibrationRead,
    summary="Get one calibration of a GPU",
    responses=problem_responses(404),
)
async def get_calibration_route(
    gpu_id: Annotated[str, _GPU_ID],
    calibration_id: Annotated[str, _CALIBRATION_ID],
    request: Request,
) -> Response:
    return await read_json(
        request, lambda session: _calibration_read(get_calibration(session, gpu_id, calibration_id))
    )
