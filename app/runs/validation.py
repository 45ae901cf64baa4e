"""Estimate against measurement, point by point, for a stored run; and the spread of those
residuals per GPU and phase, which estimates report as `expected_error_pct`.

`error_pct` is signed: (estimated - measured) / measured * 100, positive when the engine
overestimates. `mape_pct` is the mean of |error_pct|. Each point is estimated for exactly its
workload on the GPU `app.runs.service.resolve_gpu` picks, with the run's own model
spec, dtype and tp, causal attention.

`expected_error_pct(session, gpu_id, gpu_spec)[phase]` is the root mean square of `error_pct`
over every measured point of that phase in the runs that belong to the GPU (those that name it,
or whose device is one of its aliases and name no other catalog GPU), each estimated under
`gpu_spec` (the GPU's current efficiency). RMS rather than a percentile: a reference run has a
handful of points, and RMS counts a systematic bias as well as scatter (about one standard
deviation of the error when the bias is small).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from app.catalog.repository import GpuRepository
from app.catalog.service import changes, gpu_spec_of
from app.engine.specs import Efficiency, GpuSpec, SpecError
from app.engine.step_cost import StepCostModel
from app.errors import InvalidInput
from app.runs.orm import BenchmarkRunRow
from app.runs.repository import BenchmarkRunRepository
from app.runs.service import (
    GpuBasis,
    document_field,
    estimate_point,
    get_run,
    measured_points,
    resolve_run_gpu,
    run_cost_model,
)

__all__ = [
    "PhaseValidation",
    "PointValidation",
    "RunValidation",
    "compare_points",
    "expected_error_pct",
    "phase_summaries",
    "refresh_expected_errors",
    "validate_run",
    "watch",
]


@dataclass(frozen=True, slots=True)
class PointValidation:
    position: int
    """Index of the point in the run document's `points`."""
    phase: str
    prompt_tokens: int | None
    batch_size: int
    context_tokens: int | None
    measured_ms: float
    estimated_ms: float
    error_pct: float
    bound: str


@dataclass(frozen=True, slots=True)
class PhaseValidation:
    phase: str
    points: int
    mape_pct: float
    mean_error_pct: float
    """The bias: positive when the engine overestimates this phase on average."""
    rms_error_pct: float


@dataclass(frozen=True, slots=True)
class RunValidation:
    run_id: str
    basis: GpuBasis
    points: tuple[PointValidation, ...]
    skipped_points: int
    mape_pct: float
    phases: tuple[PhaseValidation, ...]

    @property
    def efficiency(self) -> Efficiency:
        return self.basis.spec.efficiency


def compare_points(run: BenchmarkRunRow, cost: StepCostModel) -> tuple[PointValidation, ...]:
    """Each measured point of `run` beside its estimate; `SpecError` when one cannot be timed."""
    results = []
    for point in measured_points(run):
        measured = point.median_ms or 0.0  # measured_points: never None
        estimated, bound = estimate_point(cost, point)
        results.append(
            PointValidation(
                position=point.position,
                phase=point.phase,
                prompt_tokens=point.prompt_tokens,
                batch_size=point.batch_size,
                context_tokens=point.context_tokens,
                measured_ms=measured,
                estimated_ms=estimated,
                error_pct=(estimated - measured) / measured * 100.0,
                bound=bound.value,
            )
        )
    return tuple(results)


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values))


def phase_summaries(points: Sequence[PointValidation]) -> tuple[PhaseValidation, ...]:
    """Per-phase errors, in the order the phases first appear."""
    groups: dict[str, list[float]] = {}
    for point in points:
        groups.setdefault(point.phase, []).append(point.error_pct)
    return tuple(
        PhaseValidation(
            phase=phase,
            points=len(errors),
            mape_pct=sum(abs(e) for e in errors) / len(errors),
            mean_error_pct=sum(errors) / len(errors),
            rms_error_pct=_rms(errors),
        )
        for phase, errors in groups.items()
    )


def validate_run(session: Session, run_id: str) -> RunValidation:
    """The run's points against the engine's estimates. 404 for an unknown run; 422 when the run
    has nothing to compare against, no measured point, or a point the GPU cannot time."""
    run = get_run(session, run_id, with_points=True)
    basis = resolve_run_gpu(session, run)
    try:
        cost = run_cost_model(run, basis.spec, basis.spec.efficiency)
        points = compare_points(run, cost)
    except SpecError as error:
        raise InvalidInput.at(document_field(error), error.message) from None
    if not points:
        raise InvalidInput.at("points", "the run has no measured point to compare")
    return RunValidation(
        run_id=run.id,
        basis=basis,
        points=points,
        skipped_points=len(run.points) - len(points),
        mape_pct=sum(abs(p.error_pct) for p in points) / len(points),
        phases=phase_summaries(points),
    )


def _belongs_to(session: Session, run: BenchmarkRunRow, gpu_id: str) -> bool:
    """The run resolves to `gpu_id`: it names it, or names no catalog GPU and its device is an
    alias of it (the query already matched one of the two)."""
    if run.gpu_id == gpu_id:
        return True
    return run.gpu_id is None or GpuRepository(session).get(run.gpu_id) is None


def expected_error_pct(session: Session, gpu_id: str, gpu_spec: GpuSpec) -> dict[str, float]:
    """Phase -> RMS of `error_pct` over the GPU's stored runs under `gpu_spec` (module
    docstring); empty when the GPU has no runs. Runs the GPU cannot time are left out."""
    row = GpuRepository(session).get(gpu_id)
    aliases = list(row.aliases or ()) if row is not None else []
    errors: dict[str, list[float]] = {}
    for run in BenchmarkRunRepository(session).for_gpu(gpu_id, aliases):
        if not _belongs_to(session, run, gpu_id):
            continue
        try:
            points = compare_points(run, run_cost_model(run, gpu_spec, gpu_spec.efficiency))
        except SpecError:
            continue
        for point in points:
            errors.setdefault(point.phase, []).append(point.error_pct)
    return {phase: _rms(values) for phase, values in errors.items()}


def refresh_expected_errors(session: Session, gpu_ids: Iterable[str]) -> None:
    """Recompute and store the expected error of these GPUs (`expected_error_pct`, kept in
    `app.catalog.orm.GpuExpectedError`), each under its current figures and efficiency."""
    repository = GpuRepository(session)
    for gpu_id in sorted(set(gpu_ids)):
        row = repository.get(gpu_id)
        if row is None:
            continue
        try:
            spec = gpu_spec_of(row)
        except SpecError:
            continue  # figures the engine refuses are refused at write time; nothing to trust
        repository.set_expected_error(gpu_id, expected_error_pct(session, gpu_id, spec))


def watch(session_factory: sessionmaker[Session]) -> None:
    """Before a transaction of `session_factory` commits, recompute the expected error of every
    GPU it wrote (a run upload and a calibration note their GPU as written, so do catalog writes
    of it): the stored figure never lags the runs and figures it comes from."""

    def before_commit(session: Session) -> None:
        gpus = [entry_id for kind, entry_id in changes(session) if kind == "gpu"]
        if gpus:
            refresh_expected_errors(session, gpus)

    event.listen(session_factory, "before_commit", before_commit)
