"""Op families timed from a profile's tables (`app.engine.ops`, measured): each reads its curve
or table where it covers the shape and is the roofline family it extends where it does not.

A measured op class reports the roofline's split of compute and memory, scaled so that the
larger one is the measured time (`bound_side`): the breakdown keeps the roofline's bound.
Every time read from a table is remembered by its (rounded) shape, so a simulation pays the
look-up once per shape; each memo holds at most `memo_entries` (`MEMO_ENTRIES` by default: what
a simulation in a heavy-work process uses; the estimate path's timers, kept in the server for
many requests, take fewer: `app.targets.service`) and starts again empty when full, so the shapes
remembered are those of the work now being timed (an estimate that reads the same shapes many
times, such as the chunk-size search, finds its own).

Compiled with mypyc with the step (setup.py).
"""

from __future__ import annotations

import math

from app.engine.ops import (
    Communication,
    DecodeAttention,
    Experts,
    LinearOp,
    PrefillAttention,
    bound_side,
)
from app.engine.profiles.grid import Curve, Grid

__all__ = [
    "MEMO_ENTRIES",
    "MeasuredCommunication",
    "MeasuredDecodeAttention",
    "MeasuredExperts",
    "MeasuredLinear",
    "MeasuredPrefillAttention",
    "attention_ms",
]

MEMO_ENTRIES = 1 << 16
"""Shapes one memo remembers by default: some 7-11 MB a memo when full (a float key about 100
bytes an entry, a (float, int) key about 160)."""
_MS = 1e-3
_UNMEASURED = -1.0
"""A memo's mark for a shape the table does not cover (the roofline times it)."""


def attention_ms(grid: Grid, batch: float, tokens: float) -> float | None:
    """One layer's attention of `batch` sequences of `tokens` each, from a table measured on
    another head count: `batch` already counts the heads in units of the table's (a kernel runs
    heads and sequences alike in parallel), so the table's latency floor is paid once, not once
    per extra head group. Beyond the table's largest batch, equal parts that fit."""
    low, high = grid.bounds(0)
    parts = max(1, math.ceil(batch / high))
    one = grid.at2(min(max(batch / parts, low), high), max(tokens, 1.0))
    return None if one is None else one * parts


def _read(curve: Curve, memo: dict[float, float], x: float, limit: int) -> float:
    """The curve's seconds at `x`, remembered in `memo` (emptied first when it holds `limit`);
    `_UNMEASURED` beyond what it covers."""
    seconds = memo.get(x)
    if seconds is None:
        found = curve.at(x)
        seconds = _UNMEASURED if found is None else found
        if len(memo) >= limit:
            memo.clear()
        memo[x] = seconds
    return seconds


def _measured(compute_s: float, memory_s: float, seconds: float) -> tuple[float, float]:
    """The roofline's (compute s, memory s) with the measured `seconds` on its bound side, or
    as they are where nothing was measured."""
    if seconds < 0.0:
        return compute_s, memory_s
    return bound_side(compute_s, memory_s, seconds)


def _with(
    ops: list[LinearOp], rows: float, compute_s: float, memory_s: float
) -> tuple[float, float]:
    """(compute s, memory s) with the roofline's of `ops` over `rows` added."""
    for op in ops:
        op_compute_s, op_memory_s = op.parts(rows)
        compute_s += op_compute_s
        memory_s += op_memory_s
    return compute_s, memory_s


class MeasuredLinear(LinearOp):
    """A GEMM op class read from its curve over rows (all layers, seconds)."""

    def __init__(self, roofline: LinearOp, curve: Curve, memo_entries: int = MEMO_ENTRIES) -> None:
        super().__init__(
            roofline.op_class,
            roofline.compute_s_per_row,
            roofline.weights_s,
            roofline.memory_s_per_row,
        )
        self.floor_s = roofline.floor_s  # where the curve does not reach
        self.curve = curve
        self.memo: dict[float, float] = {}
        self.memo_entries = memo_entries

    def parts(self, rows: float) -> tuple[float, float]:
        compute_s, memory_s = LinearOp.parts(self, rows)
        return _measured(compute_s, memory_s, _read(self.curve, self.memo, rows, self.memo_entries))


class MeasuredExperts(Experts):
    """The routed experts read from the fused-MoE curve of the layer shape over the replica's
    tokens (all MoE layers, seconds); the shared experts are not in the tables."""

    def __init__(self, roofline: Experts, curve: Curve, memo_entries: int = MEMO_ENTRIES) -> None:
        super().__init__(
            roofline.compute_s_per_token,
            roofline.expert_weights_s,
            roofline.shared_weights_s,
            roofline.memory_s_per_token,
            roofline.num_experts,
            roofline.experts_per_token,
            roofline.ep,
            roofline.imbalance,
        )
        self.floor_s = roofline.floor_s
        self.curve = curve
        self.memo: dict[float, float] = {}
        self.memo_entries = memo_entries

    def parts(self, tokens: float) -> tuple[float, float]:
        compute_s, memory_s = Experts.parts(self, tokens)
        return _measured(
            compute_s, memory_s, _read(self.curve, self.memo, tokens, self.memo_entries)
        )


class MeasuredPrefillAttention(PrefillAttention):
    """Prefill attention from the profile's table of the model's head layout: a step of c
    chunks with P query-key pairs in all is read as c prompts of the length whose causal
    self-attention has P / c pairs (sqrt(2 P / c) tokens, to the nearest token), attention
    work being linear in the pairs whatever split of cached and new tokens makes them."""

    def __init__(
        self,
        roofline: PrefillAttention,
        grid: Grid,
        head_scale: float,
        layers: int,
        memo_entries: int = MEMO_ENTRIES,
    ) -> None:
        super().__init__(
            roofline.compute_s_per_pair,
            roofline.expand_s_per_kv_token,
            roofline.memory_s_per_token,
            roofline.kv_s_per_token,
        )
        self.linear = False
        self.grid = grid
        self.head_scale = head_scale
        self.layers = layers
        self.memo: dict[tuple[float, int], float] = {}
        self.memo_entries = memo_entries
        self.projections: list[LinearOp] = []
        """Linear op classes the table's time includes (a module table): the roofline's, over
        the step's tokens, joins the roofline's attention where the table does not reach."""
        self.expansion: Curve | None = None
        """Seconds by attended tokens of what the kernel table leaves out (MLA's latent
        expansion, all layers), added to it; where it does not reach, the roofline times the
        whole."""
        self.expansion_memo: dict[float, float] = {}

    def parts(
        self, tokens: float, chunks: float, pairs: float, kv_tokens: float
    ) -> tuple[float, float]:
        compute_s, memory_s = PrefillAttention.parts(self, tokens, chunks, pairs, kv_tokens)
        if chunks <= 0:
            return compute_s, memory_s
        length: int = round(math.sqrt(2.0 * pairs / chunks))
        key = (chunks, length)
        seconds = self.memo.get(key)
        if seconds is None:
            found = attention_ms(self.grid, chunks * self.head_scale, length)
            seconds = _UNMEASURED if found is None else found * self.layers * _MS
            if len(self.memo) >= self.memo_entries:
                self.memo.clear()
            self.memo[key] = seconds
        expansion = self.expansion
        if expansion is not None and seconds >= 0.0:
            extra = _read(expansion, self.expansion_memo, kv_tokens, self.memo_entries)
            seconds = _UNMEASURED if extra < 0.0 else seconds + extra
        if seconds < 0.0:
            return _with(self.projections, tokens, compute_s, memory_s)
        return _measured(compute_s, memory_s, seconds)


class MeasuredDecodeAttention(DecodeAttention):
    """Decode attention from the profile's table, read at the mean context to the nearest
    token."""

    def __init__(
        self,
        roofline: DecodeAttention,
        grid: Grid,
        head_scale: float,
        layers: int,
        memo_entries: int = MEMO_ENTRIES,
    ) -> None:
        super().__init__(
            roofline.compute_s_per_context_token,
            roofline.absorb_s_per_sequence,
            roofline.memory_s_per_sequence,
            roofline.kv_s_per_token,
        )
        self.linear = False
        self.grid = grid
        self.head_scale = head_scale
        self.layers = layers
        self.memo: dict[tuple[float, int], float] = {}
        self.memo_entries = memo_entries
        self.projections: list[LinearOp] = []
        """As `MeasuredPrefillAttention.projections`, over the step's sequences."""
        self.absorption: Curve | None = None
        """Seconds by sequences of what the kernel table leaves out (MLA's absorption BMMs,
        all layers), added to it; where it does not reach, the roofline times the whole."""

    def parts(self, sequences: float, context_tokens: float) -> tuple[float, float]:
        compute_s, memory_s = DecodeAttention.parts(self, sequences, context_tokens)
        mean: int = round(context_tokens / sequences)
        key = (sequences, mean)
        seconds = self.memo.get(key)
        if seconds is None:
            found = attention_ms(self.grid, sequences * self.head_scale, mean)
            seconds = _UNMEASURED if found is None else found * self.layers * _MS
            absorption = self.absorption
            if seconds >= 0.0 and absorption is not None:
                extra = absorption.at(sequences)
                seconds = _UNMEASURED if extra is None else seconds + extra
            if len(self.memo) >= self.memo_entries:
                self.memo.clear()
            self.memo[key] = seconds
        if seconds < 0.0:
            return _with(self.projections, sequences, compute_s, memory_s)
        return _measured(compute_s, memory_s, seconds)


class MeasuredCommunication(Communication):
    """The tensor-parallel all-reduces read from the profile's curve at the group's size (a
    rank's tokens times the activation bytes of one token, each of the step's all-reduces), and
    the expert-parallel dispatch and combine from its all-to-all curve at the experts' group (the
    bytes each GPU sends: its share of the replica's tokens, each to its k experts, per MoE
    layer twice); each the roofline's where its curve is None or does not reach."""

    def __init__(  # noqa: PLR0917 - the two curves and what reads them, in order
        self,
        roofline: Communication,
        curve: Curve | None,
        token_bytes: float,
        allreduces: int,
        exchange: Curve | None = None,
        exchange_bytes_per_token: float = 0.0,
        exchanges: int = 0,
    ) -> None:
        super().__init__(
            roofline.allreduce_s_per_token,
            roofline.allreduce_latency_s,
            roofline.layout_terms(),
            roofline.dp,
        )
        self.curve = curve
        self.token_bytes = token_bytes
        self.allreduces = allreduces
        self.smallest_bytes = curve.xs[0] if curve is not None else 0.0
        self.exchange = exchange
        self.exchange_bytes_per_token = exchange_bytes_per_token
        self.exchanges = exchanges

    def tensor_parallel(self, tokens: float) -> float:
        curve = self.curve
        if curve is None:
            return Communication.tensor_parallel(self, tokens)
        size = tokens * self.token_bytes
        found = curve.at(size if size > self.smallest_bytes else self.smallest_bytes)
        if found is None:
            return Communication.tensor_parallel(self, tokens)
        return found * self.allreduces

    def layout(self, replica_tokens: float) -> float:
        exchange = self.exchange
        if exchange is None:
            return Communication.layout(self, replica_tokens)
        size = replica_tokens * self.exchange_bytes_per_token
        smallest = exchange.xs[0]
        found = exchange.at(size if size > smallest else smallest)
        if found is None:
            return Communication.layout(self, replica_tokens)
        # The measured exchange holds its own latency; the pipeline hand-offs' stays.
        return (
            found * self.exchanges
            + replica_tokens / self.dp * self.stage_s_per_token
            + self.stage_latency_s
        )
