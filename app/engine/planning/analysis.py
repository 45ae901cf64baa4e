"""Closed forms the planner decides with before it simulates: what a replica's KV cache holds,
what the requests cost a lone replica, and the most requests per second a replica can complete.

All of them need only `StepTimer.seconds`, so they hold for any timer, and they are bounds in
the direction the search needs: a lone request is the fastest a request is ever served (so an SLO
it misses is unreachable at any load), and `capacity_bound` is never below the rate a simulation
can sustain (so a cost computed from it is a lower bound, and pruning by it is safe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from app.engine.planning.probes import ProbeSample
from app.engine.simulator import StepTimer
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
            # Chunks of q after c cached: sum of q*c + q(q+1)/2 over the chunks is P(P+1)/2.
            prefill_pairs=float((p * (p + 1) / 2).mean()),
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
    """TTFT of a prompt alone on the replica: its chunks of up to `chunk_tokens`, back to back."""
    total, done = 0.0, 0
    while done < prompt_tokens:
        take = min(chunk_tokens, prompt_tokens - done)
        # Causal chunk of q after c computed: q*c + q*(q+1)/2 pairs (DESIGN.md section 3).
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
    return timer.seconds(StepLoad(decode_seqs=1, decode_context_tokens=context_tokens))


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
    `max_num_seqs` and the sequences the KV cache holds at their mean context; so
    sigma >= r * max(E[P + T - 1] / chunk, E[T - 1] / N). A step's time is convex in its load
    (a sum of maxima of affine terms), so by Jensen the steps of one second take at least
    sigma * seconds(mean load), which grows with sigma: the least sigma gives the bound
    r <= 1 / (sigma_1 * seconds(load_1 / sigma_1)) at r = 1. Loads are rounded down, which only
    loosens the bound. (A mixture-of-experts step is concave in its tokens; there the bound is an
    approximation.)
    """
    decodes = min(float(max_num_seqs), kv_capacity_tokens / max(stats.mean_decode_context, 1.0))
    steps = max(
        (stats.prompt_tokens + stats.decode_tokens) / chunk_tokens,
        stats.decode_tokens / max(decodes, 1e-9),
    )
    load = StepLoad(
        prefill_tokens=math.floor(stats.prompt_tokens / steps),
        prefill_chunks=math.floor(1.0 / steps),
        prefill_attention_pairs=stats.prefill_pairs / steps,
        prefill_kv_tokens=math.floor(stats.prompt_tokens / steps),
        decode_seqs=math.floor(stats.decode_tokens / steps),
        decode_context_tokens=math.floor(stats.decode_context_tokens / steps),
    )
    seconds = timer.seconds(load)
    if not seconds > 0:
        return math.inf
    return 1.0 / (steps * seconds)
