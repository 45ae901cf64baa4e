"""What `/v1/profiles` and `/v1/gpus/{id}/profiles` answer."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.formats.profile_document import (
    FittedEfficiency,
    OverheadDoc,
    ProfileDocument,
    ProfileSource,
)
from app.profiles.service import StoredProfile

__all__ = ["ProfileList", "ProfileRead", "ProfileSummary"]


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
