"""Schemas of benchmark runs, their validation, and GPU calibrations.

Uploads are `app.formats.run_document.RunDocument` itself: the job writes it, the service reads it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import ConfigDict, Field

from app.catalog.schemas import EfficiencyValues
from app.engine.calibration import ALL_PARAMETERS, FitParameter
from app.formats.run_document import Phase, RunDocument
from app.runs.service import GpuBasisKind
from app.web.schemas import ID_PATTERN, Input, Lax, Output, Page

__all__ = [
    "RUN_ID",
    "BenchmarkRunPage",
    "BenchmarkRunRead",
    "BenchmarkRunSummary",
    "CalibrationCreate",
    "CalibrationPage",
    "CalibrationRead",
    "EfficiencyValues",
    "GpuBasisRead",
    "PhaseValidationRead",
    "PointValidationRead",
    "RunValidationRead",
]

RUN_ID = Annotated[
    str,
    Field(
        pattern=ID_PATTERN,
        description="Benchmark run id, as the service assigned it.",
        examples=["run-3f9a0c2b7d41"],
    ),
]


class BenchmarkRunRead(RunDocument):
    """A stored run: the document exactly as uploaded, with the id the service assigned."""

    id: str = Field(description="Assigned by the service on upload.", examples=["run-3f9a0c2b7d41"])
    stored_at: datetime = Field(description="When the service stored the run (UTC).")
    origin: str = Field(
        description="`bundled` (a reference run shipped with Ridgeline) or `user` (uploaded)."
    )


class BenchmarkRunSummary(Output):
    """One run in a list (GET the run for its points)."""

    id: str = Field(description="Run id.")
    gpu: str | None = Field(description="GPU catalog id the run names; null when unknown.")
    model: str | None = Field(description="Catalog id of the architecture; null for a config.")
    device_name: str = Field(description="The device as the job saw it.")
    device_kind: str = Field(description="cuda or cpu.")
    dtype: str = Field(description="Format of weights, activations and KV cache.")
    tp: int = Field(description="Tensor-parallel degree.")
    provenance: str = Field(description="measured-by-job or published.")
    created_at: datetime = Field(description="When the run started (the document's created_at).")
    stored_at: datetime = Field(description="When the service stored the run (UTC).")
    origin: str = Field(description="`bundled` or `user`.")
    points: int = Field(description="Points planned, skipped ones included.")
    measured_points: int = Field(description="Points that carry times.")


class BenchmarkRunPage(Page[BenchmarkRunSummary]):
    """One page of runs, newest first."""


class GpuBasisRead(Output):
    """What the run was compared against."""

    kind: GpuBasisKind = Field(
        description="`catalog`: a catalog GPU at its current efficiency; `microbenchmarks`: the "
        "run's own measured matmul rate and copy bandwidth at 100 %, no overhead."
    )
    gpu: str | None = Field(description="The catalog GPU's id; null for microbenchmarks.")
    gpu_version: int | None = Field(description="The catalog GPU's version (its ETag).")
    calibration_id: str | None = Field(
        description="The calibration behind the GPU's efficiency; null when none."
    )
    efficiency: EfficiencyValues = Field(description="The efficiency the estimates used.")
    note: str = Field(description="Why this basis: how the run's GPU was resolved.")


class PointValidationRead(Output):
    """One measured point beside the engine's estimate for exactly its workload."""

    position: int = Field(description="Index of the point in the run's `points`.")
    phase: Phase = Field(description="prefill or decode.")
    prompt_tokens: int | None = Field(description="Prefill: prompt length, tokens.")
    batch_size: int = Field(description="Sequences processed together.")
    context_tokens: int | None = Field(
        description="Decode: keys each new token attends over, itself included."
    )
    measured_ms: float = Field(description="The run's median, ms.")
    estimated_ms: float = Field(description="The engine's estimate, ms.")
    error_pct: float = Field(
        description="(estimated - measured) / measured * 100; positive: the engine overestimates."
    )
    bound: str = Field(description="Whether the estimate is compute- or memory-bound.")


class PhaseValidationRead(Output):
    """The errors of one phase's points."""

    phase: Phase = Field(description="prefill or decode.")
    points: int = Field(description="Measured points of this phase.")
    mape_pct: float = Field(description="Mean absolute percentage error, %.")
    mean_error_pct: float = Field(description="Mean signed error (the bias), %.")
    rms_error_pct: float = Field(description="Root mean square of the signed errors, %.")


class RunValidationRead(Output):
    """A run's measurements against the engine's estimates."""

    run_id: str = Field(description="The validated run.")
    gpu_basis: GpuBasisRead = Field(description="The GPU and efficiency estimated on.")
    points: list[PointValidationRead] = Field(description="Every measured point, in run order.")
    skipped_points: int = Field(description="Points the run skipped (no times to compare).")
    mape_pct: float = Field(description="Mean absolute percentage error over all points, %.")
    phases: list[PhaseValidationRead] = Field(description="The same errors, per phase.")


class CalibrationCreate(Input):
    """Which runs to fit, and which efficiency values to fit to them."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "run_ids": ["ref-seed000-a100-sxm4-80gb-llama-3-8b"],
                    "parameters": ["gemm", "attention"],
                }
            ]
        }
    )

    run_ids: list[RUN_ID] = Field(
        min_length=1,
        max_length=100,
        description="Runs measured on this GPU (their `gpu` is its id) or on a device outside "
        "the catalog (`gpu` null).",
    )
    parameters: list[Annotated[FitParameter, Lax]] = Field(
        default_factory=lambda: list(ALL_PARAMETERS),
        min_length=1,
        max_length=len(ALL_PARAMETERS),
        description="Values to fit; the others keep their current values. Default: all four.",
    )


class CalibrationRead(Output):
    """One calibration of a GPU: what it fitted, to what, and how well."""

    id: str = Field(description="Calibration id.", examples=["cal-0b1c2d3e4f56"])
    gpu: str = Field(description="The calibrated GPU's catalog id.")
    created_at: datetime = Field(description="When the calibration was made (UTC).")
    run_ids: list[str] = Field(description="The runs fitted to.")
    parameters: list[FitParameter] = Field(description="The values fitted.")
    points: int = Field(description="Measured points the fit used.")
    before: EfficiencyValues = Field(description="The efficiency the fit started from.")
    efficiency: EfficiencyValues = Field(
        description="The efficiency the calibration wrote to the GPU."
    )
    before_mape_pct: float = Field(description="MAPE of the points before, %.")
    after_mape_pct: float = Field(description="MAPE of the points after, %.")
    before_mape_pct_by_phase: dict[Phase, float] = Field(description="MAPE before, per phase.")
    after_mape_pct_by_phase: dict[Phase, float] = Field(description="MAPE after, per phase.")
    gpu_version_before: int = Field(description="The GPU's version the calibration read.")
    gpu_version_after: int = Field(description="The GPU's version it wrote (its new ETag).")
    warnings: list[str] = Field(
        default_factory=list,
        description="Cautions, e.g. values fitted from runs without the phase that pins them.",
    )


class CalibrationPage(Page[CalibrationRead]):
    """A GPU's calibrations, newest first."""
