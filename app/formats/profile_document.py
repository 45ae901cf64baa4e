"""The profile document (`schema_version` 1): measured kernel times of one GPU under one serving
engine version. `ridgeline import-profiles` writes it from NVIDIA's silicon database, the
benchmark job's `--profile` mode writes it from the user's GPU, `POST /v1/profiles` takes it,
and the bundled profiles in `app/catalog/data/profiles/` are instances of it.

Tables are flat, row-major over the product of their axes (last axis fastest), milliseconds on
one GPU per call (attention and GEMMs: one layer); `null` marks a cell that was not measured.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from app.engine.dtypes import DType
from app.engine.profiles import AttentionTable, EngineOverhead, Grid, Profile
from app.engine.profiles.fit import (
    attention_efficiency,
    communication_efficiency,
    gemm_efficiency,
    held_out_error_pct,
    memory_efficiency,
)
from app.engine.serving import PROFILED_ENGINES, policy_of
from app.engine.specs import Efficiency, GpuSpec

__all__ = [
    "AllReduceTable",
    "AttentionTableDoc",
    "FittedEfficiency",
    "GemmTable",
    "MoeTableDoc",
    "OverheadDoc",
    "ProfileDocument",
    "ProfileSource",
    "default_overhead",
    "fit_tables",
]


def default_overhead(engine: str) -> dict[str, Any]:
    """The engine's overhead where no measurement of it exists, as a profile document holds it
    (its policy's, `app.engine.serving`): what imports and the job's profiles start from,
    until POST /v1/profiles/{id}/calibrations fits it to serving runs."""
    overhead = policy_of(engine).overhead
    if overhead is None:
        raise ValueError(f"{engine} has no overhead of its own")
    return dataclasses.asdict(overhead)


_DOC = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)
Lax = Strict(False)
Axis = Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1, max_length=512)]
MAX_CELL_MS = 100_000.0
"""The longest one measured kernel may take (100 s; the bundled tables' longest is 4 s): a cell
beyond it is a unit slip or a broken measurement, not a kernel."""
Cells = Annotated[
    list[Annotated[float, Field(gt=0, le=MAX_CELL_MS)] | None],
    Field(min_length=1, max_length=200_000),
]
ComputeFormat = Annotated[DType, Lax]
EngineName = Annotated[
    str,
    Field(
        pattern=f"^({'|'.join(PROFILED_ENGINES)})$",
        json_schema_extra={"enum": list(PROFILED_ENGINES)},
    ),
]
"""An engine measured profiles time (`app.engine.serving.PROFILED_ENGINES`)."""
Text = Annotated[str, Field(min_length=1, max_length=2000)]


class _Table(BaseModel):
    model_config = _DOC

    def _check(self, axes: list[list[float]], ms: list[float | None], names: str) -> None:
        for axis in axes:
            if any(b <= a for a, b in itertools.pairwise(axis)):
                raise ValueError(f"{names}: each axis must be strictly ascending")
        size = math.prod(len(axis) for axis in axes)
        if len(ms) != size:
            raise ValueError(f"ms: {len(ms)} cells for a {names} grid of {size}")
        if all(cell is None for cell in ms):
            raise ValueError(f"ms: no measured cell in the {names} grid")

    def grid(self) -> Grid:
        raise NotImplementedError


class GemmTable(_Table):
    """A GEMM `(M x K) @ (K x N)` in one compute format: ms by (m, n, k)."""

    dtype: ComputeFormat = Field(description="Compute format (`bf16`, `fp8`, ...).")
    m: Axis = Field(description="M: tokens through the layer.")
    n: Axis = Field(description="N: output features.")
    k: Axis = Field(description="K: input features.")
    ms: Cells = Field(
        description=("Milliseconds per GEMM, row-major over m x n x k; null: not measured.")
    )

    @model_validator(mode="after")
    def _shape(self) -> Self:
        self._check([self.m, self.n, self.k], self.ms, "m x n x k")
        return self

    def grid(self) -> Grid:
        return Grid((tuple(self.m), tuple(self.n), tuple(self.k)), tuple(self.ms))


class _BatchTokensTable(_Table):
    """A layer's time by (batch, tokens): tokens is each sequence's prompt length (prefill,
    causal) or context (decode)."""

    kv_dtype: ComputeFormat = Field(description="KV-cache format.")
    heads: int = Field(gt=0, le=1024, description="Query heads on the GPU.")
    batch: Axis = Field(description="Sequences attended together.")
    tokens: Axis = Field(description="Prompt length (prefill) or context (decode) of each.")
    ms: Cells = Field(
        description=("Milliseconds per layer, row-major over batch x tokens; null: not measured.")
    )

    @model_validator(mode="after")
    def _shape(self) -> Self:
        self._check([self.batch, self.tokens], self.ms, "batch x tokens")
        return self

    def grid(self) -> Grid:
        return Grid((tuple(self.batch), tuple(self.tokens)), tuple(self.ms))


class AttentionTableDoc(_BatchTokensTable):
    """Attention of one head layout (per GPU) with one KV-cache format: ms by (batch, tokens);
    tokens is the prompt length (prefill, causal) or the context (decode)."""

    kv_heads: int = Field(gt=0, le=1024, description="KV heads on the GPU.")
    head_dim: int = Field(gt=0, le=1024, description="Per-head width.")

    @model_validator(mode="after")
    def _grouped(self) -> Self:
        if self.heads % self.kv_heads:
            raise ValueError("heads: must be a multiple of kv_heads")
        return self

    def table(self) -> AttentionTable:
        return AttentionTable(self.heads, self.kv_heads, self.head_dim, self.grid())


class AllReduceTable(_Table):
    """A collective of bf16 activations (an all-reduce; as `all_to_all`, NCCL's all-to-all of
    a buffer per GPU split evenly among the group): ms by (bytes per GPU, GPUs)."""

    bytes: Axis = Field(description="Bytes per GPU.")
    gpus: Annotated[list[Annotated[int, Field(ge=2, le=1024)]], Field(min_length=1)] = Field(
        description=("GPUs in the group.")
    )
    ms: Cells = Field(description="Milliseconds, row-major over bytes x gpus; null: not measured.")

    @model_validator(mode="after")
    def _shape(self) -> Self:
        self._check([self.bytes, [float(g) for g in self.gpus]], self.ms, "bytes x gpus")
        return self

    def grid(self) -> Grid:
        return Grid((tuple(self.bytes), tuple(float(g) for g in self.gpus)), tuple(self.ms))


class MoeTableDoc(_Table):
    """The routed experts of one MoE layer shape on one GPU (fused-MoE kernel), their width
    split `tp` ways and the experts `ep` ways: ms by the tokens entering the layer."""

    dtype: ComputeFormat = Field(description="Expert weight format.")
    hidden: int = Field(gt=0, le=2**17, description="Model width.")
    inter: int = Field(gt=0, le=2**20, description="One expert's FFN width (before tp).")
    topk: int = Field(gt=0, le=1024, description="Experts each token is routed to.")
    experts: int = Field(gt=0, le=4096, description="Routed experts.")
    tp: int = Field(gt=0, le=1024, description="Tensor parallelism within the experts.")
    ep: int = Field(
        default=1, gt=0, le=1024, description="Expert parallelism: GPUs the experts are split over."
    )
    tokens: Axis = Field(description="Tokens through the layer.")
    ms: Cells = Field(description="Milliseconds per layer; null: not measured.")

    @model_validator(mode="after")
    def _shape(self) -> Self:
        self._check([self.tokens], self.ms, "tokens")
        return self

    def grid(self) -> Grid:
        return Grid((tuple(self.tokens),), tuple(self.ms))

    def key(self) -> tuple[DType, int, int, int, int, int, int]:
        return (self.dtype, self.hidden, self.inter, self.topk, self.experts, self.tp, self.ep)


class MlaModuleTableDoc(_BatchTokensTable):
    """DeepSeek-V3's whole MLA attention module on one GPU (its projections, the latent
    expansion or absorption, the attention kernel, the output projection: hidden 7,168, q rank
    1,536, KV rank 512, 128 + 64 query-key and 128 value widths per head), one layer, ms by
    (batch, tokens); tokens is each prompt's length (prefill) or context (decode)."""

    weight_dtype: ComputeFormat = Field(description="The projections' weight format.")

    def key(self) -> tuple[DType, DType, int]:
        return (self.kv_dtype, self.weight_dtype, self.heads)


class MlaKernelTableDoc(_BatchTokensTable):
    """DeepSeek-V3's MLA attention kernel alone on one GPU (prefill: 128 + 64 query-key and 128
    value widths per head over the expanded latent; decode: absorbed, each head over the 512 +
    64 wide latent), one layer, ms by (batch, tokens); tokens is each prompt's length (prefill)
    or context (decode). The projections, the latent expansion and the absorption BMMs are not
    in it."""

    def key(self) -> tuple[DType, int]:
        return (self.kv_dtype, self.heads)


class MlaBmmTableDoc(_Table):
    """One of decode MLA's absorption batched GEMMs on one GPU, one layer, ms by tokens:
    `pre`, each head's 128-wide nope query into the 512-wide latent before the kernel; `post`,
    the latent output into each head's 128-wide value after it."""

    stage: Literal["pre", "post"] = Field(description="Before or after the attention kernel.")
    dtype: ComputeFormat = Field(description="The BMM's format.")
    heads: int = Field(gt=0, le=1024, description="Query heads on the GPU.")
    tokens: Axis = Field(description="Decoding sequences (one token each).")
    ms: Cells = Field(description="Milliseconds per layer; null: not measured.")

    @model_validator(mode="after")
    def _shape(self) -> Self:
        self._check([self.tokens], self.ms, "tokens")
        return self

    def grid(self) -> Grid:
        return Grid((tuple(self.tokens),), tuple(self.ms))

    def key(self) -> tuple[bool, DType, int]:
        return (self.stage == "pre", self.dtype, self.heads)


class OverheadDoc(BaseModel):
    """The engine's cost per step outside the kernels, milliseconds."""

    model_config = _DOC
    step_ms: float = Field(ge=0, le=1000, description="Per step.")
    per_sequence_ms: float = Field(
        default=0.0, ge=0, le=100, description=("Per running sequence per step.")
    )
    per_token_ms: float = Field(
        default=0.0, ge=0, le=100, description=("Per scheduled token per step.")
    )
    prefill_per_layer_ms: float = Field(
        default=0.0,
        ge=0,
        le=100,
        description=("Per layer, in a step that prefills (kernel dispatch)."),
    )
    source: Text = Field(description="Where these figures come from.")


class FittedEfficiency(BaseModel):
    """Roofline efficiencies fitted to the profile's own points (what shapes outside every
    table are timed with)."""

    model_config = _DOC
    gemm: float = Field(
        gt=0, le=1, description=("Share of the tensor-core peak the large GEMMs reach.")
    )
    attention: float = Field(
        gt=0, le=1, description=("Share of the bf16 peak long prefill attention reaches.")
    )
    memory: float = Field(
        gt=0, le=1, description=("Share of HBM bandwidth long-context decode attention reaches.")
    )
    communication: float = Field(
        gt=0, le=1, description=("Ring bus bandwidth over the link's one-way bandwidth.")
    )


class ProfileSource(BaseModel):
    model_config = _DOC
    title: Text = Field(description="What was measured, by whom, with what.")
    url: Annotated[str, Field(max_length=2000)] | None = Field(
        default=None, description=("Where to find it.")
    )
    note: Text | None = Field(default=None, description="How the document was derived from it.")
    published: date | None = Field(
        default=None,
        description="When the measurements were published (the data's date), where known.",
    )


_EXAMPLE: dict[str, Any] = {
    "id": "l4-24gb-vllm-0.24.0-example",
    "gpu": "l4-24gb",
    "engine": "vllm",
    "version": "0.24.0",
    "source": {"title": "python -m app.bench --profile on one L4 (an example: two sizes)"},
    "overhead": {"step_ms": 1.0, "per_sequence_ms": 0.005, "source": "assumed"},
    "fitted": {"gemm": 0.6, "attention": 0.5, "memory": 0.8, "communication": 0.7},
    "gemm": [
        {
            "dtype": "bf16",
            "m": [1, 4096],
            "n": [4096, 14336],
            "k": [4096, 14336],
            "ms": [0.12, 0.41, 0.42, 1.45, 2.6, 9.1, 9.2, 32.0],
        }
    ],
}


class ProfileDocument(BaseModel):
    """One GPU under one engine version."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        strict=True,
        json_schema_extra={"examples": [_EXAMPLE]},
    )
    schema_version: Literal[1] = Field(default=1, description="Document format version.")
    id: str = Field(
        pattern=r"^[a-z0-9][a-z0-9._-]{0,127}$",
        examples=["h100-sxm5-80gb-vllm-0.24.0"],
        description="Unique id, e.g. `<gpu>-<engine>-<version>`.",
    )
    gpu: str = Field(
        pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        examples=["h100-sxm5-80gb"],
        description="The catalog GPU measured.",
    )
    engine: EngineName = Field(description="The serving engine.")
    version: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$",
        examples=["0.24.0"],
        description=(
            "The engine release measured: one Ridgeline models (what `engine: name@version` "
            "accepts on every route)."
        ),
    )
    default: bool = Field(
        default=False, description="The GPU's default profile, for requests that name no engine."
    )
    replaces: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9._-]{0,127}$",
        description=(
            "The id of the GPU's profile of the same engine release that this one takes the "
            "place of (it then times that release). Required when the GPU has one: an upload "
            "never displaces another silently."
        ),
    )
    source: ProfileSource = Field(description="Where the measurements come from.")
    overhead: OverheadDoc = Field(description="The engine's cost per step outside the kernels.")
    fitted: FittedEfficiency = Field(description="Roofline efficiencies fitted to the points.")
    residual_pct: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description=("Per op family, held-out interpolation error (percent).")
    )
    gemm: list[GemmTable] = Field(
        default_factory=list, max_length=16, description=("GEMM tables, one per compute format.")
    )
    prefill_attention: list[AttentionTableDoc] = Field(
        default_factory=list,
        max_length=512,
        description=("Prefill attention tables, one per head layout and KV format."),
    )
    decode_attention: list[AttentionTableDoc] = Field(
        default_factory=list,
        max_length=512,
        description=("Decode attention tables, one per head layout and KV format."),
    )
    all_reduce: AllReduceTable | None = Field(default=None, description="All-reduce table.")
    all_to_all: AllReduceTable | None = Field(
        default=None,
        description=(
            "All-to-all table (the expert-parallel dispatch and combine): ms by the bytes each "
            "GPU sends to the group in all, and the group's GPUs."
        ),
    )
    moe: list[MoeTableDoc] = Field(
        default_factory=list,
        max_length=8192,
        description="Routed-expert tables, one per MoE layer shape and (tp, ep) of the experts.",
    )
    prefill_mla: list[MlaModuleTableDoc] = Field(
        default_factory=list,
        max_length=512,
        description="DeepSeek-V3's MLA module in prefill, one per format pair and heads per GPU.",
    )
    decode_mla: list[MlaModuleTableDoc] = Field(
        default_factory=list,
        max_length=512,
        description="DeepSeek-V3's MLA module in decode, one per format pair and heads per GPU.",
    )
    prefill_mla_kernel: list[MlaKernelTableDoc] = Field(
        default_factory=list,
        max_length=512,
        description="DeepSeek-V3's MLA attention kernel in prefill, per KV format and heads.",
    )
    decode_mla_kernel: list[MlaKernelTableDoc] = Field(
        default_factory=list,
        max_length=512,
        description="DeepSeek-V3's MLA attention kernel in decode, per KV format and heads.",
    )
    mla_bmm: list[MlaBmmTableDoc] = Field(
        default_factory=list,
        max_length=512,
        description="Decode MLA's absorption BMMs, per stage, format and heads per GPU.",
    )

    @model_validator(mode="after")
    def _a_modelled_release(self) -> Self:
        refusal = policy_of(self.engine).refusal(self.version)
        if refusal is not None:
            raise ValueError(f"version: {refusal}")
        if not self.gemm:
            raise ValueError(
                "gemm: at least one GEMM table (a profile without one times nothing the "
                "roofline does not)"
            )
        return self

    def to_profile(self) -> Profile:
        """The engine's profile."""
        prefill: dict[DType, list[AttentionTable]] = {}
        decode: dict[DType, list[AttentionTable]] = {}
        for docs, into in ((self.prefill_attention, prefill), (self.decode_attention, decode)):
            for doc in docs:
                into.setdefault(doc.kv_dtype, []).append(doc.table())
        return Profile(
            id=self.id,
            gpu=self.gpu,
            engine=self.engine,
            version=self.version,
            overhead=EngineOverhead(
                self.overhead.step_ms,
                self.overhead.per_sequence_ms,
                self.overhead.per_token_ms,
                self.overhead.prefill_per_layer_ms,
                self.overhead.source,
            ),
            fitted=Efficiency(
                gemm=self.fitted.gemm,
                attention=self.fitted.attention,
                memory=self.fitted.memory,
                communication=self.fitted.communication,
                overhead_ms=self.overhead.step_ms,
                source=f"fitted to profile {self.id}",
            ),
            gemm={table.dtype: table.grid() for table in self.gemm},
            prefill_attention={k: tuple(v) for k, v in prefill.items()},
            decode_attention={k: tuple(v) for k, v in decode.items()},
            all_reduce=self.all_reduce.grid() if self.all_reduce else None,
            all_to_all=self.all_to_all.grid() if self.all_to_all else None,
            moe={table.key(): table.grid() for table in self.moe},
            prefill_mla={table.key(): table.grid() for table in self.prefill_mla},
            decode_mla={table.key(): table.grid() for table in self.decode_mla},
            prefill_mla_kernel={table.key(): table.grid() for table in self.prefill_mla_kernel},
            decode_mla_kernel={table.key(): table.grid() for table in self.decode_mla_kernel},
            mla_bmm={table.key(): table.grid() for table in self.mla_bmm},
            residual_pct=dict(self.residual_pct),
            source=self.source.title,
        )


def fit_tables(document: dict[str, Any], gpu: GpuSpec) -> tuple[dict[str, float], dict[str, float]]:
    """Efficiencies fitted to the tables (the GPU's generic ones where a table is missing) and
    each table family's held-out interpolation error."""
    gemm = {DType(t["dtype"]): _grid(t, "m", "n", "k") for t in document["gemm"]}

    def tables(kind: str, kv: DType) -> list[AttentionTable]:
        return [
            AttentionTable(t["heads"], t["kv_heads"], t["head_dim"], _grid(t, "batch", "tokens"))
            for t in document[kind]
            if t["kv_dtype"] == kv.value
        ]

    prefill, decode = (
        tables("prefill_attention", DType.BF16),
        tables("decode_attention", DType.BF16),
    )
    all_reduce = document["all_reduce"]
    ar_grid = (
        Grid(
            (tuple(all_reduce["bytes"]), tuple(float(g) for g in all_reduce["gpus"])),
            tuple(all_reduce["ms"]),
        )
        if all_reduce
        else None
    )
    fallback = gpu.efficiency
    fitted = {
        "gemm": (gemm_efficiency(gemm[DType.BF16], gpu, DType.BF16) if DType.BF16 in gemm else None)
        or fallback.gemm,
        "attention": attention_efficiency(prefill, gpu) or fallback.attention,
        "memory": memory_efficiency(decode, gpu, DType.BF16) or fallback.memory,
        "communication": (communication_efficiency(ar_grid, gpu) if ar_grid else None)
        or fallback.communication,
    }
    residuals: dict[str, float | None] = {
        "gemm": _rms(held_out_error_pct(g) for g in gemm.values()),
        "prefill_attention": _rms(held_out_error_pct(t.grid, 1) for t in prefill),
        "decode_attention": _rms(held_out_error_pct(t.grid, 1) for t in decode),
        "communication": held_out_error_pct(ar_grid) if ar_grid else None,
    }
    return (
        {k: round(min(v, 1.0), 4) for k, v in fitted.items()},
        {k: round(v, 2) for k, v in residuals.items() if v is not None},
    )


def _grid(table: Mapping[str, Any], *axes: str) -> Grid:
    return Grid(tuple(tuple(table[a]) for a in axes), tuple(table["ms"]))


def _rms(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return math.sqrt(sum(v * v for v in found) / len(found)) if found else None
