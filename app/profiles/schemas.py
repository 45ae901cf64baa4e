"""What `/v1/profiles` and `/v1/gpus/{id}/profiles` answer."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.formats.profile_document import (
    FittedEfficiency,
    OverheadDoc,
    ProfileDocument,
    ProfileSource,
)
from app.profiles.service import StoredProfile

__all__ = [
    "ProfileCalibrationCreate",
    "ProfileCalibrationRead",
    "ProfileList",
    "ProfileRead",
    "ProfileSummary",
]


class ProfileSummary(BaseModel):
    """A profile without its tables."""

    id: str = Field(description="Profile id.")
    gpu: str = Field(description="The catalog GPU it measures.")
    engine: str = Field(description="`vllm`, `sglang` or `trtllm`.")
    version: str = Field(description="The engine version it was measured under.")
    default: bool = Field(description="The GPU's default, for requests that name no engine.")
    bundled: bool = Field(description="Shipped with Ridgeline (true) or uploaded.")
    source: ProfileSource = Field(description="Where the measurements come from.")
    overhead: OverheadDoc = Field(description="The engine's own cost per step.")
    fitted: FittedEfficiency = Field(
        description="Roofline efficiencies fitted to its points: how shapes outside its tables "
        "are timed."
    )
    residual_pct: dict[str, float] = Field(
        description="Per op family, the RMS error of its interpolation against held-out "
        "measurements: what `expected_error_pct` reports for answers timed by it."
    )
    tables: dict[str, int] = Field(
        description="Tables per op family (`gemm` formats, attention head layouts, all-reduce)."
    )

    @classmethod
    def of(cls, stored: StoredProfile) -> ProfileSummary:
        doc = stored.document
        return cls(
            id=doc.id,
            gpu=doc.gpu,
            engine=doc.engine,
            version=doc.version,
            default=stored.default,
            bundled=stored.bundled,
            source=doc.source,
            overhead=doc.overhead,
            fitted=doc.fitted,
            residual_pct=doc.residual_pct,
            tables={
                "gemm": len(doc.gemm),
                "prefill_attention": len(doc.prefill_attention),
                "decode_attention": len(doc.decode_attention),
                "all_reduce": int(doc.all_reduce is not None),
            },
        )


class ProfileList(BaseModel):
    items: list[ProfileSummary] = Field(description="The GPU's profiles, uploaded ones first.")


class ProfileRead(BaseModel):
    """A profile's summary and its whole document."""

    summary: ProfileSummary = Field(description="Identity, source, fit.")
    document: ProfileDocument = Field(description="The document, tables included.")

    @classmethod
    def of(cls, stored: StoredProfile) -> ProfileRead:
        return cls(summary=ProfileSummary.of(stored), document=stored.document)


class ProfileCalibrationCreate(BaseModel):
    """Serving runs of the profile's GPU and engine to fit its engine overhead to."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"serving_run_ids": ["0" * 32]}]},
    )
    serving_run_ids: list[Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]] = Field(
        min_length=1, max_length=16, description="Ids of stored serving runs (`/v1/serving-runs`)."
    )


class ProfileCalibrationRead(BaseModel):
    """The calibrated profile (a new default of the GPU) and how well each fits the runs."""

    profile: ProfileSummary = Field(description="The new profile.")
    calibrated_from: str = Field(description="The profile whose kernels it keeps.")
    runs: int = Field(description="Measurements fitted to.")
    before_mape_pct: dict[str, float] = Field(
        description="Mean absolute error of the replays with the original overhead, by metric."
    )
    after_mape_pct: dict[str, float] = Field(description="The same, with the fitted overhead.")
