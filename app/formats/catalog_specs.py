"""Catalog entries and inline request specs, mapped onto the engine's spec classes.

One mapping serves both a stored row and an inline spec in a request body, so the engine sees the
same thing whichever way a caller names a GPU or a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.engine.dtypes import DType
from app.engine.specs import (
    Efficiency,
    GpuSpec,
    InterconnectSpec,
    ModelSpec,
    SpecError,
)
from app.formats.specs import build_spec

__all__ = [
    "GENERIC_EFFICIENCY",
    "efficiency_from_fields",
    "gpu_spec_from_fields",
    "model_spec_from_fields",
]

# Used for a GPU that has neither a calibration nor a bundled default (a user's new part):
# the median of the bundled defaults, rounded, and said to be so.
GENERIC_EFFICIENCY = Efficiency(
    gemm=0.6,
    attention=0.55,
    memory=0.8,
    communication=0.75,
    overhead_ms=1.0,
    source=(
        "generic default: this GPU has no calibration; values near the median of the bundled "
        "GPUs' defaults. Calibrate it from a benchmark run (POST /v1/gpus/{id}/calibrations)."
    ),
)

_EFFICIENCY_FIELDS = ("gemm", "attention", "memory", "communication", "overhead_ms", "source")


def efficiency_from_fields(fields: Mapping[str, Any] | None) -> Efficiency:
    if not fields:
        return GENERIC_EFFICIENCY
    return Efficiency(**{key: fields[key] for key in _EFFICIENCY_FIELDS if key in fields})


def gpu_spec_from_fields(fields: Mapping[str, Any]) -> GpuSpec:
    """Raises `SpecError` naming the field when the figures are impossible."""
    try:
        peaks = {DType(name): float(value) for name, value in fields["peak_flops_per_s"].items()}
    except ValueError as error:
        raise SpecError("peak_flops_per_s", str(error)) from None
    link = fields["interconnect"]
    optional: dict[str, Any] = {
        name: kind(link[name])
        for name, kind in (
            ("latency_s", float),
            ("domain_size", int),
            ("scale_out_bytes_per_s", float),
            ("scale_out_latency_s", float),
        )
        if link.get(name) is not None
    }
    return GpuSpec(
        id=fields.get("id") or "inline",
        memory_bytes=int(fields["memory_bytes"]),
        memory_bandwidth_bytes_per_s=float(fields["memory_bandwidth_bytes_per_s"]),
        peak_flops_per_s=peaks,
        interconnect=InterconnectSpec(
            kind=str(link["kind"]),
            bandwidth_bytes_per_s=float(link["bandwidth_bytes_per_s"]),
            **optional,
        ),
        efficiency=efficiency_from_fields(fields.get("efficiency")),
    )


def model_spec_from_fields(fields: Mapping[str, Any]) -> ModelSpec:
    """The model spec of a catalog entry's or an inline request's fields (other keys ignored);
    `SpecError` naming the field when the architecture is impossible."""
    return build_spec(ModelSpec, {**fields, "id": fields.get("id") or "inline"})
