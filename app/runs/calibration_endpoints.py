"""`/v1/gpus/{gpu_id}/calibrations`: fit a GPU's efficiency from benchmark runs; the history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Request, Response, status

from app.catalog.orm import GpuRow
from app.runs.calibration import (
    calibrate_gpu,
    calibration_warnings,
    get_calibration,
    list_calibrations,
)
from app.runs.orm import CalibrationRow
from app.runs.schemas import (
    CalibrationCreate,
    CalibrationPage,
    CalibrationRead,
)
from app.web.deps import (
    ApiKeyDep,
    IfMatchDep,
    LimitQuery,
    OffsetQuery,
    etag_for,
    json_response,
    read_json,
    write_in_session,
)
from app.web.schemas import ID_PATTERN, problem_responses

router = APIRouter(prefix="/v1", tags=["calibrations"])

_GPU_ID = Path(pattern=ID_PATTERN, description="GPU catalog id.", examples=["a100-sxm4-80gb"])
_CALIBRATION_ID = Path(pattern=ID_PATTERN, description="Calibration id.")


def _read(row: CalibrationRow) -> CalibrationRead:
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


@router.post(
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
            "Location": f"{router.prefix}/gpus/{gpu_id}/calibrations/{row.id}",
        }
        return json_response(_read(row), 201, headers)

    return await write_in_session(
        request,
        lambda session: calibrate_gpu(session, gpu_id, body.run_ids, body.parameters, if_match),
        present,
    )


@router.get(
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
            list_calibrations(session, gpu_id, limit=limit, offset=offset), _read
        ),
    )


@router.get(
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
        request, lambda session: _read(get_calibration(session, gpu_id, calibration_id))
    )
