"""`POST /v1/profiles/{id}/calibrations`: gather the runs, then store the fitted profile."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from app.catalog.spec_cache import SpecCache
from app.engine.profiles import Profile
from app.engine.serving import EngineName, ServingEngine
from app.errors import InvalidInput
from app.formats.profile_document import ProfileDocument
from app.formats.serving_results import ServingMeasurement
from app.profiles.calibration import OverheadFit, fitted_document
from app.profiles.schemas import ProfileCalibrationRead, ProfileSummary
from app.profiles.service import get_profile, store_profile
from app.serving_runs.schemas import ServingRunCreate
from app.serving_runs.service import (
    SimulationJob,
    get_serving_run,
    measurements_of,
    prepare_replays,
)
from app.targets.service import resolve_gpu_spec

__all__ = ["CalibrationJob", "prepare", "store"]


@dataclass(frozen=True, slots=True)
class CalibrationJob:
    base: dict[str, Any]
    profile: Profile
    jobs: list[SimulationJob]
    measurements: list[ServingMeasurement]


def prepare(
    session: Session, cache: SpecCache, profile_id: str, run_ids: list[str]
) -> CalibrationJob:
    """The base profile and a replay per measurement of the runs, each timed by the base; 422
    naming `serving_run_ids.<i>` for a run of another GPU."""
    stored = get_profile(session, profile_id)
    document = stored.document
    engine = ServingEngine(EngineName(document.engine), document.version)
    jobs: list[SimulationJob] = []
    measurements: list[ServingMeasurement] = []
    for i, run_id in enumerate(run_ids):
        row = get_serving_run(session, run_id)
        upload = ServingRunCreate.model_validate(row.request, strict=False).upload()
        if resolve_gpu_spec(cache, upload.target.gpu)[1] != document.gpu:
            raise InvalidInput.at(
                f"serving_run_ids.{i}", f"run {run_id} is not on GPU {document.gpu}"
            )
        upload = replace(upload, target=replace(upload.target, engine=engine))
        found = measurements_of(upload)
        measurements += found
        jobs += prepare_replays(cache, upload, found)
    return CalibrationJob(
        document.model_dump(mode="json"), document.to_profile(), jobs, measurements
    )


def store(
    session: Session, job: CalibrationJob, fit: OverheadFit, run_ids: list[str]
) -> ProfileCalibrationRead:
    new_id = f"{job.base['id'][:110]}-cal-{uuid.uuid4().hex[:8]}"
    # Calibrating asks for it: the calibrated profile times the release in the base's place.
    raw = fitted_document(job.base, fit, new_id, run_ids) | {"replaces": job.base["id"]}
    document = ProfileDocument.model_validate(raw, strict=False)
    stored = store_profile(session, document, document.model_dump(mode="json"))
    return ProfileCalibrationRead(
        profile=ProfileSummary.of(stored),
        calibrated_from=job.base["id"],
        runs=fit.runs,
        before_mape_pct=fit.before,
        after_mape_pct=fit.after,
    )
