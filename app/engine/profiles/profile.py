"""A profile: what one GPU does under one serving engine at one version, as measured.

Tables of kernel time for the ops a step is made of (GEMMs, prefill and decode attention,
all-reduce), the engine's own per-step cost, roofline efficiencies fitted to the profile's own
points (for shapes outside every table), and how far its interpolation is from its own
measurements (`residual_pct`, per op family).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from app.engine.dtypes import DType
from app.engine.profiles.grid import Grid
from app.engine.serving import EngineName, ServingEngine
from app.engine.specs import Efficiency

__all__ = [
    "ELEMENTWISE_BASIS",
    "AttentionTable",
    "EngineOverhead",
    "OpFamily",
    "Profile",
    "step_families",
    "uniform_basis",
]


class OpFamily(StrEnum):
    """The op classes a profile times, as `basis` names them."""

    GEMM = "gemm"
    PREFILL_ATTENTION = "prefill_attention"
    DECODE_ATTENTION = "decode_attention"
    MOE = "moe"
    COMMUNICATION = "communication"
    OVERHEAD = "overhead"
    ELEMENTWISE = "elementwise"
    """Norms and activations (`OpClass.ELEMENTWISE`): never in a table (`ELEMENTWISE_BASIS`)."""


ELEMENTWISE_BASIS = "memory-op model: 3 us a kernel and its bytes at the bandwidth (no table)"
"""What times the norms and activations under a profile: they are never measured, and do not
make a measured answer a partly measured one."""


def step_families(*, moe: bool, exchanges: bool) -> tuple[OpFamily, ...]:
    """The op families a step of a model is timed by, as `basis` names them: every step's
    GEMMs, attention, norms and activations and engine overhead; the experts of an MoE model;
    the exchanges between GPUs where the layout makes some (tp above 1, dp, ep or pp)."""
    families = [
        OpFamily.GEMM,
        OpFamily.PREFILL_ATTENTION,
        OpFamily.DECODE_ATTENTION,
        OpFamily.ELEMENTWISE,
        OpFamily.OVERHEAD,
    ]
    if moe:
        families.append(OpFamily.MOE)
    if exchanges:
        families.append(OpFamily.COMMUNICATION)
    return tuple(families)


def uniform_basis(label: str, *, moe: bool, exchanges: bool) -> dict[str, str]:
    """`basis` of a step every op family of which one thing times (the roofline)."""
    return {family.value: label for family in step_families(moe=moe, exchanges=exchanges)}


@dataclass(frozen=True, slots=True)
class AttentionTable:
    """Attention of one head layout on one GPU: milliseconds by (batch, tokens), where tokens
    is each sequence's prompt length (prefill: causal self-attention of the whole prompt) or
    its context (decode: one new token attending over it)."""

    heads: int
    kv_heads: int
    head_dim: int
    grid: Grid


@dataclass(frozen=True, slots=True)
class EngineOverhead:
    """The engine's own cost per step, outside the kernels: scheduling, input preparation,
    sampling, launch. `step_ms + per_sequence_ms * sequences + per_token_ms * tokens` (the step
    times it with `app.engine.ops.Overhead`); and, once per request, `prefill_per_layer_ms` per
    layer before its first token: the CPU-side dispatch of its prefill, which kernel timings do
    not see."""

    step_ms: float
    per_sequence_ms: float = 0.0
    per_token_ms: float = 0.0
    prefill_per_layer_ms: float = 0.0
    source: str = ""


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Profile:
    """One GPU under one engine version. Times in the tables are milliseconds on one GPU."""

    id: str
    gpu: str
    engine: str
    version: str
    overhead: EngineOverhead
    fitted: Efficiency
    """Roofline efficiencies fitted to this profile's points: the fallback for shapes outside
    every table (its `overhead_ms` is `overhead.step_ms`)."""
    gemm: Mapping[DType, Grid] = field(default_factory=dict)
    """Per compute format: milliseconds by (M tokens, N, K)."""
    prefill_attention: Mapping[DType, tuple[AttentionTable, ...]] = field(default_factory=dict)
    """Per KV-cache format."""
    decode_attention: Mapping[DType, tuple[AttentionTable, ...]] = field(default_factory=dict)
    all_reduce: Grid | None = None
    """Milliseconds by (bytes per GPU, GPUs), bf16 activations."""
    all_to_all: Grid | None = None
    """Milliseconds by (bytes each GPU sends in all, GPUs): the expert-parallel dispatch and
    combine."""
    moe: Mapping[tuple[DType, int, int, int, int, int, int], Grid] = field(default_factory=dict)
    """Routed experts of one MoE layer on one GPU, milliseconds by tokens, keyed by (weight
    format, hidden, expert width, experts per token, experts, tp, ep)."""
    prefill_mla: Mapping[tuple[DType, DType, int], Grid] = field(default_factory=dict)
    """DeepSeek-V3's whole MLA module (projections, attention, output projection), one layer,
    milliseconds by (batch, prompt tokens), keyed by (KV format, weight format, heads per GPU)."""
    decode_mla: Mapping[tuple[DType, DType, int], Grid] = field(default_factory=dict)
    """The same in decode: milliseconds by (batch, context tokens)."""
    prefill_mla_kernel: Mapping[tuple[DType, int], Grid] = field(default_factory=dict)
    """DeepSeek-V3's MLA attention kernel alone in prefill (queries and keys 128 + 64 wide per
    head, values 128, over the expanded latent), one layer, milliseconds by (batch, prompt
    tokens), keyed by (KV format, heads per GPU): with the GEMM table's projections and latent
    expansion, the module of an engine whose database has no module table."""
    decode_mla_kernel: Mapping[tuple[DType, int], Grid] = field(default_factory=dict)
    """The kernel in decode (absorbed: each head attends over the 512 + 64 wide latent),
    milliseconds by (batch, context tokens)."""
    mla_bmm: Mapping[tuple[bool, DType, int], Grid] = field(default_factory=dict)
    """Decode's absorption batched GEMMs, one layer, milliseconds by tokens, keyed by (before
    the kernel: the query's nope part into the latent; after it: the latent output into each
    head's value width), the BMM's format, heads per GPU."""
    residual_pct: Mapping[str, float] = field(default_factory=dict)
    """Per op family: RMS relative error of the interpolation against held-out measurements."""
    source: str = ""

    @property
    def label(self) -> str:
        return f"profile {self.gpu} {self.serving_engine.label}"

    @property
    def serving_engine(self) -> ServingEngine:
        return ServingEngine(EngineName(self.engine), self.version)

    def attention(
        self, prefill: bool, kv_dtype: DType, heads: int, kv_heads: int, head_dim: int
    ) -> tuple[Grid, float] | None:
        """The table for this head layout and the ratio of this layout's KV heads to the
        table's, or None.

        The exact layout when measured; else a measured one with the same head width and GQA
        group size (query heads per KV head): at a fixed group size attention's FLOPs and bytes
        are both linear in the heads, so the ratio counts as that many more sequences. Else,
        for a group size no table has (Qwen2.5-7B's 28 query heads on 4 KV heads), the two
        tables of the same KV heads and head width whose query heads bracket it, interpolated
        cell by cell in the query heads (attention's work, at fixed KV heads, is linear in
        them: the query's share in prefill, next to nothing beside the KV reads in decode)."""
        tables = (self.prefill_attention if prefill else self.decode_attention).get(kv_dtype, ())
        group = heads / kv_heads
        best: tuple[float, AttentionTable] | None = None
        for table in tables:
            if table.head_dim != head_dim or table.heads / table.kv_heads != group:
                continue
            distance = abs(math.log(table.kv_heads / kv_heads))
            if best is None or distance < best[0]:
                best = (distance, table)
        if best is None:
            blended = _between_query_heads(tables, heads, kv_heads, head_dim)
            return None if blended is None else (blended, 1.0)
        table = best[1]
        return table.grid, kv_heads / table.kv_heads


def _between_query_heads(
    tables: tuple[AttentionTable, ...], heads: int, kv_heads: int, head_dim: int
) -> Grid | None:
    """The table of `heads` query heads interpolated between the two measured ones of the same
    KV heads and head width whose query heads bracket it, on the axes they share; None where
    there are not two such tables."""
    same = [t for t in tables if t.kv_heads == kv_heads and t.head_dim == head_dim]
    below = max((t for t in same if t.heads < heads), key=lambda t: t.heads, default=None)
    above = min((t for t in same if t.heads > heads), key=lambda t: t.heads, default=None)
    if below is None or above is None or below.grid.axes != above.grid.axes:
        return None
    w = (heads - below.heads) / (above.heads - below.heads)
    values = tuple(
        None if a is None or b is None else a + w * (b - a)
        for a, b in zip(below.grid.values, above.grid.values, strict=True)
    )
    return Grid(below.grid.axes, values)
