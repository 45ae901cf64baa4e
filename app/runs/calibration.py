"""Calibrate a catalog GPU's efficiency from stored benchmark runs, and keep the history.

A calibration reads the GPU (its version), decomposes every measured point of the named runs on
that GPU (`app.engine.calibration`), fits the chosen parameters, and writes the GPU's
`efficiency` through `CatalogEntries.replace` naming the version it read: `If-Match` with a stale
version is a 412 before anything is fitted, and a GPU changed by anyone between the read and the
write is a 412 too, with nothing stored. Two calibrations never silently overwrite each other.
The history row is written in the same transaction as the GPU.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from app.catalog.orm import GpuRow
from app.catalog.service import Precondition, gpu_entries
from app.db.pages import Page
from app.engine.calibration import (
    ALL_PARAMETERS,
    CalibrationPoint,
    CalibrationResult,
    FitParameter,
    decompose,
    fit_efficiency,
    unit_efficiency,
)
from app.engine.specs import Efficiency, GpuSpec, SpecError
from app.errors import CalibrationNotFound, InvalidInput, PreconditionFailed
from app.formats.catalog_specs import gpu_spec_from_fields
from app.runs.orm import CalibrationRow
from app.runs.repository import BenchmarkRunRepository, CalibrationRepository
from app.runs.service import (
    document_field,
    measured_points,
    point_load,
    run_cost_model,
)

__all__ = [
    "calibrate_gpu",
    "calibration_warnings",
    "efficiency_document",
    "get_calibration",
    "list_calibrations",
]

_SOURCE_RUN_IDS = 20  # run ids named in the efficiency's `source` text before "and N more"


def efficiency_document(efficiency: Efficiency, calibration_id: str | None) -> dict[str, Any]:
    """An efficiency as the GPU row stores it (the catalog's `efficiency` fields)."""
    document: dict[str, Any] = {
        "gemm": efficiency.gemm,
        "attention": efficiency.attention,
        "memory": efficiency.memory,
        "communication": efficiency.communication,
        "overhead_ms": efficiency.overhead_ms,
        "source": efficiency.source,
    }
    if calibration_id is not None:
        document["calibration_id"] = calibration_id
    return document


# What each phase pins: prefill is mostly compute (gemm, attention); decode mostly memory and the
# per-step overhead.
_PINNED_BY = {
    "prefill": (FitParameter.GEMM, FitParameter.ATTENTION),
    "decode": (FitParameter.MEMORY, FitParameter.OVERHEAD_MS),
}


def calibration_warnings(parameters: Sequence[str], phases: Sequence[str]) -> list[str]:
    """Cautions about a calibration whose runs lack the phase that pins some fitted values."""
    warnings = []
    for phase, pinned in _PINNED_BY.items():
        weak = [p.value for p in pinned if p.value in parameters]
        if phase not in phases and weak:
            warnings.append(
                f"the runs have no {phase} point: {' and '.join(weak)} were fitted without the "
                f"phase that pins them best; check {phase} estimates against a {phase} run, or "
                f"fit only the values the runs measure (parameters)"
            )
    return warnings


def _points(
    session: Session, gpu_id: str, gpu: GpuSpec, run_ids: Sequence[str]
) -> list[CalibrationPoint]:
    """Every measured point of the runs, decomposed on `gpu`; 422 naming `run_ids[i]` for a
    run that does not exist, belongs to another GPU, or cannot be timed on this one."""
    if not run_ids:
        raise InvalidInput.at("run_ids", "name at least one benchmark run")
    repository = BenchmarkRunRepository(session)
    unit = unit_efficiency(gpu.efficiency)
    seen: dict[str, int] = {}
    points: list[CalibrationPoint] = []
    for index, run_id in enumerate(run_ids):
        field = f"run_ids[{index}]"
        if run_id in seen:
            raise InvalidInput.at(field, f"repeats run_ids[{seen[run_id]}]")
        seen[run_id] = index
        run = repository.get(run_id, with_points=True)
        if run is None:
            raise InvalidInput.at(field, f"no benchmark run with id {run_id!r}")
        if run.gpu_id is not None and run.gpu_id != gpu_id:
            raise InvalidInput.at(
                field, f"run {run_id!r} was measured on GPU {run.gpu_id!r}, not {gpu_id!r}"
            )
        measured = measured_points(run)
        if not measured:
            raise InvalidInput.at(field, f"run {run_id!r} has no measured point")
        try:
            cost = run_cost_model(run, gpu, unit)
            for point in measured:
                step = cost.breakdown(point_load(point))
                points.append(decompose(step, point.median_ms or 0.0, point.phase))
        except SpecError as error:
            where = document_field(error)
            raise InvalidInput.at(
                field, f"run {run_id!r} cannot be timed on GPU {gpu_id!r}: {where}: {error.message}"
            ) from None
    return points


def _source(calibration_id: str, run_ids: Sequence[str], result: CalibrationResult) -> str:
    named = ", ".join(run_ids[:_SOURCE_RUN_IDS])
    if len(run_ids) > _SOURCE_RUN_IDS:
        named += f" and {len(run_ids) - _SOURCE_RUN_IDS} more"
    fitted = ", ".join(p.value for p in result.parameters)
    return (
        f"calibration {calibration_id} from runs {named}: {fitted} fitted by least squares on "
        f"log error (scipy.optimize.least_squares, bounded) to {len(result.before_ms)} measured "
        f"points; MAPE {result.before_mape_pct:.2f} % before, {result.after_mape_pct:.2f} % after"
    )


def calibrate_gpu(
    session: Session,
    gpu_id: str,
    run_ids: Sequence[str],
    parameters: Sequence[FitParameter] = ALL_PARAMETERS,
    if_match: Precondition | None = None,
) -> tuple[CalibrationRow, GpuRow]:
    """Fit, apply and record a calibration of `gpu_id`; the history row and the updated GPU.

    404 for an unknown GPU; 412 when `if_match` is stale or the GPU changes meanwhile; 422
    naming `run_ids[i]` for a run that cannot be used.
    """
    entries = gpu_entries(session)
    row = entries.get(gpu_id)
    if if_match is not None and not if_match.admits(row.version):
        raise PreconditionFailed(
            f"gpu {gpu_id!r} is at version {row.version}, not {if_match.describe()}: fetch it "
            "again and recalibrate."
        )
    read_version = row.version
    fields = entries.document(row)
    gpu = gpu_spec_from_fields(fields | {"id": gpu_id})
    before = (
        dict(row.efficiency)
        if row.efficiency
        else efficiency_document(gpu.efficiency, calibration_id=None)
    )
    points = _points(session, gpu_id, gpu, run_ids)
    # The fit is CPU work over every point: end the read-only transaction rather than hold a
    # connection idle in it meanwhile. The write below re-reads the GPU and names `read_version`.
    session.rollback()
    calibration_id = f"cal-{uuid.uuid4().hex[:12]}"
    result = fit_efficiency(points, gpu.efficiency, parameters)
    fitted = efficiency_document(result.efficiency, calibration_id) | {
        "source": _source(calibration_id, run_ids, result)
    }
    # The write names the version read above: any change since then is a 412, nothing stored.
    updated = entries.replace(
        gpu_id, fields | {"efficiency": fitted}, Precondition.at(read_version)
    )
    history = CalibrationRow(
        id=calibration_id,
        gpu_id=gpu_id,
        run_ids=list(run_ids),
        parameters=[p.value for p in result.parameters],
        points=len(points),
        before=before,
        after=fitted,
        before_mape_pct=result.before_mape_pct,
        after_mape_pct=result.after_mape_pct,
        before_mape_pct_by_phase=dict(result.before_mape_pct_by_phase),
        after_mape_pct_by_phase=dict(result.after_mape_pct_by_phase),
        gpu_version_before=read_version,
        gpu_version_after=updated.version,
    )
    CalibrationRepository(session).add(history)
    return history, updated


def list_calibrations(
    session: Session, gpu_id: str, *, limit: int, offset: int
) -> Page[CalibrationRow]:
    """The GPU's calibrations, newest first; 404 for an unknown GPU."""
    gpu_entries(session).get(gpu_id)
    items, total = CalibrationRepository(session).page(gpu_id, limit=limit, offset=offset)
    return Page(items=items, total=total, limit=limit, offset=offset)


def get_calibration(session: Session, gpu_id: str, calibration_id: str) -> CalibrationRow:
    gpu_entries(session).get(gpu_id)
    row = CalibrationRepository(session).get(gpu_id, calibration_id)
    if row is None:
        raise CalibrationNotFound(gpu_id, calibration_id)
    return row
