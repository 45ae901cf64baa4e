"""Chunked-prefill size from latency SLOs.

A continuous-batching step runs the running decodes plus up to one prefill chunk; while it runs,
every decode waits. So the largest usable chunk is the largest whose step (chunk plus the decode
batch) fits the inter-token SLO. The binding step is the deepest chunk of the longest prompt the
pool serves (`long_prompt_tokens`): its attention reads the whole cached prefix. Seed 000's first
cut ignores attention, weights and decodes: `chunk <= T_max * peak / FLOPs_per_token`; we report
it beside ours (`seed_first_cut_tokens`) and agree with it when those terms vanish.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from app.engine.estimates import crossover_tokens, prefill_seconds
from app.engine.specs import SpecError
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from app.engine.units import MS_PER_S

__all__ = [
    "CHUNK_ALIGNMENT_TOKENS",
    "ChunkRecommendation",
    "LengthBucket",
    "LongPromptCost",
    "recommend_chunk_size",
]

CHUNK_ALIGNMENT_TOKENS = 64
_BUCKET_BOUNDS_TOKENS = (4096, 16384, 65536)  # seed 000's buckets (4K, 16K) and one more


@dataclass(frozen=True, slots=True)
class LongPromptCost:
    """What chunking costs the long prompt (each step also runs the decode batch)."""

    prompt_tokens: int
    ttft_ms_unchunked: float
    ttft_ms_chunked: float
    steps: int


@dataclass(frozen=True, slots=True)
class LengthBucket:
    max_prompt_tokens: int
    ttft_slo_ms: float
    """Chunked TTFT at the bucket's longest prompt, rounded up to 1, 2 or 5 times a power of
    ten (no queueing included)."""


@dataclass(frozen=True, slots=True)
class ChunkRecommendation:
    max_chunk_tokens: int
    """Largest chunk whose step fits the SLO at its worst position (0: none does)."""
    recommended_chunk_tokens: int
    """`max_chunk_tokens` rounded down to a multiple of 64 (itself when below 64)."""
    step_ms: float
    """The worst step at the recommended chunk."""
    seed_first_cut_tokens: int
    """Seed 000's T_max * peak / FLOPs_per_token (datasheet peak, linear FLOPs only)."""
    long_prompt: LongPromptCost
    length_buckets: tuple[LengthBucket, ...]
    route_long_prompts_above_tokens: int
    rationale: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def _nice_ceiling(value: float) -> float:
    """Smallest 1, 2 or 5 times a power of ten that is >= value."""
    if value <= 0:
        return 0.0
    exponent = math.floor(math.log10(value))
    for mantissa in (1.0, 2.0, 5.0, 10.0):
        candidate = mantissa * 10.0**exponent
        if candidate >= value * (1 - 1e-12):
            return candidate
    return 10.0 ** (exponent + 1)


def _last_true(limit: int, ok: Callable[[int], bool]) -> int:
    """Largest n in [1, limit] with ok(n), for ok true up to some n and false after; 0 when
    ok(1) is false (bisection)."""
    if ok(limit):
        return limit
    low, high = 0, limit
    while high - low > 1:
        middle = (low + high) // 2
        if ok(middle):
            low = middle
        else:
            high = middle
    return low


DEFAULT_LONG_PROMPT_TOKENS = 32768  # the default long prompt


def recommend_chunk_size(
    cost: StepCostModel,
    *,
    itl_slo_ms: float,
    short_ttft_slo_ms: float | None = None,
    decode_batch_size: int = 0,
    decode_context_tokens: int = 0,
    long_prompt_tokens: int | None = None,
) -> ChunkRecommendation:
    """Chunk size for a deployment whose running decodes must not stall beyond `itl_slo_ms`.

    `long_prompt_tokens` defaults to 32,768 or the model's context, whichever is shorter.
    """
    model = cost.model
    limit = model.max_context_tokens
    if long_prompt_tokens is None:
        long_prompt_tokens = min(DEFAULT_LONG_PROMPT_TOKENS, limit)
    if itl_slo_ms <= 0:
        raise SpecError("itl_slo_ms", f"must be positive, got {itl_slo_ms}")
    if short_ttft_slo_ms is not None and short_ttft_slo_ms <= 0:
        raise SpecError("short_ttft_slo_ms", f"must be positive, got {short_ttft_slo_ms}")
    if decode_batch_size < 0:
        raise SpecError("decode_batch_size", f"must not be negative, got {decode_batch_size}")
    if decode_batch_size > 0 and decode_context_tokens <= 0:
        raise SpecError("decode_context_tokens", "must be positive when decodes are running")
    if decode_context_tokens > limit:
        raise SpecError("decode_context_tokens", f"exceeds the model's {limit}-token context")
    if not 0 < long_prompt_tokens <= limit:
        raise SpecError("long_prompt_tokens", f"must be in [1, {limit}], got {long_prompt_tokens}")
    decode = (
        decode_load(decode_batch_size, decode_context_tokens) if decode_batch_size else StepLoad()
    )
    budget_s = itl_slo_ms / MS_PER_S

    def worst_step_s(chunk: int) -> float:
        # The deepest chunk of the long prompt: c = long - chunk cached tokens before it.
        cached = max(0, long_prompt_tokens - chunk)
        load = prefill_load(chunk, cached_tokens=cached)
        return cost.seconds(
            StepLoad(
                prefill_tokens=load.prefill_tokens,
                prefill_chunks=load.prefill_chunks,
                prefill_attention_pairs=load.prefill_attention_pairs,
                prefill_kv_tokens=load.prefill_kv_tokens,
                decode_seqs=decode.decode_seqs,
                decode_context_tokens=decode.decode_context_tokens,
            )
        )

    # The worst step grows with the chunk (pairs q*(L-q) + q(q+1)/2 grow for q <= L): bisect.
    max_chunk = _last_true(limit, lambda chunk: worst_step_s(chunk) <= budget_s)
    warnings: list[str] = []
    rationale: list[str] = []
    if max_chunk == 0:
        recommended = 1
        warnings.append(
            f"no chunk fits the {itl_slo_ms:g} ms inter-token SLO: a one-token chunk's step "
            f"already takes {worst_step_s(1) * MS_PER_S:.1f} ms with {decode_batch_size} "
            "decodes running; shorten long_prompt_tokens, lower the decode batch or add GPUs"
        )
    elif max_chunk < CHUNK_ALIGNMENT_TOKENS:
        recommended = max_chunk
        warnings.append(
            f"the largest chunk that fits is {max_chunk} tokens, below the usual 64-token "
            "alignment: prefill will take many steps"
        )
    else:
        recommended = max_chunk // CHUNK_ALIGNMENT_TOKENS * CHUNK_ALIGNMENT_TOKENS
    rationale.append(
        f"a step carrying a {max_chunk}-token chunk at the end of a {long_prompt_tokens}-token "
        f"prompt beside {decode_batch_size} decodes takes at most {itl_slo_ms:g} ms; rounded "
        f"down to {recommended} tokens"
    )
    # Seed 000: chunk <= T_max * peak / FLOPs_per_token, linear FLOPs and datasheet peak.
    # Per GPU: its peak over its share of the linear FLOPs per token (the ratio tp cancels).
    seed_cut = math.floor(
        budget_s * cost.peak_flops_per_s / cost.coefficients.linear_flops_per_token
    )
    rationale.append(
        f"seed 000's first cut T_max * peak / FLOPs_per_token gives {seed_cut} tokens; it ignores "
        "attention over the cached prefix, weight reads, the decode batch and efficiency"
    )

    def chunked_s(prompt: int) -> float:
        return prefill_seconds(cost, prompt, chunk_tokens=recommended, decode=decode)[0]

    unchunked_s, _ = prefill_seconds(cost, long_prompt_tokens, decode=decode)
    chunked_long_s, steps = prefill_seconds(
        cost, long_prompt_tokens, chunk_tokens=recommended, decode=decode
    )
    long_prompt = LongPromptCost(
        long_prompt_tokens, unchunked_s * MS_PER_S, chunked_long_s * MS_PER_S, steps
    )
    rationale.append(
        f"the {long_prompt_tokens}-token prompt takes {steps} steps: TTFT "
        f"{chunked_long_s * MS_PER_S:.0f} ms chunked against {unchunked_s * MS_PER_S:.0f} ms in "
        "one step that would stall every decode"
    )
    bounds = sorted({min(b, limit) for b in (*_BUCKET_BOUNDS_TOKENS, limit)})
    buckets = tuple(LengthBucket(b, _nice_ceiling(chunked_s(b) * MS_PER_S)) for b in bounds)
    if short_ttft_slo_ms is not None:
        slo_s = short_ttft_slo_ms / MS_PER_S
        route_above = _last_true(limit, lambda prompt: chunked_s(prompt) <= slo_s)
        rationale.append(
            f"a short request queued behind a long prompt waits for its chunks; prompts above "
            f"{route_above} tokens take longer than the {short_ttft_slo_ms:g} ms short-request "
            "TTFT SLO to prefill even chunked, so route them to their own endpoint"
        )
    else:
        route_above = min(crossover_tokens(cost), limit)
        rationale.append(
            f"no short_ttft_slo_ms given: routing above the {route_above}-token crossover, "
            "where attention dominates and prefill cost grows quadratically"
        )
    return ChunkRecommendation(
        max_chunk_tokens=max_chunk,
        recommended_chunk_tokens=recommended,
        step_ms=worst_step_s(recommended) * MS_PER_S,
        seed_first_cut_tokens=seed_cut,
        long_prompt=long_prompt,
        length_buckets=buckets,
        route_long_prompts_above_tokens=route_above,
        rationale=tuple(rationale),
        warnings=tuple(warnings),
    )
