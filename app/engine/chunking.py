"""Chunked-prefill size from latency SLOs.

A continuous-batching step runs the running decodes plus up to one prefill chunk; while it runs,
every decode waits. So the largest usable chunk is the largest whose step (chunk plus the decode
batch) fits the inter-token SLO. The binding step is the deepest chunk of the longest prompt the
pool serves (`long_prompt_tokens`): its attention reads the whole cached prefix. Article A's first
cut ignores attention, weights and decodes: `chunk <= T_max * peak / FLOPs_per_token`; we report
it beside ours (`seed_first_cut_tokens`) and agree with it when those terms vanish.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from app.engine.counting import pairs_for_chunk
from app.engine.estimates import crossover_tokens, deployment_warnings, prefill_seconds
from app.engine.specs import SpecError
from app.engine.step_cost import StepCostModel, decode_load
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
_BUCKET_BOUNDS_TOKENS = (4096, 16384, 65536)  # article A's buckets (4K, 16K) and one more


class LongPromptCost(NamedTuple):
    """What chunking costs the long prompt (each step also runs the decode batch)."""

    prompt_tokens: int
    ttft_ms_unchunked: float
    ttft_ms_chunked: float
    steps: int


class LengthBucket(NamedTuple):
    max_prompt_tokens: int
    ttft_slo_ms: float
    """Chunked TTFT at the bucket's longest prompt, rounded up to 1, 2 or 5 times a power of
    ten (no queueing included)."""


class ChunkRecommendation(NamedTuple):
    """A recommendation and its figures (named tuples here, built once per answer: faster to
    make than frozen dataclasses, as immutable)."""

    max_chunk_tokens: int
    """Largest chunk whose step fits the SLO at its worst position (0: none does)."""
    recommended_chunk_tokens: int
    """`max_chunk_tokens` rounded down to a multiple of 64 (itself when below 64)."""
    step_ms: float
    """The worst step at the recommended chunk."""
    seed_first_cut_tokens: int
    """Article A's T_max * peak / FLOPs_per_token (datasheet peak, linear FLOPs only)."""
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


def _last_within(
    limit: int, seconds: Callable[[int], float], budget_s: float, guess: int | None = None
) -> int:
    """Largest n in [1, limit] with seconds(n) <= budget_s, for `seconds` non-decreasing in n;
    0 when even seconds(1) exceeds it. `guess` (optional) is a first probe near the answer.

    Regula falsi with the Illinois modification over the integers: every probe is an exact
    `seconds(n)` and the bracket lo < hi with seconds(lo) <= budget_s < seconds(hi) only
    shrinks, so the answer is the one bisection gives; the step times are piecewise linear or
    quadratic in n, so interpolation lands within a token or two in a handful of probes where
    bisection needs log2(limit). Runs of probes that do not halve the bracket fall back to
    bisection, which bounds the worst case.
    """
    bracket = _bracket(limit, seconds, budget_s, guess)
    if isinstance(bracket, int):
        return bracket
    lo, lo_s, hi, hi_s = bracket
    # Interpolation weights: the distance to the budget, halved at an end kept twice running.
    below, above = lo_s - budget_s, hi_s - budget_s
    kept_lo = kept_hi = slow = 0
    while hi - lo > 1:
        width = hi - lo
        if slow >= 4:
            middle = (lo + hi) // 2
        else:
            step = int(below / (below - above) * width)
            middle = min(max(lo + step, lo + 1), hi - 1)
        middle_s = seconds(middle)
        if middle_s <= budget_s:
            lo, below = middle, middle_s - budget_s
            kept_hi, kept_lo = kept_hi + 1, 0
            above = above / 2 if kept_hi > 1 else above
        else:
            hi, above = middle, middle_s - budget_s
            kept_lo, kept_hi = kept_lo + 1, 0
            below = below / 2 if kept_lo > 1 else below
        slow = slow + 1 if 2 * (hi - lo) > width else 0
    return lo


def _bracket(
    limit: int, seconds: Callable[[int], float], budget_s: float, guess: int | None
) -> int | tuple[int, float, int, float]:
    """The answer of `_last_within` when an end decides it (0 or `limit`), else a bracket
    (lo, seconds(lo), hi, seconds(hi)) with seconds(lo) <= budget_s < seconds(hi)."""
    hi = limit if guess is None else max(1, min(limit, guess))
    hi_s = seconds(hi)
    if hi_s <= budget_s:
        if hi == limit:
            return limit
        lo, lo_s = hi, hi_s
        hi, hi_s = limit, seconds(limit)
        return limit if hi_s <= budget_s else (lo, lo_s, hi, hi_s)
    if hi == 1:
        return 0
    lo_s = seconds(1)
    return 0 if lo_s > budget_s else (1, lo_s, hi, hi_s)


DEFAULT_LONG_PROMPT_TOKENS = 32768  # the default long prompt


def _check(
    limit: int,
    *,
    itl_slo_ms: float,
    short_ttft_slo_ms: float | None,
    decode_batch_size: int,
    decode_context_tokens: int,
    long_prompt_tokens: int,
) -> None:
    """`SpecError` naming the first impossible input of `recommend_chunk_size`."""
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
    limit = cost.model.max_context_tokens
    if long_prompt_tokens is None:
        long_prompt_tokens = min(DEFAULT_LONG_PROMPT_TOKENS, limit)
    _check(
        limit,
        itl_slo_ms=itl_slo_ms,
        short_ttft_slo_ms=short_ttft_slo_ms,
        decode_batch_size=decode_batch_size,
        decode_context_tokens=decode_context_tokens,
        long_prompt_tokens=long_prompt_tokens,
    )
    decode = (
        decode_load(decode_batch_size, decode_context_tokens) if decode_batch_size else StepLoad()
    )
    budget_s = itl_slo_ms / MS_PER_S

    seqs, context = decode.decode_seqs, decode.decode_context_tokens
    step_seconds = cost.step_seconds

    def worst_step_s(chunk: int) -> float:
        # The deepest chunk of the long prompt: c = long - chunk cached tokens before it
        # (`prefill_load(chunk, cached_tokens=c)`), beside the decodes.
        cached = max(0, long_prompt_tokens - chunk)
        pairs = pairs_for_chunk(chunk, cached, causal=True)
        return step_seconds(chunk, 1, pairs, cached + chunk, seqs, context)

    # Article A: chunk <= T_max * peak / FLOPs_per_token, linear FLOPs and datasheet peak.
    # Per GPU: its peak over its share of the linear FLOPs per token (the ratio tp cancels).
    seed_cut = math.floor(
        budget_s * cost.peak_flops_per_s / cost.coefficients.linear_flops_per_token
    )
    # The worst step grows with the chunk (pairs q*(L-q) + q(q+1)/2 grow for q <= L). A step
    # takes at least its linear FLOPs at peak, so one token past article A's cut is over
    # budget (a first probe, verified like every other).
    max_chunk = _last_within(limit, worst_step_s, budget_s, guess=seed_cut + 1)
    warnings = deployment_warnings(cost)
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
    rationale.append(
        f"article A's first cut T_max * peak / FLOPs_per_token gives {seed_cut} tokens; it ignores "
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
    # The long prompt's own bucket (often the context limit) is already timed.
    buckets = tuple(
        LengthBucket(
            b,
            _nice_ceiling((chunked_long_s if b == long_prompt_tokens else chunked_s(b)) * MS_PER_S),
        )
        for b in bounds
    )
    if short_ttft_slo_ms is not None:
        slo_s = short_ttft_slo_ms / MS_PER_S
        route_above = _last_within(limit, chunked_s, slo_s)
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
