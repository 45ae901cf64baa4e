"""Latency estimates: prefill (TTFT), the prefill curve, decode (TPOT), a whole request, and the
batch ceiling. Each takes a `StepCostModel` (built once per model, GPU, deployment and
efficiency) and returns a frozen result that carries every number the HTTP layer returns.

Work (`flops`, `bytes`) is for the whole deployment (all GPUs); times are wall-clock for the TP
group. Impossible input raises `SpecError` naming the request field; allowed but unwise input
comes back in `warnings`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.counting import CountTotals, kv_slots, op_coefficients, pairs_for_chunk
from app.engine.memory import DEFAULT_BLOCK_TOKENS, MemoryPlan, memory_plan, weight_fit_warnings
from app.engine.specs import SpecError, positive, within_context
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from app.engine.timing import Bound
from app.engine.units import GB, MS_PER_S

__all__ = [
    "MAX_CURVE_POINTS",
    "BytesBreakdown",
    "CurvePoint",
    "DecodeEstimate",
    "FlopsBreakdown",
    "PrefillCurve",
    "PrefillEstimate",
    "RequestEstimate",
    "crossover_tokens",
    "default_memory_plan",
    "deployment_warnings",
    "estimate_decode",
    "estimate_prefill",
    "estimate_request",
    "prefill_curve",
    "prefill_seconds",
]

MAX_CURVE_POINTS = 10_000


@dataclass(frozen=True, slots=True)
class FlopsBreakdown:
    """FLOPs by kind, whole deployment. `linear`: QKV, O, FFN, router and experts."""

    linear: float
    attention: float
    lm_head: float

    @property
    def total(self) -> float:
        return self.linear + self.attention + self.lm_head


@dataclass(frozen=True, slots=True)
class BytesBreakdown:
    """Bytes moved to or from GPU memory, whole deployment."""

    weights: float
    kv_cache: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations


def _flops(counts: CountTotals) -> FlopsBreakdown:
    return FlopsBreakdown(counts.linear_flops, counts.attention_flops, counts.lm_head_flops)


def _bytes(counts: CountTotals) -> BytesBreakdown:
    return BytesBreakdown(counts.weight_bytes, counts.kv_bytes, counts.activation_bytes)


def default_memory_plan(cost: StepCostModel) -> MemoryPlan:
    """`memory_plan` of the cost model's model, GPU and deployment at the default utilisation
    and reserve sizes, worked out once per cost model (`StepCostModel.derived`)."""
    return cost.derived("memory_plan", lambda: memory_plan(cost.model, cost.gpu, cost.deployment))


def deployment_warnings(cost: StepCostModel) -> list[str]:
    """What every estimate of this deployment says besides its figures: weights that do not
    fit the GPU (`weight_fit_warnings`), KV heads or an MLA latent replicated by tp, groups of
    GPUs that span link domains. Worked out once per cost model (`StepCostModel.derived`)."""
    return list(cost.derived("deployment_warnings", lambda: tuple(_deployment_warnings(cost))))


def _deployment_warnings(cost: StepCostModel) -> list[str]:
    model, deployment = cost.model, cost.deployment
    tp = deployment.tp
    warnings = weight_fit_warnings(model, cost.gpu, deployment)
    if model.mla is not None and tp > 1:
        warnings.append(
            f"MLA: every one of the {tp} GPUs of the TP group caches the whole latent KV of "
            "every sequence; attention data parallelism (dp, with ep for the experts) caches "
            "each sequence once"
        )
    elif tp > model.num_kv_heads:
        warnings.append(
            f"tp {tp} exceeds the model's {model.num_kv_heads} KV heads: each KV head is "
            f"replicated {tp // model.num_kv_heads} times, multiplying KV-cache memory and reads"
        )
    domain = cost.gpu.interconnect.domain_size
    if tp > domain:
        warnings.append(
            f"tp {tp} spans {-(-tp // domain)} link domains of {domain} GPUs: its all-reduces "
            "run over the scale-out network, two per layer; keep tp within a domain and use pp "
            "or ep across domains"
        )
    elif deployment.gpus > domain:
        warnings.append(
            f"the replica's {deployment.gpus} GPUs span {-(-deployment.gpus // domain)} link "
            f"domains of {domain}: "
            + ("the expert exchanges" if deployment.expert_shards > domain else "stage hand-offs")
            + " cross the scale-out network"
        )
    return warnings


def crossover_tokens(cost: StepCostModel, *, causal: bool = True) -> int:
    """Prompt length at which attention FLOPs equal linear FLOPs (article A: 6d for MHA with a
    4d MLP, non-causal). Non-causal a*n^2 = l*n gives n = l/a; causal a*n(n+1)/2 = l*n gives
    n = 2l/a - 1, with l the linear FLOPs per token and a the attention FLOPs per pair. Worked
    out once per cost model (`StepCostModel.derived`)."""
    name = "crossover_tokens" if causal else "crossover_tokens_non_causal"
    return cost.derived(name, lambda: _crossover_tokens(cost, causal=causal))


def _crossover_tokens(cost: StepCostModel, *, causal: bool) -> int:
    # The model's own ratio (tp 1): replicated KV projections beyond tp > K are not the model's.
    c = cost.coefficients
    if c.tp != 1:
        c = op_coefficients(cost.model, cost.deployment.single_gpu(), cost.attention_dtype)
    ratio = c.linear_flops_per_token / c.attention_flops_per_pair
    return round(2.0 * ratio - 1.0 if causal else ratio)


def _chunked_loads(
    new_tokens: int,
    chunk_tokens: int,
    batch_size: int,
    cached_tokens: int,
    *,
    causal: bool,
    decode_seqs: int,
    decode_context_tokens: int,
) -> tuple[StepLoad, StepLoad, int, StepLoad | None]:
    """(first full chunk, per-chunk increment, number of full chunks, remainder chunk), each
    beside `decode_seqs` decodes attending over `decode_context_tokens` in all at the first
    step, whose contexts grow by one token per step."""
    full, rest = divmod(new_tokens, chunk_tokens)
    first = prefill_load(
        chunk_tokens,
        batch_size=batch_size,
        cached_tokens=cached_tokens,
        causal=causal,
        decode_seqs=decode_seqs,
        decode_context_tokens=decode_context_tokens,
    )
    # Each later chunk sits chunk_tokens deeper: chunk^2 more pairs, chunk more KV tokens.
    step = StepLoad(
        prefill_attention_pairs=float(batch_size * chunk_tokens * chunk_tokens),
        prefill_kv_tokens=batch_size * chunk_tokens,
        decode_context_tokens=decode_seqs,
    )
    remainder = None
    if rest:
        # The decodes, `full` steps on: each context `full` tokens longer.
        remainder = prefill_load(
            rest,
            batch_size=batch_size,
            cached_tokens=cached_tokens + full * chunk_tokens,
            causal=causal,
            decode_seqs=decode_seqs,
            decode_context_tokens=decode_context_tokens + full * decode_seqs,
        )
    return first, step, full, remainder


def prefill_seconds(
    cost: StepCostModel,
    prompt_tokens: int,
    *,
    batch_size: int = 1,
    cached_prefix_tokens: int = 0,
    chunk_tokens: int | None = None,
    causal: bool = True,
    decode: StepLoad | None = None,
) -> tuple[float, int]:
    """(seconds, steps) to prefill `batch_size` prompts, in chunks when `chunk_tokens` is set,
    optionally beside a running decode batch (`decode`'s decode fields) whose contexts grow by
    one token per step; the seconds include the engine's per-request overhead
    (`request_overhead_s`)."""
    new = prompt_tokens - cached_prefix_tokens
    seqs, context = (0, 0) if decode is None else (decode.decode_seqs, decode.decode_context_tokens)
    if chunk_tokens is None or chunk_tokens >= new:
        # One step: the whole prompt beside the decodes.
        whole = prefill_load(
            new,
            batch_size=batch_size,
            cached_tokens=cached_prefix_tokens,
            causal=causal,
            decode_seqs=seqs,
            decode_context_tokens=context,
        )
        return cost.seconds(whole) + cost.request_overhead_s, 1
    first, step, full, remainder = _chunked_loads(
        new,
        chunk_tokens,
        batch_size,
        cached_prefix_tokens,
        causal=causal,
        decode_seqs=seqs,
        decode_context_tokens=context,
    )
    seconds = cost.sum_seconds(first, step, full) + cost.request_overhead_s
    if remainder is not None:
        seconds += cost.seconds(remainder)
    return seconds, full + (remainder is not None)


@dataclass(frozen=True, slots=True)
class PrefillEstimate:
    """Time to first token of `batch_size` prompts prefilled together."""

    ttft_ms: float
    flops: FlopsBreakdown
    bytes: BytesBreakdown
    bound: Bound
    arithmetic_intensity: float
    """FLOP per byte of the whole prefill."""
    attention_share: float
    """Attention FLOPs over all FLOPs."""
    crossover_tokens: int
    prompt_tokens: int
    batch_size: int
    cached_prefix_tokens: int
    chunk_tokens: int | None
    steps: int
    causal: bool
    warnings: tuple[str, ...] = ()


def estimate_prefill(
    cost: StepCostModel,
    *,
    prompt_tokens: int,
    batch_size: int = 1,
    cached_prefix_tokens: int = 0,
    chunk_tokens: int | None = None,
    causal: bool = True,
) -> PrefillEstimate:
    """TTFT: one forward step over the new tokens, or the sum of the chunked steps."""
    _check_prefill(cost, prompt_tokens, batch_size, cached_prefix_tokens, chunk_tokens)
    seconds, steps = prefill_seconds(
        cost,
        prompt_tokens,
        batch_size=batch_size,
        cached_prefix_tokens=cached_prefix_tokens,
        chunk_tokens=chunk_tokens,
        causal=causal,
    )
    new = prompt_tokens - cached_prefix_tokens
    if chunk_tokens is None or chunk_tokens >= new:
        counts = cost.count_totals(
            prefill_load(
                new, batch_size=batch_size, cached_tokens=cached_prefix_tokens, causal=causal
            )
        )
    else:
        first, step, full, remainder = _chunked_loads(
            new,
            chunk_tokens,
            batch_size,
            cached_prefix_tokens,
            causal=causal,
            decode_seqs=0,
            decode_context_tokens=0,
        )
        triangle = full * (full - 1) // 2  # sum of j for j < full
        total = StepLoad(
            prefill_tokens=full * first.prefill_tokens,
            prefill_chunks=full * first.prefill_chunks,
            prefill_attention_pairs=full * first.prefill_attention_pairs
            + triangle * step.prefill_attention_pairs,
            prefill_kv_tokens=full * first.prefill_kv_tokens + triangle * step.prefill_kv_tokens,
        )
        counts = cost.count_totals(total, steps=full, then=remainder)
    crossover = crossover_tokens(cost, causal=causal)
    warnings = _prefill_warnings(cost, prompt_tokens, crossover)
    flops = _flops(counts)
    return PrefillEstimate(
        ttft_ms=seconds * MS_PER_S,
        flops=flops,
        bytes=_bytes(counts),
        bound=cost.bound_of(counts),
        arithmetic_intensity=counts.arithmetic_intensity,
        attention_share=flops.attention / flops.total,
        crossover_tokens=crossover,
        prompt_tokens=prompt_tokens,
        batch_size=batch_size,
        cached_prefix_tokens=cached_prefix_tokens,
        chunk_tokens=chunk_tokens,
        steps=steps,
        causal=causal,
        warnings=tuple(warnings),
    )


def _check_prefill(
    cost: StepCostModel,
    prompt_tokens: int,
    batch_size: int,
    cached_prefix_tokens: int,
    chunk_tokens: int | None,
) -> None:
    """`SpecError` naming the first impossible input of `estimate_prefill`."""
    positive("prompt_tokens", prompt_tokens)
    positive("batch_size", batch_size)
    within_context(cost.model, "prompt_tokens", prompt_tokens)
    if not 0 <= cached_prefix_tokens < prompt_tokens:
        raise SpecError(
            "cached_prefix_tokens",
            f"must be in [0, prompt_tokens) = [0, {prompt_tokens}), got {cached_prefix_tokens}",
        )
    if chunk_tokens is not None:
        positive("chunk_tokens", chunk_tokens)


def _prefill_warnings(cost: StepCostModel, prompt_tokens: int, crossover: int) -> list[str]:
    """`estimate_prefill`'s warnings: the deployment's, and a prompt past the crossover."""
    warnings = deployment_warnings(cost)
    if prompt_tokens > crossover:
        warnings.append(
            f"{prompt_tokens} tokens is past the {crossover}-token crossover: attention is most "
            "of the work and TTFT grows about quadratically with the prompt"
        )
    return warnings


@dataclass(frozen=True, slots=True)
class CurvePoint:
    prompt_tokens: int
    ttft_ms: float
    attention_share: float
    ratio_to_previous: float | None
    """TTFT over the previous point's TTFT; None for the first point."""
    loglog_slope: float | None
    """d log TTFT / d log n against the previous point; None for the first point or equal n."""


@dataclass(frozen=True, slots=True)
class PrefillCurve:
    points: tuple[CurvePoint, ...]
    crossover_tokens: int
    warnings: tuple[str, ...] = ()


def prefill_curve(
    cost: StepCostModel,
    prompt_tokens: Sequence[int],
    *,
    batch_size: int = 1,
    chunk_tokens: int | None = None,
    causal: bool = True,
) -> PrefillCurve:
    """TTFT at each prompt length, in the order given (O(1) per point)."""
    if not prompt_tokens:
        raise SpecError("prompt_tokens", "needs at least one length")
    if len(prompt_tokens) > MAX_CURVE_POINTS:
        raise SpecError("prompt_tokens", f"at most {MAX_CURVE_POINTS} points")
    positive("batch_size", batch_size)
    if chunk_tokens is not None:
        positive("chunk_tokens", chunk_tokens)
    for n in prompt_tokens:
        positive("prompt_tokens", n)
        within_context(cost.model, "prompt_tokens", n)
    c = cost.coefficients
    points: list[CurvePoint] = []
    previous: tuple[int, float] | None = None
    for n in prompt_tokens:
        seconds, _ = prefill_seconds(
            cost, n, batch_size=batch_size, chunk_tokens=chunk_tokens, causal=causal
        )
        # Shares from the per-GPU coefficients: linear per token, attention per pair, LM head.
        attention = c.attention_flops_per_pair * pairs_for_chunk(n, 0, causal=causal)
        total = attention + c.linear_flops_per_token * n + c.lm_head_flops_per_sequence
        ratio = slope = None
        if previous is not None:
            ratio = seconds / previous[1]
            if n != previous[0]:
                slope = math.log(ratio) / math.log(n / previous[0])
        points.append(CurvePoint(n, seconds * MS_PER_S, attention / total, ratio, slope))
        previous = (n, seconds)
    return PrefillCurve(
        tuple(points), crossover_tokens(cost, causal=causal), tuple(deployment_warnings(cost))
    )


@dataclass(frozen=True, slots=True)
class DecodeEstimate:
    """One decode step of `batch_size` sequences, each attending over `context_tokens`."""

    tpot_ms: float
    flops: FlopsBreakdown
    bytes: BytesBreakdown
    arithmetic_intensity: float
    bound: Bound
    compute_utilization: float
    """Achieved FLOP/s over the TP group's peak in the GEMM format."""
    tokens_per_s: float
    communication_share: float
    batch_size: int
    context_tokens: int
    warnings: tuple[str, ...] = ()


def estimate_decode(cost: StepCostModel, *, batch_size: int, context_tokens: int) -> DecodeEstimate:
    """TPOT of one decode step."""
    positive("batch_size", batch_size)
    positive("context_tokens", context_tokens)
    within_context(cost.model, "context_tokens", context_tokens)
    load = decode_load(batch_size, context_tokens)
    step = cost.time_totals(load)
    counts = cost.count_totals(load)
    seconds = step.total_s
    peak = cost.peak_flops_per_s * cost.deployment.tp
    warnings = deployment_warnings(cost)
    plan = default_memory_plan(cost)
    needed = batch_size * (
        kv_slots(cost.model, context_tokens, DEFAULT_BLOCK_TOKENS) * plan.kv_bytes_per_token
    )
    if needed > plan.kv_pool_bytes:
        warnings.append(
            f"{batch_size} sequences of {context_tokens} tokens need {needed / GB:.1f} GB of KV "
            f"cache per GPU; about {max(plan.kv_pool_bytes, 0.0) / GB:.1f} GB is left after "
            "weights and activations"
        )
    return DecodeEstimate(
        tpot_ms=seconds * MS_PER_S,
        flops=_flops(counts),
        bytes=_bytes(counts),
        arithmetic_intensity=counts.arithmetic_intensity,
        bound=step.bound,
        compute_utilization=counts.flops / seconds / peak,
        tokens_per_s=batch_size / seconds,
        communication_share=step.communication_share,
        batch_size=batch_size,
        context_tokens=context_tokens,
        warnings=tuple(warnings),
    )


@dataclass(frozen=True, slots=True)
class RequestEstimate:
    """End to end: e2e_ms = ttft_ms + (output_tokens - 1) * tpot_ms (article B)."""

    ttft_ms: float
    tpot_ms: float
    """Mean decode step over contexts prompt_tokens .. prompt_tokens + output_tokens - 1."""
    e2e_ms: float
    prompt_tokens: int
    output_tokens: int
    batch_size: int
    warnings: tuple[str, ...] = ()


def estimate_request(
    cost: StepCostModel,
    *,
    prompt_tokens: int,
    output_tokens: int,
    batch_size: int = 1,
    cached_prefix_tokens: int = 0,
    chunk_tokens: int | None = None,
    causal: bool = True,
) -> RequestEstimate:
    """TTFT, mean TPOT and end-to-end latency of `batch_size` identical requests: the TTFT
    and warnings of `estimate_prefill` (without its counts, which a request does not report)."""
    positive("output_tokens", output_tokens)
    _check_prefill(cost, prompt_tokens, batch_size, cached_prefix_tokens, chunk_tokens)
    prefill_s, _ = prefill_seconds(
        cost,
        prompt_tokens,
        batch_size=batch_size,
        cached_prefix_tokens=cached_prefix_tokens,
        chunk_tokens=chunk_tokens,
        causal=causal,
    )
    ttft_ms = prefill_s * MS_PER_S
    warnings = _prefill_warnings(cost, prompt_tokens, crossover_tokens(cost, causal=causal))
    last_context = prompt_tokens + output_tokens - 1
    if last_context > cost.model.max_context_tokens:
        raise SpecError(
            "output_tokens",
            f"prompt plus output ({last_context + 1} tokens) exceeds the model's "
            f"{cost.model.max_context_tokens}-token context",
        )
    # Decode step i attends over prompt + i tokens; the sum over i is exact (piecewise linear).
    total_s = cost.sum_seconds(
        decode_load(batch_size, prompt_tokens),
        StepLoad(decode_context_tokens=batch_size),
        output_tokens,
    )
    tpot_ms = total_s / output_tokens * MS_PER_S
    return RequestEstimate(
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        e2e_ms=ttft_ms + (output_tokens - 1) * tpot_ms,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        batch_size=batch_size,
        warnings=tuple(warnings),
    )
