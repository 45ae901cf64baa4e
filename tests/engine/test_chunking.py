"""Chunk size from the inter-token SLO."""

from __future__ import annotations

import math

import pytest

from app.engine.chunking import recommend_chunk_size
from app.engine.estimates import prefill_seconds
from app.engine.specs import Deployment, Efficiency, SpecError
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from tests.engine.test_counting import A100, H100, LLAMA3_8B, LLAMA3_70B

CALIBRATED = Efficiency(gemm=0.58, attention=0.62, memory=0.83, overhead_ms=1.8)


def test_agrees_with_the_seed_first_cut_when_its_terms_vanish() -> None:
    """Ideal, no decodes, a short prompt (attention ~1 % of a chunk) and a model whose weight
    read (42 ms) is under the 100 ms budget: T_max * peak / FLOPs_per_token within 3 %."""
    result = recommend_chunk_size(
        StepCostModel(LLAMA3_70B, H100), itl_slo_ms=100, long_prompt_tokens=1024
    )
    # Linear FLOPs per token: 1,711,276,032 per layer (QKV, O, gated FFN) times 80 layers.
    seed = 0.1 * 989.4e12 / (1_711_276_032 * 80)
    assert result.seed_first_cut_tokens == math.floor(seed)
    assert result.max_chunk_tokens == pytest.approx(seed, rel=0.03)


def test_the_deepest_chunk_of_a_long_prompt_binds() -> None:
    cost = StepCostModel(LLAMA3_8B, H100, Deployment(), CALIBRATED)
    short = recommend_chunk_size(cost, itl_slo_ms=50, long_prompt_tokens=2048)
    long = recommend_chunk_size(cost, itl_slo_ms=50, long_prompt_tokens=65536)
    assert long.max_chunk_tokens < short.max_chunk_tokens


def test_running_decodes_shrink_the_chunk_and_the_step_fits() -> None:
    cost = StepCostModel(LLAMA3_8B, H100, Deployment(), CALIBRATED)
    alone = recommend_chunk_size(cost, itl_slo_ms=50)
    busy = recommend_chunk_size(
        cost, itl_slo_ms=50, decode_batch_size=64, decode_context_tokens=4096
    )
    assert busy.max_chunk_tokens < alone.max_chunk_tokens
    assert busy.recommended_chunk_tokens % 64 == 0
    assert busy.step_ms <= 50
    assert busy.long_prompt.steps == math.ceil(32768 / busy.recommended_chunk_tokens)
    assert busy.long_prompt.ttft_ms_chunked > busy.long_prompt.ttft_ms_unchunked
    expected, _ = prefill_seconds(
        cost, 32768, chunk_tokens=busy.recommended_chunk_tokens, decode=decode_load(64, 4096)
    )
    assert busy.long_prompt.ttft_ms_chunked == pytest.approx(expected * 1e3)


def test_one_more_token_would_break_the_slo() -> None:
    cost = StepCostModel(LLAMA3_8B, H100, Deployment(), CALIBRATED)
    result = recommend_chunk_size(cost, itl_slo_ms=40, long_prompt_tokens=8192)
    q = result.max_chunk_tokens
    at = cost.seconds(prefill_load(q, cached_tokens=8192 - q))
    over = cost.seconds(prefill_load(q + 1, cached_tokens=8192 - q - 1))
    assert at <= 0.040 < over


def test_route_threshold_from_the_short_ttft_slo() -> None:
    cost = StepCostModel(LLAMA3_8B, H100, Deployment(), CALIBRATED)
    result = recommend_chunk_size(cost, itl_slo_ms=50, short_ttft_slo_ms=1000)
    n, chunk = result.route_long_prompts_above_tokens, result.recommended_chunk_tokens
    assert prefill_seconds(cost, n, chunk_tokens=chunk)[0] <= 1.0
    assert prefill_seconds(cost, n + 1, chunk_tokens=chunk)[0] > 1.0
    assert [b.max_prompt_tokens for b in result.length_buckets] == [4096, 16384, 65536, 131072]
    slos = [b.ttft_slo_ms for b in result.length_buckets]
    assert slos == sorted(slos)
    mantissas = {round(s / 10 ** math.floor(math.log10(s)), 9) for s in slos}
    assert mantissas <= {1.0, 2.0, 5.0}  # rounded up to 1-2-5 values


def test_unmeetable_slo_warns() -> None:
    cost = StepCostModel(LLAMA3_70B, A100, Deployment(tp=8))
    result = recommend_chunk_size(cost, itl_slo_ms=1, long_prompt_tokens=100_000)
    assert result.max_chunk_tokens == 0
    assert result.warnings


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"itl_slo_ms": 0}, "itl_slo_ms"),
        ({"itl_slo_ms": 50, "decode_batch_size": 8}, "decode_context_tokens"),
        ({"itl_slo_ms": 50, "long_prompt_tokens": 10**7}, "long_prompt_tokens"),
        ({"itl_slo_ms": 50, "short_ttft_slo_ms": -1}, "short_ttft_slo_ms"),
    ],
)
def test_rejects_impossible_input(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(SpecError) as error:
        recommend_chunk_size(StepCostModel(LLAMA3_8B, H100), **kwargs)  # type: ignore[arg-type]
    assert error.value.field == field
