"""Closed forms the planner decides with before it simulates: what a replica's KV cache holds,
what the requests cost a lone replica, and the most requests per second a replica can complete.

They need only `StepTimer.seconds` (with the engine's `StepCostModel`, its closed forms are used
where it has them), and they are bounds in the direction the search needs: a lone request is the
fastest a request is ever served (so an SLO it misses is unreachable at any load), and
`capacity_bound` is never below the rate a simulation can sustain (so a cost computed from it is a
lower bound, and pruning by it is safe). What each assumes of the timer is said where it is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from app.engine.counting import OpClass, pairs_for_chunk
from app.engine.estimates import prefill_seconds
from app.engine.planning.probes import ProbeSample
from app.engine.simulation import StepTimer
from app.engine.step_cost import StepCostModel, decode_load
from app.engine.step_load import StepLoad

__all__ = ["LoadStats", "capacity_bound", "lone_decode_seconds", "lone_prefill_seconds"]


@dataclass(frozen=True, slots=True)
class LoadStats:
    """Mean work of one request of the sample (tokens; pairs; token-steps)."""

    prompt_tokens: float
    decode_tokens: float
    """E[T - 1]: decode steps a request takes part in (its first token comes from prefill)."""
    prefill_pairs: float
    """E[P(P+1)/2]: causal query-key pairs of the whole prompt, however it is chunked."""
    decode_context_tokens: float
    """E[sum over its decode steps of its context] = E[(T-1)P + T(T-1)/2]."""

    @classmethod
    def of(cls, sample: ProbeSample) -> LoadStats:
        p = sample.prompt_tokens.astype(np.float64)
        t = sample.output_tokens.astype(np.float64)
        return cls(
            prompt_tokens=float(p.mean()),
            decode_tokens=float((t - 1).mean()),
            # However a prompt is chunked, its chunks' pairs add up to one chunk of all of it.
            prefill_pairs=float(
                np.mean([pairs_for_chunk(int(n), 0, causal=True) for n in sample.prompt_tokens])
            ),
            # Decode step i (1..T-1) attends over P + i tokens.
            decode_context_tokens=float(((t - 1) * p + t * (t - 1) / 2).mean()),
        )

    @property
    def mean_decode_context(self) -> float:
        """Context of a decoding sequence, averaged over decode steps."""
        if self.decode_tokens <= 0:
            return self.prompt_tokens
        return self.decode_context_tokens / self.decode_tokens


def lone_prefill_seconds(timer: StepTimer, prompt_tokens: int, chunk_tokens: int) -> float:
    """TTFT of a prompt alone on the replica: its chunks of up to `chunk_tokens`, back to back.

    With `StepCostModel` this is `estimates.prefill_seconds` (a closed-form sum, whatever the
    number of chunks); any other timer is called once per chunk."""
    if isinstance(timer, StepCostModel):
        return prefill_seconds(timer, prompt_tokens, chunk_tokens=chunk_tokens)[0]
    total, done = 0.0, 0
    while done < prompt_tokens:
        take = min(chunk_tokens, prompt_tokens - done)
        # Causal chunk of q after c computed: q*c + q*(q+1)/2 pairs (docs/model.md).
        total += timer.seconds(
            StepLoad(
                prefill_tokens=take,
                prefill_chunks=1,
                prefill_attention_pairs=float(take * done + take * (take + 1) // 2),
                prefill_kv_tokens=done + take,
            )
        )
        done += take
    return total


def lone_decode_seconds(timer: StepTimer, context_tokens: int) -> float:
    """One decode step of a lone sequence at `context_tokens`: the TPOT of a request alone, at
    its mid-life context (exact for a step time affine in the context)."""
    return timer.seconds(decode_load(1, context_tokens))


def _concave_excess_seconds(timer: StepTimer, tokens: int, max_tokens: int) -> float:
    """How far a step of `tokens` tokens lies above the timer's convex minorant over steps of
    1 to `max_tokens` tokens (0 for a timer whose step time is convex in its load).

    `StepCostModel` is convex but for a mixture-of-experts layer: its expert weights are read for
    the expected distinct experts the step's tokens touch, concave in the tokens. Replacing that
    read by its chord between 1 and `max_tokens` tokens gives a convex minorant (the chord lies
    below a concave curve, and starts at a non-negative intercept); the excess is the difference
    at `tokens`, from `StepCostModel.breakdown`, the same formulas that time the step.
    """
    if not isinstance(timer, StepCostModel) or timer.model.moe is None:
        return 0.0
    if not 1 < tokens < max_tokens:
        return 0.0

    def experts(count: int) -> tuple[float, float]:
        op = timer.breakdown(decode_load(count, 1)).op(OpClass.MOE_EXPERTS)
        return op.compute_s, op.memory_s

    _, low_memory_s = experts(1)
    _, high_memory_s = experts(max_tokens)
    compute_s, memory_s = experts(tokens)
    chord_s = low_memory_s + (high_memory_s - low_memory_s) * (tokens - 1) / (max_tokens - 1)
    return max(compute_s, memory_s) - max(compute_s, chord_s)


def capacity_bound(
    timer: StepTimer,
    stats: LoadStats,
    *,
    chunk_tokens: int,
    max_num_seqs: int,
    kv_capacity_tokens: int,
) -> float:
    """Requests per second one replica can at most complete, whatever the latency.

    At rate r the replica computes per second r*E[P] prompt tokens and r*E[T-1] decode tokens in
    sigma steps, each of at most `chunk_tokens` tokens and at most N decodes, N the smaller of
    `max_num_seqs` and the sequences the KV cache holds at their mean context (the sum of the
    decodes' contexts never exceeds the cache); so
    sigma >= r * max(E[P + T - 1] / chunk, E[T - 1] / N) = r * sigma_1.

    Two bounds follow; the answer is the smaller, and it is never infinite for a timer whose
    one-token steps take time:

    - Every step takes at least the shortest one-token step, f_1 (a timer that does not get
      faster with more work): r <= 1 / (sigma_1 * f_1). Loose, but it holds for any such timer.
    - A step's time is convex in its load (a sum of maxima of affine terms with non-negative
      intercepts), so by Jensen the steps of one second take at least sigma * seconds(mean
      load), which grows with sigma: r <= 1 / (sigma_1 * seconds(load_1 / sigma_1)). Loads are
      rounded down to whole tokens, which only loosens it. A mixture-of-experts step is not
      convex in its tokens (see `_concave_excess_seconds`): its convex minorant is used, so the
      bound holds there too, more loosely. A custom timer must be convex for this bound to hold.
    """
    decodes = min(float(max_num_seqs), kv_capacity_tokens / max(stats.mean_decode_context, 1.0))
    steps = max(
        (stats.prompt_tokens + stats.decode_tokens) / chunk_tokens,
        stats.decode_tokens / max(decodes, 1e-9),
    )
    # Any step: at least one prompt token, or one decode over a context of at least one token.
    shortest_s = min(
        timer.seconds(
            StepLoad(
                prefill_tokens=1, prefill_chunks=1, prefill_attention_pairs=1.0, prefill_kv_tokens=1
            )
        ),
        timer.seconds(decode_load(1, 1)),
    )
    load = StepLoad(
        prefill_tokens=math.floor(stats.prompt_tokens / steps),
        prefill_chunks=math.floor(1.0 / steps),
        prefill_attention_pairs=stats.prefill_pairs / steps,
        prefill_kv_tokens=math.floor(stats.prompt_tokens / steps),
        decode_seqs=math.floor(stats.decode_tokens / steps),
        decode_context_tokens=math.floor(stats.decode_context_tokens / steps),
    )
    mean_s = timer.seconds(load) - _concave_excess_seconds(timer, load.tokens, chunk_tokens)
    seconds = max(shortest_s, mean_s)
    if not seconds > 0:
        return math.inf
    return 1.0 / (steps * seconds)
