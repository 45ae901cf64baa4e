"""The part every estimate request shares: which model, on which GPU, deployed how, timed how;
and the echo of it every estimate response carries."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.api.schemas.common import Input
from app.api.schemas.gpus import GpuHardware
from app.api.schemas.models import ModelArchitecture
from app.services.targets import Target

__all__ = [
    "EfficiencyOverride",
    "EfficiencyUsed",
    "StorageFormat",
    "TargetEcho",
    "TargetRequest",
    "echo",
]


class StorageFormat(StrEnum):
    """Formats weights and the KV cache can be stored in."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    FP4 = "fp4"


class EfficiencyOverride(Input):
    """Efficiencies for a what-if, instead of the GPU's calibration."""

    gemm: float = Field(gt=0, le=1, description="Fraction of tensor-core peak in linear layers.")
    attention: float = Field(gt=0, le=1, description="Fraction of tensor-core peak in attention.")
    memory: float = Field(gt=0, le=1, description="Fraction of memory bandwidth.")
    communication: float = Field(default=1.0, gt=0, le=1, description="Fraction of link bandwidth.")
    overhead_ms: float = Field(default=0.0, ge=0, le=1000, description="Added to every step.")


class TargetRequest(Input):
    model: str | ModelArchitecture = Field(
        description="A catalog model id, or an inline architecture for a what-if.",
        examples=["llama-3-8b"],
    )
    gpu: str | GpuHardware = Field(
        description="A catalog GPU id, or inline hardware figures for a what-if.",
        examples=["h100-sxm5-80gb"],
    )
    tp: int = Field(default=1, ge=1, le=256, description="Tensor-parallel degree.", examples=[1])
    weight_dtype: StorageFormat = Field(
        default=StorageFormat.BF16,
        description="Weight format. int4 is weight-only (computes in bf16); fp8/int8 run W8A8.",
    )
    kv_dtype: StorageFormat = Field(default=StorageFormat.BF16, description="KV-cache format.")
    efficiency: Literal["calibrated", "ideal"] | EfficiencyOverride = Field(
        default="calibrated",
        description=(
            "`calibrated`: the GPU's current calibration (or bundled default); `ideal`: 100 % of "
            "datasheet peak and no overhead, the theoretical lower bound the seeds compute; or "
            "explicit efficiencies for a what-if."
        ),
    )

    def refs(self) -> dict[str, object]:
        """The catalog references, for `SpecCache.covers`."""
        return {"model": self.model, "gpu": self.gpu}

    def target_kwargs(self) -> dict[str, Any]:
        """The arguments of `app.services.targets.resolve_target`."""
        return {
            "model": self.model if isinstance(self.model, str) else self.model.model_dump(),
            "gpu": self.gpu if isinstance(self.gpu, str) else self.gpu.model_dump(),
            "tp": self.tp,
            "weight_dtype": self.weight_dtype.value,
            "kv_dtype": self.kv_dtype.value,
            "efficiency": (
                self.efficiency
                if isinstance(self.efficiency, str)
                else self.efficiency.model_dump()
            ),
        }


class EfficiencyUsed(BaseModel):
    """The efficiencies an estimate was timed with, and where they come from."""

    mode: str = Field(description="`calibrated`, `ideal` or `custom`.")
    gemm: float = Field(description="Fraction of tensor-core peak in linear layers.")
    attention: float = Field(description="Fraction of tensor-core peak in attention.")
    memory: float = Field(description="Fraction of memory bandwidth.")
    communication: float = Field(description="Fraction of link bandwidth.")
    overhead_ms: float = Field(description="Fixed cost added to every step.")
    source: str = Field(description="Where the values come from.")
    calibration_id: str | None = Field(description="The calibration that set them, if any.")


class TargetEcho(BaseModel):
    """What was estimated: the resolved model, GPU, deployment and efficiency."""

    model: str = Field(description="The catalog model id, or `inline`.")
    gpu: str = Field(description="The catalog GPU id, or `inline`.")
    tp: int = Field(description="Tensor-parallel degree.")
    weight_dtype: str = Field(description="Weight format.")
    kv_dtype: str = Field(description="KV-cache format.")
    efficiency: EfficiencyUsed = Field(description="How the estimate was timed.")
    catalog_versions: dict[str, int] = Field(
        description="Versions of the catalog entries used (`model`, `gpu`), for reproducibility."
    )


def echo(target: Target) -> TargetEcho:
    eff = target.efficiency
    versions = {
        name: version
        for name, version in (("model", target.model_version), ("gpu", target.gpu_version))
        if version is not None
    }
    return TargetEcho(
        model=target.model_id,
        gpu=target.gpu_id,
        tp=target.deployment.tp,
        weight_dtype=target.deployment.weight_dtype.value,
        kv_dtype=target.deployment.kv_dtype.value,
        efficiency=EfficiencyUsed(
            mode=target.efficiency_mode.value,
            gemm=eff.gemm,
            attention=eff.attention,
            memory=eff.memory,
            communication=eff.communication,
            overhead_ms=eff.overhead_ms,
            source=eff.source,
            calibration_id=target.calibration_id,
        ),
        catalog_versions=versions,
    )
