"""The part every estimate request shares: which model, on which GPU, deployed how, timed how;
and the echo of it every estimate response carries."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.catalog.schemas import (
    EfficiencyFractions,
    EfficiencyValues,
    GpuHardware,
    ModelArchitecture,
)
from app.targets.service import Target
from app.web.schemas import CATALOG_REF, Format, Input, StorageFormat

__all__ = [
    "DeploymentFields",
    "EfficiencyOverride",
    "EfficiencyUsed",
    "Format",
    "StorageFormat",
    "TargetEcho",
    "TargetRequest",
    "echo",
    "spec_fields",
]


class EfficiencyOverride(EfficiencyFractions):
    """Efficiencies for a what-if, instead of the GPU's calibration."""


def spec_fields(ref: str | BaseModel | None) -> str | dict[str, Any] | None:
    """A catalog id as it is; an inline spec as the plain fields `app.catalog.specs` maps."""
    return ref.model_dump() if isinstance(ref, BaseModel) else ref


class DeploymentFields(Input):
    """How the model is deployed: its tensor-parallel degree and storage formats."""

    tp: int = Field(default=1, ge=1, le=256, description="Tensor-parallel degree.", examples=[1])
    weight_dtype: Format = Field(
        default=StorageFormat.BF16,
        description="Weight format. int4 is weight-only (computes in bf16); fp8/int8 run W8A8.",
    )
    kv_dtype: Format = Field(default=StorageFormat.BF16, description="KV-cache format.")

    def deployment_kwargs(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "weight_dtype": self.weight_dtype.value,
            "kv_dtype": self.kv_dtype.value,
        }


class TargetRequest(DeploymentFields):
    """Which model, on which GPU, deployed how, timed how. Each estimate request adds its
    workload fields to these."""

    model: CATALOG_REF | ModelArchitecture = Field(
        description="A catalog model id, or an inline architecture for a what-if.",
        examples=["llama-3-8b"],
    )
    gpu: CATALOG_REF | GpuHardware = Field(
        description="A catalog GPU id, or inline hardware figures for a what-if.",
        examples=["h100-sxm5-80gb"],
    )
    efficiency: Literal["calibrated", "ideal"] | EfficiencyOverride = Field(
        default="calibrated",
        description=(
            "`calibrated`: the GPU's current calibration (or bundled default); `ideal`: 100 % of "
            "datasheet peak and no overhead, the theoretical lower bound of docs/model.md's "
            "article B; or explicit efficiencies for a what-if."
        ),
    )

    def refs(self) -> dict[str, object]:
        """The catalog ids this request names, for `SpecCache.generations`."""
        return {"model": self.model, "gpu": self.gpu}

    def target_kwargs(self) -> dict[str, Any]:
        """The arguments of `app.targets.service.resolve_target`."""
        return self.deployment_kwargs() | {
            "model": spec_fields(self.model),
            "gpu": spec_fields(self.gpu),
            "efficiency": spec_fields(self.efficiency),
        }

    def workload_fields(self) -> dict[str, Any]:
        """The fields a subclass adds, as the keyword arguments of its estimate service."""
        return self.model_dump(exclude=set(TargetRequest.model_fields))


class EfficiencyUsed(EfficiencyValues):
    """The efficiencies an estimate was timed with, and where they come from."""

    mode: str = Field(description="`calibrated`, `ideal` or `custom`.")


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
