"""`/v1/profiles` and `/v1/gpus/{gpu_id}/profiles`: measured kernel profiles per GPU, serving
engine and version."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status

from app.formats.profile_document import ProfileDocument
from app.profiles import calibration_service as calibrations
from app.profiles import service as profiles
from app.profiles.calibration import fit_overhead
from app.profiles.schemas import (
    ProfileCalibrationCreate,
    ProfileCalibrationRead,
    ProfileList,
    ProfileRead,
    ProfileSummary,
)
from app.web.deps import (
    ApiKeyDep,
    HeavyWorkDep,
    SpecCacheDep,
    json_response,
    read_in_session,
    read_json,
    write_in_session,
)
from app.web.schemas import problem_responses

router = APIRouter(prefix="/v1", tags=["profiles"])

_GPU_ID = Path(
    pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
    description="GPU catalog id.",
    examples=["h100-sxm5-80gb"],
)
_PROFILE_ID = Path(
    pattern=r"^[a-z0-9][a-z0-9._-]{0,127}$",
    description="Profile id.",
    examples=["h100-sxm5-80gb-vllm-0.24.0"],
)


@router.get(
    "/gpus/{gpu_id}/profiles",
    response_model=ProfileList,
    summary="A GPU's measured profiles, per serving engine and version",
    responses=problem_responses(404, 422),
)
async def list_gpu_profiles_route(gpu_id: Annotated[str, _GPU_ID], request: Request) -> Response:
    return await read_json(
        request,
        lambda session: ProfileList(
            items=[ProfileSummary.of(p) for p in profiles.gpu_profiles(session, gpu_id)]
        ),
    )


@router.get(
    "/profiles/{profile_id}",
    response_model=ProfileRead,
    summary="Get a profile, tables included",
    responses=problem_responses(404, 422),
)
async def get_profile_route(profile_id: Annotated[str, _PROFILE_ID], request: Request) -> Response:
    return await read_json(
        request, lambda session: ProfileRead.of(profiles.get_profile(session, profile_id))
    )


@router.post(
    "/profiles",
    response_model=ProfileSummary,
    status_code=status.HTTP_201_CREATED,
    summary="Upload a profile (from the benchmark job's --profile mode or an import)",
    description=(
        "Measured kernel times of a catalog GPU under one serving engine version. Requests that "
        "name the engine (`engine: vllm@0.24.0`) are then timed by it; with `default: true` it "
        "is the GPU's default. Profiles never change: upload a new id for new measurements. "
        "Needs an API key."
    ),
    responses=problem_responses(400, 401, 403, 409, 413, 415, 422),
)
async def create_profile_route(
    body: ProfileDocument, request: Request, _key: ApiKeyDep
) -> Response:
    raw = body.model_dump(mode="json")
    return await write_in_session(
        request,
        lambda session: profiles.store_profile(session, body, raw),
        lambda stored: json_response(
            ProfileSummary.of(stored), 201, {"Location": f"/v1/profiles/{stored.document.id}"}
        ),
    )


@router.post(
    "/profiles/{profile_id}/calibrations",
    response_model=ProfileCalibrationRead,
    status_code=status.HTTP_201_CREATED,
    summary="Fit a profile's engine overhead to serving runs (a new default profile)",
    description=(
        "Replays each serving run on the simulator with this profile and fits the engine's "
        "per-step overhead to the runs' median TPOT and its per-request prefill dispatch to "
        "their median TTFT. The result is a new profile of the same GPU, engine and version, "
        "uploaded as the GPU's default: answers for other engines do not move. Needs an API key."
    ),
    responses=problem_responses(400, 401, 403, 404, 413, 415, 422, 429, 503),
)
async def calibrate_profile_route(
    profile_id: Annotated[str, _PROFILE_ID],
    body: ProfileCalibrationCreate,
    cache: SpecCacheDep,
    heavy: HeavyWorkDep,
    request: Request,
    _key: ApiKeyDep,
) -> Response:
    job = await read_in_session(
        request,
        lambda session: calibrations.prepare(session, cache, profile_id, body.serving_run_ids),
    )
    fit = await heavy.run(request, fit_overhead, job.profile, job.jobs, job.measurements)
    return await write_in_session(
        request,
        lambda session: calibrations.store(session, job, fit, body.serving_run_ids),
        lambda read: json_response(read, 201, {"Location": f"/v1/profiles/{read.profile.id}"}),
    )
