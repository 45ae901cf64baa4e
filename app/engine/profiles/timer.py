"""Step time from measured kernels: `ProfiledStepCost`, a `StepCostModel` whose op classes are
timed from a `Profile`'s tables where they cover the shape, and by the roofline at the profile's
fitted efficiencies where they do not.

Built once per (model, GPU, deployment, profile), it reduces the profile's tables to the model's
own shapes: one curve per linear op class over M (tokens through the layer), one over sequences
for the LM head, the prefill and decode attention tables of the model's head layout, and the
all-reduce curve at its tensor-parallel degree. Timing a step is then a handful of curve
look-ups and sums, like the roofline's.

Per GPU of the tensor-parallel group, a step takes

    sum over layers of GEMM(M, N, K) for QKV, O and the FFN      (N split across tp)
    + GEMM(sequences, vocab / tp, d)                              (the LM head)
    + layers x attention(batch, tokens) of the heads on this GPU
    + 2 x layers x all-reduce(tokens x d x 2 bytes, tp)
    + the MoE router by the roofline; routed experts from the profile's fused-MoE table of the
      layer shape (tokens, hidden, expert width, top-k, experts, tp), else the roofline
    + the engine's overhead(sequences, tokens)

and each request's first token waits `request_overhead_s` more: the engine's per-layer dispatch
of a new request's prefill, which kernel timings do not see (vLLM: 0.8 ms a layer).

A prefill step of c chunks with P query-key pairs in all is timed as c prompts of the length
whose causal self-attention has P / c pairs (sqrt(2 P / c) tokens, to the nearest token):
attention work is linear in the pairs, whatever split of cached and new tokens makes them. A
decode step is read at its mean context, to the nearest token. Each op class's time is
remembered by its (rounded) shape, so a simulation pays the table look-ups once per shape.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping

from app.engine.counting import (
    OpClass,
    window_bounded,
)
from app.engine.dtypes import DType
from app.engine.profiles.grid import Curve, Grid
from app.engine.profiles.profile import OpFamily, Profile
from app.engine.specs import Deployment, Efficiency, GpuSpec, ModelSpec, expert_dtype_for
from app.engine.step_cost import StepCostModel, per_rank, trapezoid_sum
from app.engine.step_load import StepLoad
from app.engine.timing import OpTimeRow

__all__ = ["ProfiledStepCost"]

_MS = 1e-3
_MEMO_ENTRIES = 1 << 16
_LINEAR_PART = {OpClass.QKV_PROJ: 0, OpClass.O_PROJ: 1, OpClass.FFN: 2}
"""Where each linear op class's time sits in `ProfiledStepCost._linear_parts`."""
# The op classes `_op_times` tells apart, as module globals: reading one is a quarter of the
# cost of `OpClass.X`, and the loop reads several per op class of every step it times.
_LM_HEAD, _PREFILL_ATTENTION, _DECODE_ATTENTION, _MOE_EXPERTS = (
    OpClass.LM_HEAD,
    OpClass.PREFILL_ATTENTION,
    OpClass.DECODE_ATTENTION,
    OpClass.MOE_EXPERTS,
)


def _gemm_ms(grid: Grid, m: float, n: float, k: float) -> float | None:
    """One GEMM, with N and K beyond the table split into parts that fit (a wide GEMM is several
    narrower ones; a deep one, several partial sums)."""
    n_max, k_max = grid.bounds(1)[1], grid.bounds(2)[1]
    n_parts, k_parts = max(1, math.ceil(n / n_max)), max(1, math.ceil(k / k_max))
    one = grid.at(m, max(n / n_parts, grid.bounds(1)[0]), max(k / k_parts, grid.bounds(2)[0]))
    return None if one is None else one * n_parts * k_parts


def _curve(
    xs: tuple[float, ...], time_ms: list[float | None], *, from_one: bool = True
) -> Curve | None:
    """Seconds by x from the measured points; None when none was measured (or, `from_one`,
    when the first measured x is above 1: a token curve must cover a single token)."""
    points = [(x, t * _MS) for x, t in zip(xs, time_ms, strict=True) if t is not None]
    if not points or (from_one and points[0][0] > 1):
        return None
    return Curve(tuple(x for x, _ in points), tuple(t for _, t in points))


class ProfiledStepCost(StepCostModel):
    """Times `StepLoad`s from `profile`; a `StepCostModel` in every other respect (counts,
    bounds, coefficients). `efficiency` is the roofline's for shapes the profile does not cover
    (default: the profile's fitted efficiencies)."""

    _REBUILT_ON_USE = ("_step_function", "_measured_step")
    """Slots holding closures, left out of a pickle (`StepCostModel.__getstate__`)."""

    __slots__ = (
        "_allreduce",
        "_decode_attention",
        "_decode_memo",
        "_ffn_curve",
        "_graph_sizes",
        "_layers",
        "_linear_memo",
        "_lm_curve",
        "_lm_memo",
        "_measured_step",
        "_moe_curve",
        "_o_curve",
        "_parts_memo",
        "_prefill_attention",
        "_prefill_memo",
        "_profile_overhead",
        "_qkv_curve",
        "_token_bytes",
        "_tp",
        "basis",
        "profile",
    )

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        deployment: Deployment | None,
        profile: Profile,
        efficiency: Efficiency | None = None,
    ) -> None:
        super().__init__(model, gpu, deployment, efficiency or profile.fitted)
        self.profile = profile
        deployment = self.deployment
        tp, d, layers = deployment.tp, model.hidden_size, model.num_layers
        self._layers = layers
        self._tp = tp
        self._profile_overhead = profile.overhead
        heads = model.num_attention_heads // tp
        kv_heads = max(1, model.num_kv_heads // tp)
        h = model.head_dim
        moe = model.moe
        dense_layers = layers if moe is None else moe.num_dense_layers
        gemm = _table_for(profile.gemm, deployment.weight_dtype)
        activation_gemm = profile.gemm.get(deployment.activation_dtype)
        self._qkv_curve = self._o_curve = self._ffn_curve = self._lm_curve = None
        # MLA's projections and attention kernels are not the GQA shapes the tables hold: the
        # roofline fitted to the profile times them.
        mla = model.mla is not None
        if gemm is not None:
            ms = gemm.axes[0]
            matrices = model.ffn_type.matrices
            width = model.intermediate_size / tp
            if not mla:
                self._qkv_curve = _curve(
                    ms,
                    [self._layered(gemm, m, (heads + 2 * kv_heads) * h, d, layers) for m in ms],
                )
                self._o_curve = _curve(
                    ms, [self._layered(gemm, m, d, heads * h, layers) for m in ms]
                )
            if dense_layers and self._has_ffn:
                up = (matrices - 1) * width
                self._ffn_curve = _curve(
                    ms,
                    [
                        _sum(
                            self._layered(gemm, m, up, d, dense_layers),
                            self._layered(gemm, m, d, width, dense_layers),
                        )
                        for m in ms
                    ],
                )
        if activation_gemm is not None:
            ms = activation_gemm.axes[0]
            self._lm_curve = _curve(
                ms, [_gemm_ms(activation_gemm, m, model.vocab_size / tp, d) for m in ms]
            )
        self._moe_curve: Curve | None = _moe_curve(model, deployment, profile)
        self._prefill_attention = self._decode_attention = None
        if not mla:
            self._prefill_attention = profile.attention(
                True, deployment.kv_dtype, heads, kv_heads, h
            )
            self._decode_attention = profile.attention(
                False, deployment.kv_dtype, heads, kv_heads, h
            )
        self._allreduce: Curve | None = None
        self._token_bytes = d * 2.0
        if tp > 1 and profile.all_reduce is not None and tp in profile.all_reduce.axes[1]:
            sizes = profile.all_reduce.axes[0]
            self._allreduce = _curve(
                sizes, [profile.all_reduce.at(s, tp) for s in sizes], from_one=False
            )
        self._graph_sizes = graph_sizes(profile.engine, deployment.tp)
        self._linear_memo: dict[int, float] = {}
        self._lm_memo: dict[int, float] = {}
        self._parts_memo: dict[int, tuple[float, float, float]] = {}
        self._prefill_memo: dict[tuple[int, int], float] = {}
        self._decode_memo: dict[tuple[int, int], float] = {}
        self._measured_step: Callable[[int, int, float, int, int, int], float] | None = None
        self.basis = self._basis()

    @property
    def request_overhead_s(self) -> float:
        return self._profile_overhead.prefill_per_layer_ms * self._layers / 1000.0

    @staticmethod
    def _layered(grid: Grid, m: float, n: float, k: float, layers: int) -> float | None:
        one = _gemm_ms(grid, m, n, k)
        return None if one is None else one * layers

    def _basis(self) -> dict[str, str]:
        label, roofline = self.profile.label, f"roofline fitted to {self.profile.label}"
        linear = (self._qkv_curve, self._o_curve, self._lm_curve)
        basis = {
            OpFamily.GEMM.value: label if all(c is not None for c in linear) else roofline,
            OpFamily.PREFILL_ATTENTION.value: label if self._prefill_attention else roofline,
            OpFamily.DECODE_ATTENTION.value: label if self._decode_attention else roofline,
            OpFamily.OVERHEAD.value: label,
        }
        if self._has_moe:
            basis[OpFamily.MOE.value] = label if self._moe_curve is not None else roofline
        if self.deployment.tp > 1:
            basis[OpFamily.COMMUNICATION.value] = label if self._allreduce else roofline
        return basis

    # ---- the op classes, each measured or else the roofline's

    def _linear(self, tokens: int) -> float:
        """QKV, O and the dense FFN of `tokens` rows, remembered by row count (steps repeat
        the same counts: chunk sizes, running sequences)."""
        found = self._linear_memo.get(tokens)
        if found is None:
            found = self._qkv(tokens) + self._o(tokens)
            if self._has_ffn:
                found += self._ffn(tokens)
            if len(self._linear_memo) < _MEMO_ENTRIES:
                self._linear_memo[tokens] = found
        return found

    def _linear_parts(self, tokens: int) -> tuple[float, float, float]:
        """(`_qkv`, `_o`, `_ffn`) of `tokens` rows, remembered by row count (what `breakdown`
        reports of each; `_linear` remembers their sum)."""
        found = self._parts_memo.get(tokens)
        if found is None:
            found = (self._qkv(tokens), self._o(tokens), self._ffn(tokens))
            if len(self._parts_memo) < _MEMO_ENTRIES:
                self._parts_memo[tokens] = found
        return found

    def _qkv(self, tokens: int) -> float:
        t = self._qkv_curve.at(tokens) if self._qkv_curve else None
        return t if t is not None else max(tokens * self._qkv_c, self._qkv_w + tokens * self._qkv_a)

    def _o(self, tokens: int) -> float:
        t = self._o_curve.at(tokens) if self._o_curve else None
        return t if t is not None else max(tokens * self._o_c, self._o_w + tokens * self._o_a)

    def _ffn(self, tokens: int) -> float:
        t = self._ffn_curve.at(tokens) if self._ffn_curve else None
        return t if t is not None else max(tokens * self._ffn_c, self._ffn_w + tokens * self._ffn_a)

    def _lm(self, sequences: int) -> float:
        found = self._lm_memo.get(sequences)
        if found is None:
            found = self._lm_uncached(sequences)
            if len(self._lm_memo) < _MEMO_ENTRIES:
                self._lm_memo[sequences] = found
        return found

    def _lm_uncached(self, sequences: int) -> float:
        t = self._lm_curve.at(sequences) if self._lm_curve else None
        if t is not None:
            return t
        return max(sequences * self._lm_c, self._lm_w + sequences * self._lm_a)

    def _moe(self, tokens: int, replica_tokens: int) -> float:
        """Router by the roofline over a rank's tokens; the routed experts of the replica's
        tokens from the profile's fused-MoE table of this layer shape (tensor-sliced over tp),
        else the roofline."""
        router = max(tokens * self._router_c, self._router_w + tokens * self._router_a)
        measured = self._moe_curve.at(replica_tokens) if self._moe_curve else None
        if measured is not None:
            return router + measured
        return router + self._experts_seconds(replica_tokens)

    def _prefill_attn(self, tokens: int, chunks: int, pairs: float, kv_tokens: int) -> float:
        """Read at the equivalent prompt length to the nearest token (remembered: a run
        repeats the same chunk shapes)."""
        if self._prefill_attention is not None and chunks > 0:
            key = (chunks, round(math.sqrt(2.0 * pairs / chunks)))
            found = self._prefill_memo.get(key)
            if found is None:
                grid, scale = self._prefill_attention
                t = _attention_ms(grid, chunks * scale, key[1])
                found = -1.0 if t is None else t * self._layers * _MS
                if len(self._prefill_memo) < _MEMO_ENTRIES:
                    self._prefill_memo[key] = found
            if found >= 0.0:
                return found
        return max(
            pairs * self._pair_c + kv_tokens * self._expand_c,
            tokens * self._qo_kv_s + kv_tokens * self._kv_s,
        )

    def _decode_attn(self, seqs: int, context: int) -> float:
        """Read at the mean context to the nearest token (remembered)."""
        if self._decode_attention is not None:
            key = (seqs, round(context / seqs))
            found = self._decode_memo.get(key)
            if found is None:
                grid, scale = self._decode_attention
                t = _attention_ms(grid, seqs * scale, key[1])
                found = -1.0 if t is None else t * self._layers * _MS
                if len(self._decode_memo) < _MEMO_ENTRIES:
                    self._decode_memo[key] = found
            if found >= 0.0:
                return found
        return max(
            context * self._decode_pair_c + seqs * self._absorb_c,
            seqs * self._decode_qo_kv_s + context * self._kv_s,
        )

    def _communication(self, tokens: int) -> float:
        if self.deployment.tp <= 1:
            return 0.0
        if self._allreduce is not None:
            size = max(tokens * self._token_bytes, self._allreduce.xs[0])
            t = self._allreduce.at(size)
            if t is not None:
                return t * self.coefficients.allreduces_per_step
        return tokens * self._comm_s_per_token + self._comm_latency_s

    # ---- StepCostModel

    def step_seconds(  # noqa: PLR0917 - positional: StepLoad's fields, in search loops
        self,
        prefill_tokens: int,
        prefill_chunks: int,
        prefill_attention_pairs: float,
        prefill_kv_tokens: int,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> float:
        """Seconds of the step with these `StepLoad` fields: the measured step closure's."""
        return self._measured()(
            prefill_tokens,
            prefill_chunks,
            prefill_attention_pairs,
            prefill_kv_tokens,
            decode_seqs,
            decode_context_tokens,
        )

    def _step_seconds_function(self) -> Callable[[int, int, float, int, int, int], float]:
        """The measured step closure itself (searches and the simulator call it without the
        method's indirection); a subclass's own `step_seconds` when it overrides it."""
        if type(self).step_seconds is not ProfiledStepCost.step_seconds:
            return self.step_seconds
        return self._measured()

    def _measured(self) -> Callable[[int, int, float, int, int, int], float]:
        """`_measured_step_seconds()`, built on first use and kept."""
        measured = self._measured_step
        if measured is None:
            measured = self._measured_step = self._measured_step_seconds()
        return measured

    def _measured_step_seconds(self) -> Callable[[int, int, float, int, int, int], float]:
        """A step's seconds as a closure over this timer's memos and constants: each op
        class measured where the profile holds it (the linear memos read inline), else the
        roofline's, communication and the engine's overhead; an attention data-parallel or
        windowed layout timed on one rank's view."""
        rank_view = self._rank_view if self._dp > 1 or self._windowed else None
        one_rank = self._dp == 1
        linear_memo, linear = self._linear_memo, self._linear
        lm_memo, lm = self._lm_memo, self._lm
        moe = self._moe if self._has_moe else None
        prefill_attn, decode_attn = self._prefill_attn, self._decode_attn
        graph_rows = self._graph_rows
        # Communication and layout exchanges; without tp or a layout they are 0 s (skipped:
        # adding 0.0 changes nothing).
        communication = self._communication if self._tp > 1 else None
        layout_seconds = self._layout_seconds if self._has_layout_comm else None
        overhead = self._profile_overhead.seconds

        def step_seconds(  # noqa: PLR0917 - StepLoad's fields, as `step_seconds` takes them
            prefill_tokens: int,
            prefill_chunks: int,
            prefill_attention_pairs: float,
            prefill_kv_tokens: int,
            decode_seqs: int,
            decode_context_tokens: int,
        ) -> float:
            tokens = prefill_tokens + decode_seqs
            if tokens <= 0:
                return 0.0
            replica_tokens = tokens
            if rank_view is not None:
                (
                    prefill_tokens,
                    prefill_chunks,
                    prefill_attention_pairs,
                    prefill_kv_tokens,
                    decode_seqs,
                    decode_context_tokens,
                ) = rank_view(  # type: ignore[assignment]
                    prefill_tokens,
                    prefill_chunks,
                    prefill_attention_pairs,
                    prefill_kv_tokens,
                    decode_seqs,
                    decode_context_tokens,
                )
                tokens = prefill_tokens + decode_seqs
            sequences = prefill_chunks + decode_seqs
            rows = tokens
            if not prefill_tokens:
                # A decode-only step replays the CUDA graph captured at the next batch size up.
                rows = sequences = graph_rows(decode_seqs)
                if one_rank:
                    replica_tokens = rows
            total = linear_memo.get(rows)
            if total is None:
                total = linear(rows)
            if moe is not None:
                total += moe(rows, replica_tokens)
            if sequences > 0:
                lm_s = lm_memo.get(sequences)
                total += lm(sequences) if lm_s is None else lm_s
            if prefill_tokens > 0:
                total += prefill_attn(
                    prefill_tokens, prefill_chunks, prefill_attention_pairs, prefill_kv_tokens
                )
            if decode_seqs > 0:
                total += decode_attn(decode_seqs, decode_context_tokens)
            if communication is not None:
                total += communication(tokens)
            if layout_seconds is not None:
                total += layout_seconds(replica_tokens)
            return total + overhead(sequences, tokens)

        return step_seconds

    def _graph_rows(self, seqs: int) -> int:
        """The batch a decode-only step of `seqs` sequences runs at: the smallest CUDA-graph
        size the engine captured that holds it (`graph_sizes`); `seqs` beyond the largest, or
        for an engine that does not pad (TensorRT-LLM's default), run as they are."""
        sizes = self._graph_sizes
        if not sizes or seqs > sizes[-1]:
            return seqs
        return sizes[bisect.bisect_left(sizes, seqs)]

    def communication_seconds(self, load: StepLoad) -> float:
        tokens = load.prefill_tokens + load.decode_seqs
        if tokens <= 0:
            return 0.0
        rank_tokens = max(1, round(tokens / self._dp))
        return self._communication(rank_tokens) + self._layout_seconds(tokens)

    def _op_times(self, load: StepLoad) -> tuple[list[OpTimeRow], float, float] | None:
        """The roofline's op classes with each one's time replaced by the measured one (its
        compute and memory parts scaled together, so the bound stays the roofline's): what
        `breakdown` and `time_totals` report."""
        timed = super()._op_times(load)
        if timed is None:
            return None
        roofline, communication_s, _ = timed
        replica_tokens = load.prefill_tokens + load.decode_seqs
        load = per_rank(load, self._dp)
        tokens = load.prefill_tokens + load.decode_seqs
        sequences = load.prefill_chunks + load.decode_seqs
        if not load.prefill_tokens:
            tokens = sequences = self._graph_rows(load.decode_seqs)
            if self._dp == 1:
                replica_tokens = tokens
        pairs, kv_tokens, context = window_bounded(self.coefficients, load)
        experts = self._moe_curve.at(replica_tokens) if self._moe_curve else None
        parts = self._linear_parts(tokens)
        rows: list[OpTimeRow] = []
        for row in roofline:
            op_class, compute_s, memory_s = row
            seconds = memory_s if memory_s > compute_s else compute_s  # `OpTime.seconds`
            if seconds <= 0:
                rows.append(row)
                continue
            part = _LINEAR_PART.get(op_class)
            if part is not None:
                measured = parts[part]
            elif op_class is _LM_HEAD:
                measured = self._lm(sequences)
            elif op_class is _PREFILL_ATTENTION:
                measured = self._prefill_attn(
                    load.prefill_tokens, load.prefill_chunks, pairs, round(kv_tokens)
                )
            elif op_class is _DECODE_ATTENTION:
                measured = self._decode_attn(load.decode_seqs, round(context))
            elif op_class is _MOE_EXPERTS and experts is not None:
                measured = experts
            else:  # the router, and experts without a table: the roofline's time
                rows.append(row)
                continue
            factor = measured / seconds
            rows.append((op_class, compute_s * factor, memory_s * factor))
        return rows, communication_s, self._profile_overhead.seconds(sequences, tokens)

    def sum_seconds(self, first: StepLoad, step: StepLoad, count: int) -> float:
        """Sum of `seconds(first + j * step)` for j in 0..count-1: exact up to 17 steps, else
        the trapezoid rule over 16 segments plus the end correction (the step time is smooth
        in j: interpolated log-log between measurements; within 0.1 % of step by step)."""
        if count <= 0:
            return 0.0
        if step.prefill_tokens or step.prefill_chunks or step.decode_seqs:
            raise ValueError("sum_seconds: only attention fields of `step` may vary")
        return trapezoid_sum(self.step_seconds_function(), first, step, count)


_SAME_BYTES = {DType.FP8_BLOCK: DType.FP8, DType.FP8: DType.FP8_BLOCK}
"""Weight formats of the same size and compute, whose tables stand in for each other (the
per-tensor and the block-scaled FP8 kernels differ by a few percent)."""


def graph_sizes(engine: str, tp: int) -> tuple[int, ...]:
    """The decode batch sizes an engine captures CUDA graphs at by default (and pads a decode
    step up to): vLLM V1 0.10-0.11 `[1, 2, 4] + range(8, 513, 8)` (`cuda_graph_sizes` default
    `min(2 x max_num_seqs, 512)`, vllm/config/scheduler.py); SGLang 0.5.3 `[1, 2, 4, 8, 12] +
    range(16, 257, 8) + range(272, 512, 16) + range(512, max + 1, 32)` with `cuda_graph_max_bs`
    256 on 80-160 GB GPUs below tp 4 and 512 from tp 4 (sglang/srt/server_args.py); none for
    TensorRT-LLM, whose graph padding is off by default."""
    if engine == "vllm":
        return (1, 2, 4, *range(8, 513, 8))
    if engine == "sglang":
        largest = 512 if tp >= 4 else 256
        sizes = (1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, 513, 32))
        return tuple(size for size in sizes if size <= largest)
    return ()


def _moe_curve(model: ModelSpec, deployment: Deployment, profile: Profile) -> Curve | None:
    """All MoE layers' routed experts over tokens, from the profile's fused-MoE table of this
    layer shape (none for shared experts, which the tables do not hold)."""
    moe = model.moe
    if moe is None or moe.num_shared_experts or deployment.is_layout:
        return None
    dtype = expert_dtype_for(model, deployment)
    key = (
        dtype,
        model.hidden_size,
        moe.expert_intermediate_size,
        moe.experts_per_token,
        moe.num_experts,
        deployment.tp,
    )
    table = profile.moe.get(key)
    if table is None and dtype in _SAME_BYTES:
        table = profile.moe.get((_SAME_BYTES[dtype], *key[1:]))
    if table is None:
        return None
    moe_layers = model.num_layers - moe.num_dense_layers
    tokens = table.axes[0]
    return _curve(tokens, [None if (t := table.at(n)) is None else t * moe_layers for n in tokens])


def _table_for(tables: Mapping[DType, Grid], weight_dtype: DType) -> Grid | None:
    """The GEMM table of weights stored as `weight_dtype`: measured with that format, or with
    one of the same size and compute. Not the compute format's: int4 or MXFP4 weights run bf16
    multiplies but read a quarter of the bytes, which a bf16 table does not see."""
    found = tables.get(weight_dtype)
    if found is None and weight_dtype in _SAME_BYTES:
        found = tables.get(_SAME_BYTES[weight_dtype])
    return found


def _attention_ms(grid: Grid, batch: float, tokens: float) -> float | None:
    """One layer's attention of `batch` sequences of `tokens` each, from a table measured on
    another head count: `batch` already counts the heads in units of the table's (a kernel runs
    heads and sequences alike in parallel), so the table's latency floor is paid once, not once
    per extra head group. Beyond the table's largest batch, equal parts that fit."""
    low, high = grid.bounds(0)
    parts = max(1, math.ceil(batch / high))
    one = grid.at2(min(max(batch / parts, low), high), max(tokens, 1.0))
    return None if one is None else one * parts


def _sum(*parts: float | None) -> float | None:
    return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
