"""Prefix caching in the simulator against hand-worked steps: a cached prefix leaves only the
suffix's prefill (attending over the prefix), and its KV blocks are held once."""

from __future__ import annotations

import pytest

from app.engine.simulation import PrefixCache, simulate
from app.engine.specs import SpecError
from app.engine.step_load import StepLoad
from app.engine.workload import Trace
from tests.engine.test_simulator import BIG_KV, LinearTimer

TIMER = LinearTimer(base_s=0.005, per_token_s=1e-5, per_pair_s=1e-9)


def _apart(requests: int, prompt: int, output: int) -> Trace:
    """Requests far enough apart that each runs alone."""
    return Trace.from_rows([(10.0 * i, prompt, output) for i in range(requests)])


def test_a_shared_prefix_leaves_only_the_suffix_to_prefill() -> None:
    """Prompts of 2,048 = a 2,000-token system prompt and 48 of their own. The first request
    prefills all 2,048; each later one finds the prefix's 125 whole blocks (2,000 tokens)
    cached and prefills 48 tokens over them: one step of 48 tokens, 48 x 2,000 + 48 x 49 / 2
    query-key pairs."""
    trace = _apart(5, 2048, 1)
    result = simulate(
        trace, TIMER, kv_capacity_tokens=BIG_KV, prefix_cache=PrefixCache(shared_prefix_tokens=2000)
    )
    ttft_ms = result.requests.ttft_s * 1000
    full = TIMER.seconds(
        StepLoad(
            prefill_tokens=2048,
            prefill_chunks=1,
            prefill_attention_pairs=2048 * 2049 / 2,
            prefill_kv_tokens=2048,
        )
    )
    suffix = TIMER.seconds(
        StepLoad(
            prefill_tokens=48,
            prefill_chunks=1,
            prefill_attention_pairs=48 * 2000 + 48 * 49 / 2,
            prefill_kv_tokens=2048,
        )
    )
    assert ttft_ms[0] == pytest.approx(full * 1000)
    assert ttft_ms[1:] == pytest.approx([suffix * 1000] * 4)


def test_hit_rate_one_leaves_the_last_block_and_hit_rate_zero_everything() -> None:
    """Hit rate 1 of 1,000-token prompts: 999 tokens could be cached, whole blocks of 16 make
    992, and 8 tokens are computed; hit rate 0 computes all 1,000."""
    cache = PrefixCache(hit_rate=1.0)
    trace = _apart(3, 1000, 1)
    assert cache.cached_tokens(trace.prompt_tokens, 16).tolist() == [992, 992, 992]
    cold = simulate(trace, TIMER, kv_capacity_tokens=BIG_KV)
    warm = simulate(trace, TIMER, kv_capacity_tokens=BIG_KV, prefix_cache=cache)
    eight = TIMER.seconds(
        StepLoad(
            prefill_tokens=8,
            prefill_chunks=1,
            prefill_attention_pairs=8 * 992 + 8 * 9 / 2,
            prefill_kv_tokens=1000,
        )
    )
    whole = TIMER.seconds(
        StepLoad(
            prefill_tokens=1000,
            prefill_chunks=1,
            prefill_attention_pairs=1000 * 1001 / 2,
            prefill_kv_tokens=1000,
        )
    )
    assert warm.ttft_ms.p50 == pytest.approx(eight * 1000)
    assert cold.ttft_ms.p50 == pytest.approx(whole * 1000)


def test_cached_blocks_are_not_held_again() -> None:
    """A pool of 4 x 2,048 slots holds 4 whole 2,048-token prompts at once; with a 1,984-token
    shared prefix held once (124 blocks), each later request needs its 4 own blocks: all 20
    fit together."""
    trace = Trace.from_rows([(0.0, 2048, 2)] * 20)
    pool = 4 * 2048 + 2048  # room for the shared prefix besides four prompts
    plain = simulate(trace, TIMER, kv_capacity_tokens=pool)
    shared = simulate(
        trace, TIMER, kv_capacity_tokens=pool, prefix_cache=PrefixCache(shared_prefix_tokens=1984)
    )
    assert plain.max_running_requests <= 5
    assert shared.max_running_requests == 20


def test_prefix_cache_rules() -> None:
    with pytest.raises(SpecError) as caught:
        PrefixCache(hit_rate=1.5)
    assert caught.value.field == "prefix_cache.hit_rate"
    with pytest.raises(SpecError) as caught:
        PrefixCache(shared_prefix_tokens=10, hit_rate=0.5)
    assert caught.value.field == "prefix_cache"
