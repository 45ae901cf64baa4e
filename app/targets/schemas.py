"""The part every estimate request shares: which model, on which GPU, deployed how, timed how;
and the echo of it every estimate response carries."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from app.catalog.schemas import (
    EfficiencyFractions,
    EfficiencyValues,
    GpuHardware,
    ModelArchitecture,
)
from app.engine.dtypes import DType
from app.engine.serving import ENGINE_PATTERN, ServingEngine, parse_engine
from app.engine.specs import Efficiency, GpuSpec, ModelSpec
from app.errors import spec_errors
from app.formats.catalog_specs import efficiency_from_fields, gpu_spec_from_fields
from app.targets.service import EfficiencyMode, Layout, TargetQuery
from app.web.schemas import CATALOG_REF, Format, Input, StorageFormat

__all__ = [
    "DeploymentFields",
    "EfficiencyOverride",
    "EfficiencyUsed",
    "Format",
    "StorageFormat",
    "TargetEcho",
    "TargetRequest",
    "engine_query",
    "gpu_query",
    "model_query",
]


class EfficiencyOverride(EfficiencyFractions):
    """Efficiencies for a what-if, instead of the GPU's calibration."""


class DeploymentFields(Input):
    """How the model is deployed: its tensor-parallel degree and storage formats."""

    tp: int = Field(default=1, ge=1, le=256, description="Tensor-parallel degree.", examples=[1])
    pp: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Pipeline stages: each holds consecutive layers on its own tp x dp GPUs.",
    )
    dp: int = Field(
        default=1,
        ge=1,
        le=256,
        description=(
            "Attention data parallelism inside a replica (MoE models): dp groups of tp GPUs run "
            "attention on their own sequences and share the experts (vLLM's "
            "--data-parallel-size, SGLang's --dp with --enable-dp-attention)."
        ),
    )
    ep: int = Field(
        default=1,
        ge=1,
        le=1024,
        description=(
            "Expert parallelism: 1 slices every expert over the tp x dp GPUs of a stage; tp x dp "
            "places whole experts on each (vLLM's --enable-expert-parallel, SGLang's --ep-size) "
            "and exchanges tokens all-to-all."
        ),
    )
    expert_imbalance: float | None = Field(
        default=None,
        ge=1,
        le=8,
        description=(
            "Under ep: the busiest GPU's routed tokens over the mean (default 1.3; 1 with a "
            "perfect balancer)."
        ),
    )
    weight_dtype: Format | None = Field(
        default=None,
        description=(
            "Weight format. int4 is weight-only (computes in bf16); fp8/int8 run W8A8. Default: "
            "the model's checkpoint's (`checkpoint_dtype`: bf16 for most, fp8-block for "
            "DeepSeek-V3/R1 and Kimi K2), as plans default it."
        ),
    )
    kv_dtype: Format | None = Field(
        default=None,
        description=(
            "KV-cache format. Default: what the engine serves the weights with "
            "(`--kv-cache-dtype auto`): the format the checkpoint's quantisation config "
            "declares (`checkpoint_kv_dtype`, e.g. fp8 in NVIDIA's NVFP4 checkpoints) where the "
            "engine reads it and the checkpoint's own weights are served, else the 16-bit "
            "compute dtype (bf16 beside fp8 weights, fp16 beside fp16)."
        ),
    )
    expert_dtype: Format | None = Field(
        default=None,
        description=(
            "MoE experts' format; default: the checkpoint's expert format when `weight_dtype` "
            "is the checkpoint's (gpt-oss: mxfp4 experts beside bf16 attention), else "
            "`weight_dtype`."
        ),
    )

    def deployment(self) -> Layout:
        """The layout as given; the target's model completes its formats (`Layout.deployment`)."""
        return Layout(
            tp=self.tp,
            pp=self.pp,
            dp=self.dp,
            ep=self.ep,
            expert_imbalance=self.expert_imbalance,
            weight_dtype=None if self.weight_dtype is None else DType(self.weight_dtype),
            kv_dtype=None if self.kv_dtype is None else DType(self.kv_dtype),
            expert_dtype=None if self.expert_dtype is None else DType(self.expert_dtype),
        )


ENGINE_DESCRIPTION = (
    "The serving engine whose behaviour is simulated (its scheduler defaults, CUDA-graph "
    "batches, chunking) and whose measured profile times the steps: `vllm`, `sglang`, "
    "`trtllm` (that engine's default or newest profile for the GPU, else its newest release "
    "Ridgeline models), `name@version` (a release Ridgeline models, vLLM 0.1 to 0.26, SGLang "
    "0.1 to 0.5, TensorRT-LLM 0.1 to 1.3), or `roofline` (Ridgeline's own scheduler). Where "
    "the GPU has no profile of the engine, its steps are timed by the roofline and `warnings` "
    "says so; a release the GPU has no profile of, where it has others of that engine, is a 422 "
    "listing those releases. Default (no `engine`): the GPU's default profile's engine, else "
    "the roofline; every bundled default is vLLM's (0.14.0 on the A100, 0.24.0 elsewhere), so "
    "a request that names no engine gets vLLM's scheduler and kernels where the GPU has them, "
    "and `target.engine` says so (`vllm@0.24.0`). "
    "Profiles time steps with `efficiency: calibrated`; `ideal` and explicit efficiencies are "
    "roofline what-ifs. `target.engine` names the engine simulated and `target.basis` what "
    "timed each op class."
)


def engine_query(engine: str | None, field: str = "engine") -> ServingEngine | None:
    """The request's engine as a value; a 422 naming `field` for a release Ridgeline does not
    model (every route reads `engine` through here)."""
    if engine is None:
        return None
    with spec_errors():
        return parse_engine(engine, field)


def model_query(model: str | ModelArchitecture) -> str | ModelSpec:
    """A catalog reference as it is; an inline architecture as its engine spec (422 naming
    `model.<field>` when it is impossible)."""
    if isinstance(model, str):
        return model
    with spec_errors("model"):
        spec: ModelSpec = model.to_spec()
    return spec


def gpu_query(gpu: str | GpuHardware) -> str | GpuSpec:
    """A catalog reference as it is; inline hardware as its engine spec."""
    if isinstance(gpu, str):
        return gpu
    with spec_errors("gpu"):
        return gpu_spec_from_fields(gpu.model_dump())


_Q = TypeVar("_Q")

_QUERY_FIELDS: dict[type, tuple[str, ...]] = {}
"""`TargetRequest.query_of`'s field names by query class after `target`, read once per class
(`dataclasses.fields` is slow)."""


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

    engine: str | None = Field(
        default=None,
        pattern=ENGINE_PATTERN,
        description=ENGINE_DESCRIPTION,
        examples=["vllm"],
    )

    def refs(self) -> dict[str, object]:
        """The catalog ids this request names, for `SpecCache.generations`."""
        return {"model": self.model, "gpu": self.gpu}

    def query_of(self, kind: type[_Q], **given: Any) -> _Q:
        """`kind` (a frozen query whose first field is `target`) from this request: the target,
        then each of its fields from the request field of the same name, unless `given`."""
        factory: Any = kind  # a dataclass: its fields are read at run time
        names = _QUERY_FIELDS.get(kind)
        if names is None:
            names = _QUERY_FIELDS[kind] = tuple(f.name for f in dataclasses.fields(factory))[1:]
        values = {name: given[name] if name in given else getattr(self, name) for name in names}
        query: _Q = factory(self.target_query(), **values)
        return query

    def target_query(self) -> TargetQuery:
        """The request's target, typed: what `app.targets.service.resolve_target` takes."""
        efficiency: EfficiencyMode | Efficiency
        if isinstance(self.efficiency, EfficiencyOverride):
            with spec_errors():
                efficiency = efficiency_from_fields(
                    {"source": "given in the request", **self.efficiency.model_dump()}
                )
        else:
            efficiency = EfficiencyMode(self.efficiency)
        return TargetQuery(
            model=model_query(self.model),
            gpu=gpu_query(self.gpu),
            deployment=self.deployment(),
            efficiency=efficiency,
            engine=engine_query(self.engine),
        )


class EfficiencyUsed(EfficiencyValues):
    """The efficiencies an estimate was timed with, and where they come from."""

    model_config = ConfigDict(frozen=True)

    mode: str = Field(description="`calibrated`, `ideal` or `custom`.")


class TargetEcho(BaseModel):
    """What was estimated: the resolved model, GPU, deployment and efficiency."""

    # Frozen: built once per target and shared by its answers (`estimates.service.target_of`),
    # whose writer keeps its JSON (`app.web.json_writer`).
    model_config = ConfigDict(frozen=True)

    model: str = Field(description="The catalog model id, or `inline`.")
    gpu: str = Field(description="The catalog GPU id, or `inline`.")
    tp: int = Field(description="Tensor-parallel degree.")
    pp: int = Field(description="Pipeline stages.")
    dp: int = Field(description="Attention data-parallel ranks.")
    ep: int = Field(description="Expert-parallel degree (1: experts sliced by tensor).")
    gpus_per_replica: int = Field(description="tp x dp x pp.")
    weight_dtype: str = Field(description="Weight format.")
    kv_dtype: str = Field(description="KV-cache format.")
    expert_dtype: str | None = Field(description="MoE experts' format (null: no experts).")
    efficiency: EfficiencyUsed = Field(description="How the estimate was timed.")
    catalog_versions: dict[str, int] = Field(
        description="Versions of the catalog entries used (`model`, `gpu`), for reproducibility."
    )
    engine: str = Field(
        description=(
            "The engine whose behaviour was simulated, `name@version` (`vllm@0.24.0`), or "
            "`roofline` (Ridgeline's own scheduler); `basis` says what timed its steps."
        )
    )
    basis: dict[str, str] = Field(
        description=(
            "Per op class (`gemm`, `prefill_attention`, `decode_attention`, `elementwise`, "
            "`moe`, `communication`, `overhead`), what timed it: `profile <gpu> "
            "<engine>@<version>` (measured kernels, interpolated log-log), `roofline fitted to "
            "profile ...` (a shape or format outside its tables), or `roofline` (`all`: every "
            "class; `roofline (no <engine> profile for this GPU)` when the engine named has none "
            "here). The norms and activations (`elementwise`) are never measured: under a "
            "profile, `memory-op model: ...` (3 us a kernel and its bytes at the bandwidth)."
        ),
        examples=[{"gemm": "profile h100-sxm5-80gb vllm@0.24.0", "overhead": "roofline"}],
    )
