"""Catalog schemas: GPUs and models as clients write and read them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from app.catalog.orm import ModelRow
from app.engine.calibration import MIN_FRACTION
from app.engine.dtypes import DType
from app.engine.specs import MlaSpec, ModelSpec, MoeSpec
from app.formats.specs import SpecSchema, derived_from
from app.web.schemas import (
    ENTRY_ID,
    STORED,
    Format,
    Input,
    Lax,
    Output,
    SourceRef,
    StorageFormat,
    merge_patch_model,
)

_TB = 10**12
MIN_RATE = 1e6
"""Least FLOP/s or bytes/s a part may claim: below it, times overflow to infinity."""
Fraction = Annotated[float, Field(ge=MIN_FRACTION, le=1)]
"""A share of a datasheet peak; 0.1 % is the least, as calibrations fit them."""


class InterconnectKind(StrEnum):
    NVLINK3 = "nvlink3"
    NVLINK4 = "nvlink4"
    NVLINK5 = "nvlink5"
    NVLINK_BRIDGE = "nvlink-bridge"
    PCIE4 = "pcie4"
    PCIE5 = "pcie5"
    INFINITY_FABRIC = "infinity-fabric"


def _peak(dtype: str, example: float | None = None) -> Any:
    return Field(
        default=None,
        ge=MIN_RATE,
        le=1e17,
        description=f"Dense {dtype} peak, FLOP/s (never the 2:4-sparsity figure).",
        examples=[example] if example else None,
    )


class PeakFlops(Input):
    """Dense peak FLOP/s per numeric format; leave out a format the part cannot compute in."""

    fp32: float | None = _peak("fp32 (vector, non-tensor-core)", 67e12)
    tf32: float | None = _peak("tf32 tensor-core", 494.7e12)
    bf16: float | None = _peak("bf16 tensor-core", 989.4e12)
    fp16: float | None = _peak("fp16 tensor-core", 989.4e12)
    fp8: float | None = _peak("fp8 tensor-core", 1978.9e12)
    int8: float | None = _peak("int8 tensor-core (OP/s)", 1978.9e12)
    int4: float | None = _peak("int4 tensor-core (OP/s)")
    fp4: float | None = _peak("fp4 tensor-core")

    @model_serializer(mode="wrap")
    def _present_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, float]:
        return {k: v for k, v in handler(self).items() if v is not None}


class InterconnectFields(Input):
    """The link tensor parallelism talks over."""

    kind: Annotated[InterconnectKind, Lax] = Field(
        description="Link technology.", examples=["nvlink4"]
    )
    bandwidth_bytes_per_s: float = Field(
        ge=MIN_RATE,
        le=100 * _TB,
        description=(
            "Per-GPU bandwidth as datasheets quote it, both directions summed (NVLink 4: 9e11). "
            "A ring all-reduce moves data one way, at half of it."
        ),
        examples=[900e9],
    )
    latency_s: float = Field(
        default=5e-6,
        ge=0,
        le=1e-3,
        description="Latency of one ring step of a small all-reduce, seconds.",
        examples=[5e-6],
    )
    domain_size: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="GPUs that reach each other over this link: 8 on HGX boards, 72 in NVL72.",
        examples=[8],
    )
    scale_out_bytes_per_s: float = Field(
        default=50e9,
        ge=MIN_RATE,
        le=100 * _TB,
        description=(
            "Per GPU, one direction, between link domains (InfiniBand/RoCE NIC): 400 Gb/s is "
            "5e10. A group of GPUs larger than the domain talks at this rate."
        ),
        examples=[50e9],
    )
    scale_out_latency_s: float = Field(
        default=5e-6,
        ge=0,
        le=1e-3,
        description="Latency of one step over the scale-out network, seconds.",
    )


class EfficiencyFractions(Input):
    """Fractions of datasheet peak reached in practice, and the fixed cost of a forward step."""

    gemm: Fraction = Field(
        description="Fraction of tensor-core peak in linear layers and the LM head.",
        examples=[0.62],
    )
    attention: Fraction = Field(
        description="Fraction of tensor-core peak in attention.", examples=[0.6]
    )
    memory: Fraction = Field(description="Fraction of memory bandwidth reached.", examples=[0.85])
    communication: Fraction = Field(
        default=1.0, description="Fraction of link bandwidth reached.", examples=[0.8]
    )
    overhead_ms: float = Field(
        default=0.0,
        ge=0,
        le=1000,
        description="Fixed cost added to every forward step, ms.",
        examples=[1.5],
    )


class EfficiencyFields(EfficiencyFractions):
    """A GPU's efficiencies, and where they come from."""

    source: str = Field(min_length=1, max_length=4000, description="Where these values come from.")
    fitted_to: list[SourceRef] | None = Field(
        default=None, description="Measurements the values were fitted to."
    )
    borrowed_from: str | None = Field(
        default=None, description="The measured GPU these values were taken from, if any."
    )
    calibration_id: str | None = Field(
        default=None, description="The calibration that set these values, if one did."
    )


class EfficiencyValues(Output):
    """The efficiency an estimate used, or a calibration started from or wrote."""

    gemm: float = Field(description="Fraction of tensor-core peak in linear layers and LM head.")
    attention: float = Field(description="Fraction of tensor-core peak in attention.")
    memory: float = Field(description="Fraction of memory bandwidth reached.")
    communication: float = Field(description="Fraction of link bandwidth reached.")
    overhead_ms: float = Field(description="Fixed cost added to every forward step, ms.")
    source: str = Field(description="Where these values come from.")
    calibration_id: str | None = Field(
        default=None, description="The calibration that set these values, if one did."
    )


class GpuHardware(Input):
    """What the performance model needs of a GPU. Estimates take one inline wherever they take a
    catalog GPU id."""

    memory_bytes: int = Field(
        gt=0,
        le=2**41,
        description="Device memory as the driver reports it, in bytes.",
        examples=[85899345920],
    )
    memory_bandwidth_bytes_per_s: float = Field(
        ge=MIN_RATE, le=100 * _TB, description="Datasheet memory bandwidth.", examples=[3.35e12]
    )
    peak_flops_per_s: PeakFlops = Field(description="Dense peak FLOP/s by numeric format.")
    interconnect: InterconnectFields = Field(description="GPU-to-GPU link within a node.")
    efficiency: EfficiencyFields | None = Field(
        default=None, description="Default efficiencies; a calibration replaces them."
    )


class GpuFields(GpuHardware):
    """What a client writes about a GPU."""

    name: str = Field(
        min_length=1, max_length=200, description="Display name.", examples=["NVIDIA H100 SXM5"]
    )
    vendor: str = Field(
        pattern=r"^[a-z][a-z0-9-]{0,31}$", description="Lower-case vendor.", examples=["nvidia"]
    )
    architecture: str | None = Field(
        default=None, max_length=32, description="Chip generation.", examples=["hopper"]
    )
    form_factor: str | None = Field(
        default=None, max_length=32, description="Board form factor.", examples=["sxm5"]
    )
    memory_type: str | None = Field(
        default=None, max_length=32, description="Memory technology.", examples=["HBM3"]
    )
    tdp_watts: float | None = Field(
        default=None, gt=0, le=10_000, description="Board power limit.", examples=[700]
    )
    aliases: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Device names CUDA/ROCm report for this part; each names one GPU only.",
        examples=[["NVIDIA H100 80GB HBM3"]],
    )
    price_per_gpu_hour_usd: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description="On-demand price per GPU-hour, used by plans.",
        examples=[3.0],
    )
    price_note: str | None = Field(
        default=None, max_length=2000, description="Where the price comes from, and when."
    )
    sources: list[SourceRef] = Field(
        default_factory=list, max_length=64, description="Where each figure comes from."
    )


class GpuCreate(GpuFields):
    """A new GPU (POST), or every writable field of one (PUT; `id` must match the path)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "a40-48gb",
                    "name": "NVIDIA A40",
                    "vendor": "nvidia",
                    "architecture": "ampere",
                    "form_factor": "pcie",
                    "memory_bytes": 48000000000,
                    "memory_type": "GDDR6",
                    "memory_bandwidth_bytes_per_s": 696000000000.0,
                    "peak_flops_per_s": {
                        "fp32": 37400000000000.0,
                        "tf32": 74800000000000.0,
                        "bf16": 149700000000000.0,
                        "fp16": 149700000000000.0,
                        "int8": 299300000000000.0,
                    },
                    "interconnect": {"kind": "pcie4", "bandwidth_bytes_per_s": 64000000000.0},
                    "tdp_watts": 300,
                    "aliases": ["NVIDIA A40"],
                    "price_per_gpu_hour_usd": 0.44,
                    "price_note": "an example price: set your own provider's",
                    "sources": [
                        {
                            "title": "NVIDIA A40 datasheet",
                            "url": "https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf",
                            "covers": [
                                "memory_bytes",
                                "memory_bandwidth_bytes_per_s",
                                "peak_flops_per_s",
                                "tdp_watts",
                            ],
                            "note": "dense tensor-core figures (sparse ones halved)",
                        }
                    ],
                }
            ]
        }
    )

    id: ENTRY_ID


GpuPatch = merge_patch_model(
    GpuFields,
    "GpuPatch",
    example={"price_per_gpu_hour_usd": 2.49, "price_note": "our negotiated rate, 2026-12"},
)


class GpuRead(GpuFields, Output):
    """A GPU as stored."""

    id: str = Field(description="Catalog id.", examples=["h100-sxm5-80gb"])
    origin: str = Field(description="`bundled` (shipped with Ridgeline) or `user`.")
    user_modified: bool = Field(description="A bundled entry a user has edited.")
    version: int = Field(description="Increments on every write; the ETag carries it.")
    created_at: datetime = Field(description="When the entry was created (UTC).")
    updated_at: datetime = Field(description="When the entry last changed (UTC).")


@derived_from(MoeSpec)
class MoeFields(SpecSchema, Input):
    """A mixture-of-experts FFN."""


@derived_from(MlaSpec)
class MlaFields(SpecSchema, Input):
    """Multi-head latent attention: the compressed KV latent and the per-head widths."""


@derived_from(
    ModelSpec,
    nested={MoeSpec: MoeFields, MlaSpec: MlaFields},
    enums={DType: (Format, lambda dtype: StorageFormat(dtype.value))},
)
class ModelArchitecture(SpecSchema, Input):
    """A model's architecture, as its Hugging Face `config.json` gives it, in our names. Estimates
    take one inline wherever they take a catalog model id."""


class ModelFields(ModelArchitecture):
    """What a client writes about a model: its architecture, and what it is."""

    name: str = Field(
        min_length=1, max_length=200, description="Display name.", examples=["Meta Llama 3 8B"]
    )
    family: str = Field(
        pattern=r"^[a-z0-9][a-z0-9._-]{0,31}$", description="Model family.", examples=["llama"]
    )
    hf_repo: str | None = Field(
        default=None,
        max_length=200,
        description="Hugging Face repository.",
        examples=["meta-llama/Meta-Llama-3-8B"],
    )
    published_params: int | None = Field(
        default=None, gt=0, le=10**15, description="The parameter count its publisher states."
    )
    sources: list[SourceRef] = Field(
        default_factory=list, max_length=64, description="Where each figure comes from."
    )


class ModelCreate(ModelFields):
    """A new model (POST), or every writable field of one (PUT; `id` must match the path)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "mistral-nemo-12b",
                    "name": "Mistral NeMo 12B",
                    "family": "mistral",
                    "hf_repo": "mistralai/Mistral-Nemo-Base-2407",
                    "num_layers": 40,
                    "hidden_size": 5120,
                    "num_attention_heads": 32,
                    "num_kv_heads": 8,
                    "head_dim": 128,
                    "intermediate_size": 14336,
                    "ffn_type": "gated",
                    "vocab_size": 131072,
                    "max_context_tokens": 131072,
                    "sources": [
                        {
                            "title": "config.json",
                            "url": "https://huggingface.co/mistralai/Mistral-Nemo-Base-2407/blob/main/config.json",
                        }
                    ],
                }
            ]
        }
    )

    id: ENTRY_ID


ModelPatch = merge_patch_model(ModelFields, "ModelPatch", example={"max_context_tokens": 65536})


class ModelRead(ModelFields, Output):
    """A model as stored, with its parameter counts computed from the architecture."""

    id: str = Field(description="Catalog id.", examples=["llama-3-8b"])
    params_total: int = Field(description="Parameters, computed from the architecture.")
    params_active: int = Field(description="Parameters one token passes through (MoE: k experts).")
    origin: str = Field(description="`bundled` (shipped with Ridgeline) or `user`.")
    user_modified: bool = Field(description="A bundled entry a user has edited.")
    version: int = Field(description="Increments on every write; the ETag carries it.")
    created_at: datetime = Field(description="When the entry was created (UTC).")
    updated_at: datetime = Field(description="When the entry last changed (UTC).")

    @classmethod
    def from_row(cls, row: object) -> Self:
        """The response of a stored model: its fields (the architecture flattened) and its
        bookkeeping."""
        if not isinstance(row, ModelRow):
            raise TypeError(f"not a stored model: {row!r}")
        bookkeeping = ("id", "params_total", "params_active", "origin", "user_modified")
        stored = {name: getattr(row, name) for name in (*bookkeeping, "version")}
        stored |= {"created_at": row.created_at, "updated_at": row.updated_at}
        return cls.model_validate(row.fields() | stored, context=STORED)


class ModelImportRead(ModelRead):
    """A model created from a `config.json`, with what the config declares that the catalog
    does not model yet (a sliding window, say) and what that means for the estimates."""

    notes: list[str] = Field(description="Declared but not modelled, and its effect.")


class CatalogChangeRead(Output):
    """One write of a catalog entry."""

    version: int = Field(description="The version the write left (for a delete: deleted).")
    action: str = Field(
        description="`created`, `replaced`, `patched`, `deleted`, or `loaded` (the bundled "
        "catalog's load)."
    )
    principal: str | None = Field(
        description="The name of the principal whose key made it; null for the catalog load."
    )
    at: datetime = Field(description="When (UTC).")
