"""The single source of step time: `StepCostModel.seconds(load: StepLoad) -> float`.

Built once from (model, gpu, deployment, efficiency), it folds every per-token count of
`app.engine.counting` together with the GPU's peaks, bandwidth, interconnect and efficiencies
into a few floats, so timing a step is a dozen multiplications and `max`es: no per-layer loops.
Prefill and decode estimates, the chunk-size search and the serving simulator all time their steps
here, so they cannot disagree.

Per GPU of a tensor-parallel group, a step takes

    sum over op classes of max(FLOPs / (peak * eta_compute), bytes / (bandwidth * eta_memory))
    + tensor-parallel all-reduces + efficiency.overhead_ms            (docs/model.md)

GEMMs (QKV, O, FFN, experts) compute in `compute_dtype_for(weight_dtype)` at `efficiency.gemm`;
the router and LM head stay in the activation format at `efficiency.gemm`; attention computes in
`attention_dtype_for(gpu, deployment)` at `efficiency.attention`. An empty step takes 0 s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from itertools import starmap
from typing import Any, ClassVar, TypeVar, cast

from app.engine.counting import (
    CountTotals,
    OpClass,
    OpCoefficients,
    StepCount,
    attention_dtype_for,
    bounded_by_window,
    count_step,
    count_totals,
    expected_distinct_experts,
    op_coefficients,
    pairs_for_chunk,
    straggler_factor,
    window_bounded,
)
from app.engine.dtypes import BYTES_PER_ELEMENT, DType, compute_dtype_for
from app.engine.specs import (
    IDEAL_EFFICIENCY,
    Deployment,
    Efficiency,
    GpuSpec,
    ModelSpec,
    SpecError,
    expert_dtype_for,
)
from app.engine.step_load import StepLoad
from app.engine.timing import (
    Bound,
    OpTime,
    OpTimeRow,
    StepTime,
    TimeTotals,
    allreduce_seconds,
)
from app.engine.units import MS_PER_S

T = TypeVar("T")

__all__ = ["StepCostModel", "decode_load", "prefill_load"]

_MEMO_SIZE = 1 << 16
"""At most this many entries in each of one `StepCostModel`'s memos (token counts of a step's
rows, counts of its sequences)."""
_DERIVED_KEPT = 64
"""At most this many values in one `StepCostModel`'s `derived` store."""
# The op classes as module globals for `_op_times`, which names each of a step's: reading a
# global is a quarter of the cost of `OpClass.X`.
_QKV_PROJ, _O_PROJ, _FFN, _MOE_ROUTER, _MOE_EXPERTS = (
    OpClass.QKV_PROJ,
    OpClass.O_PROJ,
    OpClass.FFN,
    OpClass.MOE_ROUTER,
    OpClass.MOE_EXPERTS,
)
_LM_HEAD, _PREFILL_ATTENTION, _DECODE_ATTENTION = (
    OpClass.LM_HEAD,
    OpClass.PREFILL_ATTENTION,
    OpClass.DECODE_ATTENTION,
)


def prefill_load(
    query_tokens: int,
    *,
    batch_size: int = 1,
    cached_tokens: int = 0,
    causal: bool = True,
    decode_seqs: int = 0,
    decode_context_tokens: int = 0,
) -> StepLoad:
    """One step in which `batch_size` sequences each prefill `query_tokens` new tokens after
    `cached_tokens` already in their KV cache, beside `decode_seqs` decodes attending over
    `decode_context_tokens` in all (`decode_load(...) + prefill_load(...)`, in one record)."""
    pairs = pairs_for_chunk(query_tokens, cached_tokens, causal=causal)
    # Positional, in StepLoad's field order (keywords cost a named tuple a third more).
    return StepLoad(
        batch_size * query_tokens,
        batch_size,
        batch_size * pairs,
        batch_size * (cached_tokens + query_tokens),
        decode_seqs,
        decode_context_tokens,
    )


def decode_load(batch_size: int, context_tokens: int) -> StepLoad:
    """One decode step of `batch_size` sequences, each attending over `context_tokens`."""
    return StepLoad(decode_seqs=batch_size, decode_context_tokens=batch_size * context_tokens)


class StepCostModel:
    """Times `StepLoad`s of one (model, gpu, deployment, efficiency). Immutable once built.

    Raises `SpecError` when the deployment is impossible: `tp` that cannot split the heads, a
    weight format the GPU cannot compute in.
    """

    _REBUILT_ON_USE: ClassVar[tuple[str, ...]] = ("_step_function",)
    """Slots holding closures, left out of a pickle (`__getstate__`)."""

    __slots__ = (
        "_absorb_c",
        "_activation_rate",
        "_attention_rate",
        "_bandwidth",
        "_comm_latency_s",
        "_comm_s_per_token",
        "_decode_pair_c",
        "_decode_qo_kv_s",
        "_derived",
        "_dp",
        "_exp_a",
        "_exp_c",
        "_exp_shared",
        "_exp_w",
        "_expand_c",
        "_experts_per_token",
        "_ffn_a",
        "_ffn_c",
        "_ffn_w",
        "_gemm_rate",
        "_has_ffn",
        "_has_layout_comm",
        "_has_moe",
        "_head_memo",
        "_imbalance",
        "_kv_s",
        "_layout_latency_s",
        "_layout_s_per_token",
        "_lm_a",
        "_lm_c",
        "_lm_w",
        "_num_experts",
        "_o_a",
        "_o_c",
        "_o_w",
        "_overhead_s",
        "_pair_c",
        "_qkv_a",
        "_qkv_c",
        "_qkv_w",
        "_qo_kv_s",
        "_router_a",
        "_router_c",
        "_router_w",
        "_rows_memo",
        "_stage_s_per_token",
        "_step_function",
        "_windowed",
        "attention_dtype",
        "coefficients",
        "deployment",
        "efficiency",
        "expert_dtype",
        "gemm_dtype",
        "gpu",
        "model",
    )

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        deployment: Deployment | None = None,
        efficiency: Efficiency = IDEAL_EFFICIENCY,
    ) -> None:
        deployment = deployment or Deployment()
        self.model = model
        self.gpu = gpu
        self.deployment = deployment
        self.efficiency = efficiency
        self.gemm_dtype: DType = compute_dtype_for(deployment.weight_dtype, gpu.peak_flops_per_s)
        self.attention_dtype: DType = attention_dtype_for(gpu, deployment)
        self.coefficients: OpCoefficients = op_coefficients(model, deployment, self.attention_dtype)
        gemm_rate = gpu.peak(self.gemm_dtype) * efficiency.gemm
        try:
            activation_rate = gpu.peak(deployment.activation_dtype) * efficiency.gemm
        except SpecError:
            raise SpecError(
                "gpu",
                f"GPU {gpu.id} has no {deployment.activation_dtype} compute for activations",
            ) from None
        attention_rate = gpu.peak(self.attention_dtype) * efficiency.attention
        bandwidth = gpu.memory_bandwidth_bytes_per_s * efficiency.memory
        self._gemm_rate, self._activation_rate = gemm_rate, activation_rate
        self._attention_rate, self._bandwidth = attention_rate, bandwidth
        c = self.coefficients
        # Linear op classes: seconds per token (compute), per step (weights), per token (memory).
        self._qkv_c, self._qkv_w, self._qkv_a = (
            c.qkv_flops_per_token / gemm_rate,
            c.qkv_weight_bytes / bandwidth,
            c.qkv_activation_bytes_per_token / bandwidth,
        )
        self._o_c, self._o_w, self._o_a = (
            c.o_flops_per_token / gemm_rate,
            c.o_weight_bytes / bandwidth,
            c.o_activation_bytes_per_token / bandwidth,
        )
        self._has_ffn = c.ffn_flops_per_token > 0
        self._ffn_c, self._ffn_w, self._ffn_a = (
            c.ffn_flops_per_token / gemm_rate,
            c.ffn_weight_bytes / bandwidth,
            c.ffn_activation_bytes_per_token / bandwidth,
        )
        self._has_moe = c.expert_flops_per_token > 0
        self._num_experts, self._experts_per_token = c.num_experts, c.experts_per_token
        self._router_c, self._router_w, self._router_a = (
            c.router_flops_per_token / activation_rate,
            c.router_weight_bytes / bandwidth,
            c.router_activation_bytes_per_token / bandwidth,
        )
        self.expert_dtype: DType = compute_dtype_for(
            expert_dtype_for(model, deployment), gpu.peak_flops_per_s
        )
        expert_rate = gpu.peak(self.expert_dtype) * efficiency.gemm
        self._exp_c, self._exp_w, self._exp_shared, self._exp_a = (
            c.expert_flops_per_token / expert_rate,
            c.routed_expert_weight_bytes / bandwidth,
            c.shared_expert_weight_bytes / bandwidth,
            c.expert_activation_bytes_per_token / bandwidth,
        )
        self._lm_c, self._lm_w, self._lm_a = (
            c.lm_head_flops_per_sequence / activation_rate,
            c.lm_head_weight_bytes / bandwidth,
            c.lm_head_activation_bytes_per_sequence / bandwidth,
        )
        # Attention: seconds per pair (compute), per token of Q/O and per KV token (memory).
        self._pair_c = c.attention_flops_per_pair / attention_rate
        self._kv_s = c.kv_bytes_per_token / bandwidth
        self._qo_kv_s = c.attention_qo_bytes_per_token / bandwidth + self._kv_s
        self._decode_pair_c = c.decode_attention_flops_per_token / attention_rate
        self._decode_qo_kv_s = c.decode_qo_bytes_per_sequence / bandwidth + self._kv_s
        # MLA: prefill decompresses attended latents, decode runs the absorbed projections.
        self._expand_c = c.prefill_expand_flops_per_token / attention_rate
        self._absorb_c = c.decode_absorb_flops_per_sequence / attention_rate
        self._windowed = c.window_share > 0
        # All-reduces: the bandwidth term grows with tokens, the latency term is per step.
        per_token_layer = c.allreduce_bytes_per_token / max(c.allreduces_per_step, 1)
        tp_link = gpu.interconnect.tier(c.tp)
        latency_s = allreduce_seconds(0.0, c.tp, tp_link, efficiency)
        self._comm_s_per_token = (
            allreduce_seconds(per_token_layer, c.tp, tp_link, efficiency) - latency_s
        ) * c.allreduces_per_step
        self._comm_latency_s = latency_s * c.allreduces_per_step
        self._overhead_s = efficiency.overhead_ms / MS_PER_S
        self._dp = deployment.dp
        self._imbalance = deployment.imbalance
        self._layout_s_per_token, self._layout_latency_s, self._stage_s_per_token = (
            layout_communication(model, gpu, deployment, efficiency, c)
        )
        self._has_layout_comm = deployment.is_layout
        self._start_caches()

    def _start_caches(self) -> None:
        # Whole token counts -> the linear op classes' seconds (`_rows_seconds`), and whole
        # sequence counts -> the LM head's (`_head_seconds`): pure functions of one count each,
        # so `step_seconds` adds the same floats in the same order from the memos.
        self._rows_memo: dict[int, float] = {}
        self._head_memo: dict[int, float] = {}
        self._derived: dict[Hashable, Any] = {}
        self._step_function: Callable[[int, int, float, int, int, int], float] | None = None

    def __getstate__(self) -> object:
        """Pickled (for the process pool) without its step closures (`_REBUILT_ON_USE`),
        which a copy builds again on first use."""
        # A class with __slots__ and no __dict__: (None, {slot: value}).
        state: tuple[None, dict[str, Any]] = super().__getstate__()  # type: ignore[assignment]
        return state[0], {**state[1], **dict.fromkeys(self._REBUILT_ON_USE)}

    def derived(self, key: Hashable, make: Callable[[], T]) -> T:
        """What `make()` computes from this model's specs alone (no load), kept on the model
        under `key`: a fixed name, or a name and the few settings the value depends on. A cost
        model is built once per target and asked many times. `make` must be pure; at most
        `_DERIVED_KEPT` values are kept (the settings come from requests)."""
        derived = self._derived
        found = derived.get(key, derived)
        if found is derived:
            if len(derived) >= _DERIVED_KEPT:
                derived.clear()
            found = derived[key] = make()
        return cast("T", found)

    @property
    def request_overhead_s(self) -> float:
        """Latency each request's first token waits outside the steps (engine dispatch of its
        prefill); the roofline has none."""
        return 0.0

    @property
    def kv_window(self) -> tuple[float, int] | None:
        """(share of layers, window tokens) when some layers attend within a window: the
        simulator's KV pool holds only their window (`simulate`); None otherwise."""
        c = self.coefficients
        return (c.window_share, c.window_tokens) if c.window_share else None

    @property
    def peak_flops_per_s(self) -> float:
        """Datasheet peak of one GPU in the GEMMs' compute format."""
        return self.gpu.peak(self.gemm_dtype)

    def seconds(self, load: StepLoad) -> float:
        """Seconds one forward step of `load` takes (equal to `breakdown(load).total_s`)."""
        return self.step_seconds_function()(*load)  # a StepLoad is the arguments, in order

    def step_seconds(  # noqa: PLR0917 - positional: StepLoad's fields, in search loops
        self,
        prefill_tokens: int,
        prefill_chunks: int,
        prefill_attention_pairs: float,
        prefill_kv_tokens: int,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> float:
        """`seconds` of the `StepLoad` with these fields, without building it (for searches
        that time many candidate steps)."""
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        replica_tokens = tokens  # what the experts, spread over tp x dp GPUs, see
        if self._dp > 1 or self._windowed:
            (
                prefill_tokens,
                prefill_chunks,
                prefill_attention_pairs,
                prefill_kv_tokens,
                decode_seqs,
                decode_context_tokens,
            ) = self._rank_view(  # type: ignore[assignment]
                prefill_tokens,
                prefill_chunks,
                prefill_attention_pairs,
                prefill_kv_tokens,
                decode_seqs,
                decode_context_tokens,
            )
            tokens = prefill_tokens + decode_seqs
            total = self._linear_seconds(tokens, replica_tokens, prefill_chunks + decode_seqs)
        elif tokens.__class__ is int and prefill_chunks.__class__ is int:
            # Whole counts (what the simulator passes): memoised, the same floats.
            total = self._rows_seconds(tokens) + self._head_seconds(prefill_chunks + decode_seqs)
        else:
            total = self._linear_seconds(tokens, replica_tokens, prefill_chunks + decode_seqs)
        if prefill_tokens > 0:
            total += max(
                prefill_attention_pairs * self._pair_c + prefill_kv_tokens * self._expand_c,
                prefill_tokens * self._qo_kv_s + prefill_kv_tokens * self._kv_s,
            )
        if decode_seqs > 0:
            total += max(
                decode_context_tokens * self._decode_pair_c + decode_seqs * self._absorb_c,
                decode_seqs * self._decode_qo_kv_s + decode_context_tokens * self._kv_s,
            )
        if self._has_layout_comm:
            return (
                total
                + tokens * self._comm_s_per_token
                + self._comm_latency_s
                + self._layout_seconds(replica_tokens)
                + self._overhead_s
            )
        # `_layout_seconds` is 0.0 here, and adding 0.0 to a positive sum changes nothing.
        return total + tokens * self._comm_s_per_token + self._comm_latency_s + self._overhead_s

    def step_seconds_function(self) -> Callable[[int, int, float, int, int, int], float]:
        """`step_seconds` for whole counts as a closure over this model's constants: the same
        floats in the same order, about twice as fast (the simulator times each step that
        has prefill work with it, and searches their candidate steps). `step_seconds` itself
        for a subclass that overrides it and for layouts with data-parallel ranks, windowed
        layers or communication beyond TP. Built once per model."""
        function = self._step_function
        if function is None:
            function = self._step_function = self._step_seconds_function()
        return function

    def _step_seconds_function(self) -> Callable[[int, int, float, int, int, int], float]:
        if (
            type(self).step_seconds is not StepCostModel.step_seconds
            or self._dp > 1
            or self._windowed
            or self._has_layout_comm
        ):
            return self.step_seconds
        rows_memo, rows = self._rows_memo, self._rows_seconds
        head_memo, head = self._head_memo, self._head_seconds
        pair_c, expand_c, qo_kv_s, kv_s = self._pair_c, self._expand_c, self._qo_kv_s, self._kv_s
        decode_pair_c, absorb_c = self._decode_pair_c, self._absorb_c
        decode_qo_kv_s = self._decode_qo_kv_s
        comm_s_per_token, comm_latency_s = self._comm_s_per_token, self._comm_latency_s
        overhead_s = self._overhead_s

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
            total = rows_memo.get(tokens)
            if total is None:
                total = rows(tokens)
            sequences = prefill_chunks + decode_seqs
            lm_s = head_memo.get(sequences)
            total += head(sequences) if lm_s is None else lm_s
            # `max(a, b)` written out (a branch is cheaper than the call): a unless b > a.
            if prefill_tokens > 0:
                compute = prefill_attention_pairs * pair_c + prefill_kv_tokens * expand_c
                memory = prefill_tokens * qo_kv_s + prefill_kv_tokens * kv_s
                total += memory if memory > compute else compute
            if decode_seqs > 0:
                compute = decode_context_tokens * decode_pair_c + decode_seqs * absorb_c
                memory = decode_seqs * decode_qo_kv_s + decode_context_tokens * kv_s
                total += memory if memory > compute else compute
            return total + tokens * comm_s_per_token + comm_latency_s + overhead_s

        return step_seconds

    def _linear_seconds(self, tokens: float, replica_tokens: float, sequences: float) -> float:
        """The linear op classes (QKV, O, FFN, MoE) of `tokens` rows and the LM head of
        `sequences`, summed in `step_seconds`' order (`replica_tokens`: the experts')."""
        total = max(tokens * self._qkv_c, self._qkv_w + tokens * self._qkv_a)
        total += max(tokens * self._o_c, self._o_w + tokens * self._o_a)
        if self._has_ffn:
            total += max(tokens * self._ffn_c, self._ffn_w + tokens * self._ffn_a)
        if self._has_moe:
            total += max(tokens * self._router_c, self._router_w + tokens * self._router_a)
            total += self._experts_seconds(replica_tokens)
        if sequences > 0:
            total += max(sequences * self._lm_c, self._lm_w + sequences * self._lm_a)
        return total

    def _rows_seconds(self, tokens: int) -> float:
        """`_linear_seconds(tokens, tokens, 0)` (no data-parallel ranks), memoised."""
        memo = self._rows_memo
        total = memo.get(tokens)
        if total is None:
            if len(memo) >= _MEMO_SIZE:
                memo.clear()  # bounded; a run's steps span a few thousand token counts
            total = memo[tokens] = self._linear_seconds(tokens, tokens, 0)
        return total

    def _head_seconds(self, sequences: int) -> float:
        """The LM head of `sequences` (0 s for none), memoised: `_linear_seconds` adds it
        last, so `_rows_seconds(t) + _head_seconds(s)` is the same float."""
        memo = self._head_memo
        head_s = memo.get(sequences)
        if head_s is None:
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            head_s = 0.0
            if sequences > 0:
                head_s = max(sequences * self._lm_c, self._lm_w + sequences * self._lm_a)
            memo[sequences] = head_s
        return head_s

    def _rank_view(  # noqa: PLR0917 - positional: StepLoad's fields, in step loops
        self,
        prefill_tokens: float,
        prefill_chunks: float,
        prefill_attention_pairs: float,
        prefill_kv_tokens: float,
        decode_seqs: float,
        decode_context_tokens: float,
    ) -> tuple[float, float, float, float, float, float]:
        """The step fields one attention data-parallel rank runs (its share of the sequences;
        fractional counts are averages), with the windowed layers' bound applied: what the op
        classes are timed on (`step_seconds`, and the profiled timer's)."""
        if self._dp > 1:
            share = 1.0 / self._dp
            prefill_tokens *= share
            prefill_chunks *= share
            prefill_attention_pairs *= share
            prefill_kv_tokens *= share
            decode_seqs *= share
            decode_context_tokens *= share
        if self._windowed:
            prefill_attention_pairs, prefill_kv_tokens, decode_context_tokens = bounded_by_window(
                self.coefficients,
                prefill_tokens,  # type: ignore[arg-type]
                prefill_chunks,  # type: ignore[arg-type]
                prefill_attention_pairs,
                prefill_kv_tokens,
                decode_seqs,  # type: ignore[arg-type]
                decode_context_tokens,
            )
        return (
            prefill_tokens,
            prefill_chunks,
            prefill_attention_pairs,
            prefill_kv_tokens,
            decode_seqs,
            decode_context_tokens,
        )

    def _straggler(self, replica_tokens: float) -> float:
        """Under ep, the busiest GPU's routed work over the mean: the traffic's skew
        (`Deployment.imbalance`) times the randomness of routing few tokens
        (`straggler_factor`), which dominates small decode batches. 1 without ep."""
        if self.deployment.ep == 1:
            return 1.0
        picks = round(replica_tokens) * self._experts_per_token
        return self._imbalance * straggler_factor(picks, self.deployment.ep)

    def _experts_seconds(self, replica_tokens: float) -> float:
        """The routed and shared experts of the whole replica's tokens on one of the tp x dp
        GPUs they are spread over; under ep the busiest GPU sets the pace."""
        distinct = expected_distinct_experts(
            self._num_experts, self._experts_per_token, replica_tokens
        )
        return self._straggler(replica_tokens) * max(
            replica_tokens * self._exp_c,
            distinct * self._exp_w + self._exp_shared + replica_tokens * self._exp_a,
        )

    def _layout_seconds(self, replica_tokens: float) -> float:
        """Expert all-to-alls or all-reduces beyond the TP group, and the pipeline's
        activation hand-offs, of one step (0 for a plain tp layout)."""
        if not self._has_layout_comm:
            return 0.0
        return (
            replica_tokens * self._layout_s_per_token
            + replica_tokens / self._dp * self._stage_s_per_token
            + self._layout_latency_s
        )

    def communication_seconds(self, load: StepLoad) -> float:
        """The all-reduces, expert exchanges and stage hand-offs of one step
        (`breakdown(load).communication_s`)."""
        tokens = load.prefill_tokens + load.decode_seqs
        if tokens <= 0:
            return 0.0
        per_rank = tokens / self._dp
        return (
            per_rank * self._comm_s_per_token + self._comm_latency_s + self._layout_seconds(tokens)
        )

    def breakdown(self, load: StepLoad) -> StepTime:
        """Per-op-class compute and memory seconds of one step, plus communication and
        overhead (one GPU; `total_s == seconds(load)`)."""
        timed = self._op_times(load)
        if timed is None:
            return StepTime((), 0.0, 0.0)
        rows, communication_s, overhead_s = timed
        return StepTime(tuple(starmap(OpTime, rows)), communication_s, overhead_s)

    def time_totals(self, load: StepLoad) -> TimeTotals:
        """`breakdown(load)` summed: its compute, memory and total seconds, the same floats,
        without building the per-op-class records (what an estimate reports of a step)."""
        timed = self._op_times(load)
        if timed is None:
            return TimeTotals.of((), 0.0, 0.0)
        return TimeTotals.of(*timed)

    def _op_times(self, load: StepLoad) -> tuple[list[OpTimeRow], float, float] | None:
        """`breakdown(load)`'s op classes as `OpTimeRow`s, its communication and its overhead
        seconds; None for an empty step."""
        tokens = load.prefill_tokens + load.decode_seqs
        if tokens <= 0:
            return None
        communication_s = self.communication_seconds(load)
        replica_tokens = tokens
        load = per_rank(load, self._dp)
        tokens = load.prefill_tokens + load.decode_seqs
        sequences = load.prefill_chunks + load.decode_seqs
        rows: list[OpTimeRow] = [
            (_QKV_PROJ, tokens * self._qkv_c, self._qkv_w + tokens * self._qkv_a),
            (_O_PROJ, tokens * self._o_c, self._o_w + tokens * self._o_a),
        ]
        if self._has_ffn:
            rows.append((_FFN, tokens * self._ffn_c, self._ffn_w + tokens * self._ffn_a))
        if self._has_moe:
            distinct = expected_distinct_experts(
                self._num_experts, self._experts_per_token, replica_tokens
            )
            rows.append(
                (
                    _MOE_ROUTER,
                    tokens * self._router_c,
                    self._router_w + tokens * self._router_a,
                )
            )
            straggler = self._straggler(replica_tokens)
            rows.append(
                (
                    _MOE_EXPERTS,
                    straggler * replica_tokens * self._exp_c,
                    straggler
                    * (distinct * self._exp_w + self._exp_shared + replica_tokens * self._exp_a),
                )
            )
        if sequences > 0:
            rows.append((_LM_HEAD, sequences * self._lm_c, self._lm_w + sequences * self._lm_a))
        pairs, kv_tokens, context = window_bounded(self.coefficients, load)
        if load.prefill_tokens > 0:
            rows.append(
                (
                    _PREFILL_ATTENTION,
                    pairs * self._pair_c + kv_tokens * self._expand_c,
                    load.prefill_tokens * self._qo_kv_s + kv_tokens * self._kv_s,
                )
            )
        if load.decode_seqs > 0:
            rows.append(
                (
                    _DECODE_ATTENTION,
                    context * self._decode_pair_c + load.decode_seqs * self._absorb_c,
                    load.decode_seqs * self._decode_qo_kv_s + context * self._kv_s,
                )
            )
        return rows, communication_s, self._overhead_s

    def sum_seconds(self, first: StepLoad, step: StepLoad, count: int) -> float:
        """Sum of `seconds(first + j * step)` for j in 0..count-1, exactly, in O(1).

        Only the attention fields of `step` may be non-zero (pairs, KV tokens, decode context):
        the loads of a chunked prefill or of successive decode steps. Each step's time is then
        piecewise linear in j, with a kink where an attention op class turns from memory- to
        compute-bound; on each linear piece the sum is count * (first + last) / 2.
        """
        if count <= 0:
            return 0.0
        if step.prefill_tokens or step.prefill_chunks or step.decode_seqs:
            raise ValueError("sum_seconds: only attention fields of `step` may vary")
        if self._windowed and self._window_binds(first, step, count):
            # The window's bound adds kinks that move the compute/memory crossings: sum step by
            # step (a microsecond each), or by the trapezoid rule over very long runs.
            return trapezoid_sum(self.step_seconds, first, step, count, exact_up_to=4096)
        tokens, chunks, seqs = first.prefill_tokens, first.prefill_chunks, first.decode_seqs
        pairs, kv_tokens, context = (
            first.prefill_attention_pairs,
            first.prefill_kv_tokens,
            first.decode_context_tokens,
        )
        pairs_step, kv_step, context_step = (
            step.prefill_attention_pairs,
            step.prefill_kv_tokens,
            step.decode_context_tokens,
        )
        kinks: set[int] = set()
        prefill_line = (
            pairs * self._pair_c + kv_tokens * self._expand_c,
            pairs_step * self._pair_c + kv_step * self._expand_c,
            tokens * self._qo_kv_s + kv_tokens * self._kv_s,
            kv_step * self._kv_s,
        )
        decode_line = (
            context * self._decode_pair_c + seqs * self._absorb_c,
            context_step * self._decode_pair_c,
            seqs * self._decode_qo_kv_s + context * self._kv_s,
            context_step * self._kv_s,
        )
        for compute0, compute_slope, memory0, memory_slope in (prefill_line, decode_line):
            if compute_slope != memory_slope:
                crossing = (memory0 - compute0) / (compute_slope - memory_slope)
                if 0.0 <= crossing < count - 1:
                    kinks.add(math.floor(crossing))
        step_seconds = self.step_seconds_function()
        total, start = 0.0, 0
        for end in [*sorted(kinks), count - 1]:
            if end < start:
                continue
            edge_sum = step_seconds(
                tokens,
                chunks,
                pairs + start * pairs_step,
                kv_tokens + start * kv_step,
                seqs,
                context + start * context_step,
            ) + step_seconds(
                tokens,
                chunks,
                pairs + end * pairs_step,
                kv_tokens + end * kv_step,
                seqs,
                context + end * context_step,
            )
            total += (end - start + 1) * edge_sum / 2.0
            start = end + 1
        return total

    def _window_binds(self, first: StepLoad, step: StepLoad, count: int) -> bool:
        """Whether the window bounds any step of `first + j * step` (the attention fields only
        grow with j, so the last step tells)."""
        window, last = self.coefficients.window_tokens, count - 1
        return (
            first.prefill_attention_pairs + last * step.prefill_attention_pairs
            > first.prefill_tokens * window
            or first.prefill_kv_tokens + last * step.prefill_kv_tokens
            > first.prefill_chunks * window
            or first.decode_context_tokens + last * step.decode_context_tokens
            > first.decode_seqs * window
        )

    def count(self, load: StepLoad, *, steps: int = 1) -> StepCount:
        """FLOPs and bytes of `load` across the whole deployment (see `counting.count_step`)."""
        return count_step(self.coefficients, load, steps=steps)

    def count_totals(
        self, load: StepLoad, *, steps: int = 1, then: StepLoad | None = None
    ) -> CountTotals:
        """`count(load, steps=steps)` summed by kind, with one more step `then` when given
        (see `counting.count_totals`)."""
        return count_totals(self.coefficients, load, steps=steps, then=then)

    def bound_of(self, totals: CountTotals) -> Bound:
        """Compute-bound when the counted FLOPs at this GPU's (efficient) rates take at least as
        long as the counted bytes at its (efficient) bandwidth: the GEMMs at the weights'
        format, the router and LM head at the activations', attention at its own."""
        per_gpu = 1.0 / self.deployment.tp
        activation_flops = totals.router_flops + totals.lm_head_flops
        compute_s = (
            (totals.linear_flops - totals.router_flops) * per_gpu / self._gemm_rate
            + activation_flops * per_gpu / self._activation_rate
            + totals.attention_flops * per_gpu / self._attention_rate
        )
        memory_s = totals.bytes * per_gpu / self._bandwidth
        return Bound.COMPUTE if compute_s >= memory_s else Bound.MEMORY


_SUM_SEGMENTS = 16


def trapezoid_sum(
    step_seconds: Callable[[int, int, float, int, int, int], float],
    first: StepLoad,
    step: StepLoad,
    count: int,
    *,
    exact_up_to: int = _SUM_SEGMENTS + 1,
) -> float:
    """Sum of the step times of `first + j * step` for j in 0..count-1: step by step up to
    `exact_up_to` steps, else the trapezoid rule over 16 segments plus the end correction (for
    step times smooth or piecewise linear in j: within 0.1 % of step by step)."""

    tokens, chunks, seqs = first.prefill_tokens, first.prefill_chunks, first.decode_seqs
    pairs, kv_tokens, context = (
        first.prefill_attention_pairs,
        first.prefill_kv_tokens,
        first.decode_context_tokens,
    )
    pairs_step, kv_step, context_step = (
        step.prefill_attention_pairs,
        step.prefill_kv_tokens,
        step.decode_context_tokens,
    )

    def at(j: int) -> float:
        return step_seconds(
            tokens,
            chunks,
            pairs + j * pairs_step,
            kv_tokens + j * kv_step,
            seqs,
            context + j * context_step,
        )

    if count <= max(exact_up_to, _SUM_SEGMENTS + 1):
        return sum(map(at, range(count)))
    last = count - 1
    # More than 16 steps: the marks are over one step apart, so distinct and increasing.
    marks = [round(i * last / _SUM_SEGMENTS) for i in range(_SUM_SEGMENTS + 1)]
    values = list(map(at, marks))
    integral = sum(
        (b - a) * (fa + fb) / 2.0
        for a, b, fa, fb in zip(marks, marks[1:], values, values[1:], strict=False)
    )
    return integral + (values[0] + values[-1]) / 2.0


def per_rank(load: StepLoad, dp: int) -> StepLoad:
    """The share of `load` one of `dp` attention data-parallel ranks runs (sequences spread
    evenly; fractional counts are averages)."""
    if dp == 1:
        return load
    return StepLoad(
        prefill_tokens=load.prefill_tokens / dp,  # type: ignore[arg-type]
        prefill_chunks=load.prefill_chunks / dp,  # type: ignore[arg-type]
        prefill_attention_pairs=load.prefill_attention_pairs / dp,
        prefill_kv_tokens=load.prefill_kv_tokens / dp,  # type: ignore[arg-type]
        decode_seqs=load.decode_seqs / dp,  # type: ignore[arg-type]
        decode_context_tokens=load.decode_context_tokens / dp,  # type: ignore[arg-type]
    )


def layout_communication(
    model: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment,
    efficiency: Efficiency,
    c: OpCoefficients,
) -> tuple[float, float, float]:
    """(seconds per replica token, seconds per step, seconds per rank token) of the exchanges a
    layout adds to the TP all-reduces, over the link tier each group of GPUs reaches:

    - ep: per MoE layer a dispatch and a combine all-to-all; each GPU sends its 1/(tp x dp)
      share of the tokens to k experts, (ep - 1)/ep of them elsewhere: 2 x k x d x
      activation bytes x (ep - 1)/ep per token over the one-way link, plus two latencies;
    - dp without ep: per MoE layer the tokens of all ranks meet the tensor-sliced experts, an
      all-reduce of d per replica token over the tp x dp GPUs;
    - pp: (pp - 1) hand-offs of d per token of a rank between consecutive stages.
    """
    act_b = BYTES_PER_ELEMENT[deployment.activation_dtype]
    d, link = model.hidden_size, gpu.interconnect
    shards, moe_layers = c.expert_shards, c.moe_layers
    per_token = latency = 0.0
    if moe_layers and deployment.ep > 1:
        tier = link.tier(shards)
        bandwidth = tier.unidirectional_bytes_per_s * efficiency.communication
        ep = deployment.ep
        per_token = 2.0 * c.experts_per_token * d * act_b * (ep - 1) / ep / shards / bandwidth
        per_token *= moe_layers
        latency = 2.0 * tier.latency_s * moe_layers
    elif moe_layers and shards > deployment.tp:
        tier = link.tier(shards)
        step = allreduce_seconds(0.0, shards, tier, efficiency)
        per_token = (allreduce_seconds(d * act_b, shards, tier, efficiency) - step) * moe_layers
        latency = step * moe_layers
    stage = 0.0
    if deployment.pp > 1:
        tier = link.tier(deployment.gpus)
        bandwidth = tier.unidirectional_bytes_per_s * efficiency.communication
        stage = (deployment.pp - 1) * d * act_b / bandwidth
        latency += (deployment.pp - 1) * tier.latency_s
    return per_token, latency, stage
