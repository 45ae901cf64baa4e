"""What an estimate is about: a model on a GPU, deployed with a TP degree and formats, timed with an
efficiency. Requests name the model and GPU by catalog id or inline; both resolve here, once, into
the engine's specs and a `StepCostModel`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.catalog.spec_cache import CachedGpu, SpecCache
from app.catalog.specs import (
    efficiency_from_fields,
    gpu_spec_from_fields,
    invalid_spec,
    model_spec_from_fields,
)
from app.engine.dtypes import DType
from app.engine.specs import (
    IDEAL_EFFICIENCY,
    Deployment,
    Efficiency,
    GpuSpec,
    ModelSpec,
    SpecError,
)
from app.engine.step_cost import StepCostModel
from app.errors import InvalidInput

__all__ = [
    "INLINE",
    "EfficiencyMode",
    "Target",
    "resolve_gpu_spec",
    "resolve_model",
    "resolve_target",
    "storage_format",
]

INLINE = "inline"


class EfficiencyMode(StrEnum):
    CALIBRATED = "calibrated"  # the GPU's current calibration (or its bundled default)
    IDEAL = "ideal"  # 100 % of datasheet peak, no overhead: article B's lower bound (docs/model.md)
    CUSTOM = "custom"  # efficiencies given in the request


@dataclass(frozen=True, slots=True)
class Target:
    model: ModelSpec
    gpu: GpuSpec
    deployment: Deployment
    efficiency: Efficiency
    efficiency_mode: EfficiencyMode
    cost: StepCostModel
    model_id: str
    gpu_id: str
    model_version: int | None = None
    gpu_version: int | None = None
    calibration_id: str | None = None
    price_per_gpu_hour_usd: float | None = None
    expected_error_pct: Mapping[str, float] = field(default_factory=dict)


def storage_format(field: str, name: str) -> DType:
    """The format `name`; a 422 naming `field` when there is no such format."""
    try:
        return DType(name)
    except ValueError:
        formats = ", ".join(d.value for d in DType)
        raise InvalidInput.at(field, f"unknown format {name!r}; one of {formats}") from None


def resolve_model(
    cache: SpecCache, model: str | Mapping[str, Any]
) -> tuple[ModelSpec, str, int | None]:
    """The model's spec, its catalog id (`inline` for an inline spec) and catalog version; a
    422 naming `model` when the id is unknown or the architecture impossible."""
    if isinstance(model, str):
        cached = cache.model(model, "model")
        return cached.spec, cached.spec.id, cached.version
    try:
        return model_spec_from_fields(model), INLINE, None
    except SpecError as error:
        raise invalid_spec(error, "model") from None


def resolve_gpu_spec(
    cache: SpecCache, gpu: str | Mapping[str, Any]
) -> tuple[GpuSpec, str, CachedGpu | None]:
    """The GPU's spec, its catalog id (`inline` for an inline spec) and its cache entry (None
    inline); a 422 naming `gpu` when the id is unknown or the figures impossible."""
    if isinstance(gpu, str):
        cached = cache.gpu(gpu, "gpu")
        return cached.spec, cached.spec.id, cached
    try:
        return gpu_spec_from_fields(gpu), INLINE, None
    except SpecError as error:
        raise invalid_spec(error, "gpu") from None


def resolve_target(
    cache: SpecCache,
    *,
    model: str | Mapping[str, Any],
    gpu: str | Mapping[str, Any],
    tp: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    efficiency: str | Mapping[str, Any] = EfficiencyMode.CALIBRATED,
) -> Target:
    """Resolve ids and inline specs; a 422 names the request field behind any impossibility."""
    model_spec, model_id, model_version = resolve_model(cache, model)
    gpu_spec, gpu_id, cached = resolve_gpu_spec(cache, gpu)
    extras: dict[str, Any] = {}
    if cached is not None:
        extras = {
            "gpu_version": cached.version,
            "price_per_gpu_hour_usd": cached.price_per_gpu_hour_usd,
            "calibration_id": (cached.efficiency_fields or {}).get("calibration_id"),
            "expected_error_pct": cached.expected_error_pct,
        }

    if isinstance(efficiency, Mapping):
        mode = EfficiencyMode.CUSTOM
        try:
            chosen = efficiency_from_fields({"source": "given in the request", **efficiency})
        except SpecError as error:
            raise invalid_spec(error) from None
        extras.pop("calibration_id", None)
        extras.pop("expected_error_pct", None)
    else:
        mode = EfficiencyMode(efficiency)
        if mode is EfficiencyMode.IDEAL:
            chosen = IDEAL_EFFICIENCY
            extras.pop("calibration_id", None)
            extras.pop("expected_error_pct", None)
        else:
            chosen = gpu_spec.efficiency

    try:
        deployment = Deployment(
            tp=tp,
            weight_dtype=storage_format("weight_dtype", weight_dtype),
            kv_dtype=storage_format("kv_dtype", kv_dtype),
        )
        cost = StepCostModel(model_spec, gpu_spec, deployment, chosen)
    except SpecError as error:
        raise invalid_spec(error) from None
    return Target(
        model=model_spec,
        gpu=gpu_spec,
        deployment=deployment,
        efficiency=chosen,
        efficiency_mode=mode,
        cost=cost,
        model_id=model_id,
        gpu_id=gpu_id,
        model_version=model_version,
        **extras,
    )
