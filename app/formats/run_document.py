"""The benchmark-run document (`schema_version` 1): the job writes it, the service stores it.

This module is the single definition of the document. The job builds it, `POST
/v1/benchmark-runs` validates uploads with it, and the bundled reference runs in
`app/formats/reference/` are instances of it. It imports pydantic, the standard library and the
torch-free engine specs only: the service must validate a run without PyTorch.

Every model forbids unknown fields. A rule that spans fields raises `ValueError` whose message
starts with the field it is about (`"p10_ms: ..."`), so pydantic's 422 names the culprit.
Times are milliseconds of wall time on the device; token counts are tokens per sequence.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    field_validator,
    model_validator,
)

from app.engine.dtypes import BLOCK_SCALED_DTYPES, DType
from app.engine.specs import MlaSpec, ModelSpec, MoeSpec
from app.formats.specs import SpecSchema, derived_from

__all__ = [
    "INTERRUPTED_REASON",
    "SCHEMA_VERSION",
    "AttentionBackend",
    "DeviceKind",
    "Environment",
    "Microbenchmarks",
    "Phase",
    "Provenance",
    "ProvenanceKind",
    "RunDocument",
    "RunMlaSpec",
    "RunModelSpec",
    "RunMoeSpec",
    "RunPoint",
    "Skip",
]

SCHEMA_VERSION = 1
INTERRUPTED_REASON = "interrupted"  # reason of the points a Ctrl-C left unmeasured


def _date_time_text(value: object) -> object:
    """A date-time is written as one (`2026-11-29T00:00:00Z`): a number (`0`, read as the Unix
    epoch otherwise) is refused."""
    if isinstance(value, str | datetime):
        return value
    raise ValueError("must be an ISO 8601 date-time with its offset, e.g. 2026-11-29T00:00:00Z")


_DOCUMENT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)
# Strict: numbers are never read from strings, nor booleans from numbers. What JSON can only
# spell as text or arrays (enumerations, timestamps, tuples) converts: `Lax`.
Lax = Strict(False)

PositiveInt = Annotated[int, Field(gt=0)]
PositiveMs = Annotated[float, Field(gt=0)]


class Phase(StrEnum):
    PREFILL = "prefill"  # one forward pass over the whole prompt, LM head on the last position
    DECODE = "decode"  # one step: one new token per sequence over a filled KV cache


class DeviceKind(StrEnum):
    CUDA = "cuda"
    CPU = "cpu"


class ProvenanceKind(StrEnum):
    MEASURED_BY_JOB = "measured-by-job"  # this job ran it
    PUBLISHED = "published"  # transcribed from a publication; `source` names it


class AttentionBackend(StrEnum):
    """The scaled-dot-product-attention kernel the run used."""

    FLASH = "flash"  # FlashAttention (2 or later) on a GPU
    EFFICIENT = "efficient"  # memory-efficient attention (xFormers' kernel)
    CUDNN = "cudnn"  # cuDNN's fused attention
    MATH = "math"  # unfused: materialises the score matrix
    CPU = "cpu"  # PyTorch's fused CPU kernel


class Skip(BaseModel):
    """Why a point has no times."""

    model_config = _DOCUMENT

    reason: str = Field(
        min_length=1,
        description='Why the point was not measured: "out of memory: ..." or "interrupted".',
    )


class RunPoint(BaseModel):
    """One measured (or skipped) configuration and the statistics of its timed repeats."""

    model_config = _DOCUMENT

    phase: Annotated[Phase, Lax] = Field(
        description="prefill: a whole prompt; decode: one step of every sequence."
    )
    prompt_tokens: PositiveInt | None = Field(
        default=None, description="Prefill: prompt length per sequence, tokens. Null at decode."
    )
    batch_size: int = Field(ge=1, le=1 << 20, description="Sequences processed together.")
    context_tokens: PositiveInt | None = Field(
        default=None,
        description="Decode: KV-cache length each new token attends over, itself included, "
        "tokens. Null at prefill.",
    )
    median_ms: PositiveMs | None = Field(
        default=None, description="Median of the timed repeats, ms. Null when skipped."
    )
    p10_ms: PositiveMs | None = Field(
        default=None,
        description="10th percentile of the timed repeats (linear interpolation), ms. "
        "Null when skipped.",
    )
    p90_ms: PositiveMs | None = Field(
        default=None,
        description="90th percentile of the timed repeats (linear interpolation), ms. "
        "Null when skipped.",
    )
    repeats: int = Field(
        ge=0,
        le=1_000_000,
        description="Timed repeats behind the statistics, warm-up excluded; 0 when skipped.",
    )
    skipped: Skip | None = Field(
        default=None, description="Set when the point was not measured, with the reason."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        self._check_lengths()
        self._check_times()
        return self

    def _check_lengths(self) -> None:
        if self.phase is Phase.PREFILL:
            if self.prompt_tokens is None:
                raise ValueError("prompt_tokens: required for a prefill point")
            if self.context_tokens is not None:
                raise ValueError("context_tokens: must be null for a prefill point")
        else:
            if self.context_tokens is None:
                raise ValueError("context_tokens: required for a decode point")
            if self.prompt_tokens is not None:
                raise ValueError("prompt_tokens: must be null for a decode point")

    def _check_times(self) -> None:
        times = {"median_ms": self.median_ms, "p10_ms": self.p10_ms, "p90_ms": self.p90_ms}
        if self.skipped is not None:
            for name, value in times.items():
                if value is not None:
                    raise ValueError(f"{name}: must be null for a skipped point")
            if self.repeats != 0:
                raise ValueError(f"repeats: must be 0 for a skipped point, got {self.repeats}")
            return
        p10_ms, median_ms, p90_ms = self.p10_ms, self.median_ms, self.p90_ms
        if p10_ms is None or median_ms is None or p90_ms is None:
            missing = ", ".join(name for name, value in times.items() if value is None)
            raise ValueError(f"{missing}: required for a measured point (or set skipped)")
        if self.repeats < 1:
            raise ValueError("repeats: a measured point needs at least one timed repeat")
        if p10_ms > median_ms:
            raise ValueError(f"p10_ms: {p10_ms} exceeds median_ms {median_ms}")
        if median_ms > p90_ms:
            raise ValueError(f"p90_ms: {p90_ms} is below median_ms {median_ms}")

    @property
    def tokens(self) -> int:
        """The length that defines the point: prompt tokens at prefill, context at decode."""
        value = self.prompt_tokens if self.phase is Phase.PREFILL else self.context_tokens
        return value or 0  # never 0: the validator requires the phase's length


class _RunSpec(SpecSchema):
    model_config = _DOCUMENT

    @model_validator(mode="after")
    def _sane(self) -> Self:
        self.to_spec()  # one rule book: the engine's (heads divisible by KV heads, ...)
        return self


@derived_from(MoeSpec, caps=False, examples=False)
class RunMoeSpec(_RunSpec):
    """Mixture-of-experts FFN, as `app.engine.specs.MoeSpec`."""


@derived_from(MlaSpec, caps=False, examples=False)
class RunMlaSpec(_RunSpec):
    """Multi-head latent attention, as `app.engine.specs.MlaSpec`."""


@derived_from(
    ModelSpec,
    caps=False,
    examples=False,
    exclude=("id", "checkpoint_dtype", "expert_checkpoint_dtype", "checkpoint_kv_dtype"),
    nested={MoeSpec: RunMoeSpec, MlaSpec: RunMlaSpec},
)
class RunModelSpec(_RunSpec):
    """The exact architecture that ran (with `num_layers` as run, not as published)."""

    id: str | None = Field(
        default=None,
        min_length=1,
        description="Catalog id of the architecture (e.g. llama-3-8b); null for a config.json.",
    )

    def to_model_spec(self) -> ModelSpec:
        """The engine's spec of this architecture (raises `SpecError` when it is impossible)."""
        spec: ModelSpec = self.to_spec()
        return replace(spec, id=self.id or "inline")


class Environment(BaseModel):
    """Where the run happened. Versions a publication does not state are null."""

    model_config = _DOCUMENT

    device_name: str = Field(
        min_length=1,
        description="torch.cuda.get_device_name() (e.g. 'NVIDIA H200') or the CPU model.",
    )
    device_kind: Annotated[DeviceKind, Lax] = Field(description="cuda or cpu.")
    torch_version: str | None = Field(default=None, description="torch.__version__.")
    cuda_version: str | None = Field(
        default=None, description="CUDA runtime PyTorch was built with; null on CPU builds."
    )
    driver_version: str | None = Field(
        default=None, description="NVIDIA driver per nvidia-smi; null when unavailable."
    )
    host: str | None = Field(default=None, description="Host name of the machine.")
    python_version: str | None = Field(default=None, description="Python version.")
    num_devices: int | None = Field(
        default=None, ge=1, description="Devices of this kind visible to the job (it uses one)."
    )


class Provenance(BaseModel):
    """Who produced the figures and from what."""

    model_config = _DOCUMENT

    kind: Annotated[ProvenanceKind, Lax] = Field(description="measured-by-job or published.")
    source: str | None = Field(
        default=None,
        min_length=1,
        description="The publication (required when published) or the job and its settings.",
    )
    note: str | None = Field(default=None, description="Caveats: conventions, deviations.")

    @model_validator(mode="after")
    def _published_has_source(self) -> Self:
        if self.kind is ProvenanceKind.PUBLISHED and self.source is None:
            raise ValueError("source: a published run must name its source")
        return self


class Microbenchmarks(BaseModel):
    """Device rates measured beside the points: stand-ins for datasheet peaks."""

    model_config = _DOCUMENT

    matmul_flops_per_s: float = Field(
        gt=0, description="Dense matrix-multiply rate in the run's dtype, 2*m*n*k FLOP per product."
    )
    matmul_shape: Annotated[tuple[PositiveInt, PositiveInt, PositiveInt], Lax] = Field(
        description="[m, n, k] of the timed product (m x k times k x n)."
    )
    copy_bytes_per_s: float = Field(
        gt=0, description="Device-to-device copy rate, bytes read plus bytes written per second."
    )
    copy_bytes: PositiveInt = Field(description="Size of the copied buffer, bytes (read once).")


_EXAMPLE: dict[str, Any] = {
    "schema_version": 1,
    "id": None,
    "created_at": "2026-11-29T00:00:00Z",
    "environment": {
        "device_name": "NVIDIA A100-SXM4-80GB",
        "device_kind": "cuda",
        "torch_version": None,
        "cuda_version": None,
        "driver_version": None,
        "host": None,
        "python_version": None,
        "num_devices": 1,
    },
    "gpu": "a100-sxm4-80gb",
    "model": {
        "id": "llama-3-8b",
        "num_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "ffn_type": "gated",
        "vocab_size": 128256,
        "max_context_tokens": 131072,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "moe": None,
    },
    "dtype": "bf16",
    "tp": 1,
    "attention_backend": "flash",
    "provenance": {
        "kind": "published",
        "source": "Your own measurement: where and how it was taken",
        "note": "two points of an A100 SXM4 80GB prefill table",
    },
    "points": [
        {
            "phase": "prefill",
            "prompt_tokens": 1024,
            "batch_size": 1,
            "context_tokens": None,
            "median_ms": 81.0,
            "p10_ms": 81.0,
            "p90_ms": 81.0,
            "repeats": 1,
            "skipped": None,
        },
        {
            "phase": "prefill",
            "prompt_tokens": 10240,
            "batch_size": 1,
            "context_tokens": None,
            "median_ms": 832.0,
            "p10_ms": 832.0,
            "p90_ms": 832.0,
            "repeats": 1,
            "skipped": None,
        },
    ],
    "microbenchmarks": None,
}
"""A small published run: what `POST /v1/benchmark-runs` shows in Swagger UI."""


class RunDocument(BaseModel):
    """One benchmark run: where, what architecture, which points, and how fast."""

    model_config = ConfigDict(**_DOCUMENT, json_schema_extra={"examples": [_EXAMPLE]})

    schema_version: int = Field(description="Document format version; this service reads 1.")
    id: str | None = Field(default=None, description="Assigned by the service; null on upload.")
    created_at: Annotated[AwareDatetime, Lax, BeforeValidator(_date_time_text)] = Field(
        description="When the run started, ISO 8601 in UTC."
    )
    environment: Environment = Field(description="Device and software the run used.")
    gpu: str | None = Field(
        default=None,
        description="GPU catalog id (matched by alias or given with --gpu); null when unknown.",
    )
    model: RunModelSpec = Field(description="The exact architecture that ran.")
    dtype: Annotated[DType, Lax] = Field(
        description=(
            "Format of weights, activations and KV cache: one the KV cache can hold too (not a "
            "block-scaled weight format such as mxfp4, nvfp4 or fp8-block)."
        )
    )
    tp: int = Field(
        default=1, ge=1, le=1024, description="Tensor-parallel degree (the job runs 1)."
    )
    attention_backend: Annotated[AttentionBackend, Lax] | None = Field(
        default=None, description="SDPA kernel the run used; null when not known."
    )
    provenance: Provenance = Field(description="Who measured or published the figures.")
    points: list[RunPoint] = Field(min_length=1, description="Every planned point, skipped too.")

    @field_validator("dtype")
    @classmethod
    def _one_format_for_all(cls, value: DType) -> DType:
        if value in BLOCK_SCALED_DTYPES:
            raise ValueError(
                f"{value} is a block-scaled weight format, and a run's dtype is its KV cache's "
                "too: use bf16, fp16 or fp8"
            )
        return value

    microbenchmarks: Microbenchmarks | None = Field(
        default=None,
        description="Matmul and copy rates; null for published runs and runs interrupted "
        "before measuring them.",
    )

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise ValueError(
                f"schema_version: {value} is not supported; this service reads version "
                f"{SCHEMA_VERSION}"
            )
        return value

    @model_validator(mode="after")
    def _points_fit_model(self) -> Self:
        limit = self.model.max_context_tokens
        seen: dict[tuple[Phase, int, int], int] = {}
        for index, point in enumerate(self.points):
            field = "prompt_tokens" if point.phase is Phase.PREFILL else "context_tokens"
            if point.tokens > limit:
                raise ValueError(
                    f"points[{index}].{field}: {point.tokens} exceeds the model's "
                    f"max_context_tokens {limit}"
                )
            key = (point.phase, point.batch_size, point.tokens)
            if key in seen:
                raise ValueError(
                    f"points[{index}]: repeats the configuration of points[{seen[key]}]"
                )
            seen[key] = index
        return self

    @model_validator(mode="after")
    def _measured_runs_have_rates(self) -> Self:
        interrupted = any(
            p.skipped is not None and p.skipped.reason == INTERRUPTED_REASON for p in self.points
        )
        if (
            self.provenance.kind is ProvenanceKind.MEASURED_BY_JOB
            and self.microbenchmarks is None
            and not interrupted
        ):
            raise ValueError("microbenchmarks: required for a completed run measured by the job")
        return self

    def measured_points(self) -> list[RunPoint]:
        """The points that carry times."""
        return [p for p in self.points if p.skipped is None]
