"""Prefill, prefill curve, decode, request and batch-ceiling estimates."""

from __future__ import annotations

import math

import pytest

from app.engine.batch_ceiling import estimate_batch_ceiling
from app.engine.estimates import (
    estimate_decode,
    estimate_prefill,
    estimate_request,
    prefill_curve,
)
from app.engine.specs import Deployment, Efficiency, SpecError
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.timing import Bound
from app.engine.units import GIB
from tests.engine.test_counting import A100, H100, LLAMA3_8B, LLAMA3_70B

CALIBRATED = Efficiency(gemm=0.6, attention=0.55, memory=0.8, communication=0.7, overhead_ms=2.0)


@pytest.fixture
def cost() -> StepCostModel:
    return StepCostModel(LLAMA3_8B, A100, Deployment(), CALIBRATED)


def test_prefill_is_one_step(cost: StepCostModel) -> None:
    estimate = estimate_prefill(cost, prompt_tokens=4096, batch_size=2)
    assert estimate.ttft_ms == pytest.approx(
        cost.seconds(prefill_load(4096, batch_size=2)) * 1e3, rel=1e-12
    )
    assert estimate.steps == 1
    assert estimate.bound is Bound.COMPUTE
    assert estimate.flops.total == pytest.approx(
        estimate.flops.linear + estimate.flops.attention + estimate.flops.lm_head
    )
    assert estimate.arithmetic_intensity == pytest.approx(
        estimate.flops.total / estimate.bytes.total
    )


def test_cached_prefix_computes_only_new_tokens(cost: StepCostModel) -> None:
    cached = estimate_prefill(cost, prompt_tokens=8192, cached_prefix_tokens=6144)
    assert cached.ttft_ms == pytest.approx(
        cost.seconds(prefill_load(2048, cached_tokens=6144)) * 1e3, rel=1e-12
    )
    assert cached.ttft_ms < estimate_prefill(cost, prompt_tokens=8192).ttft_ms


def test_chunked_prefill_sums_its_steps_and_keeps_the_flops(cost: StepCostModel) -> None:
    chunked = estimate_prefill(cost, prompt_tokens=10_000, chunk_tokens=768)
    brute = sum(
        cost.seconds(prefill_load(min(768, 10_000 - start), cached_tokens=start))
        for start in range(0, 10_000, 768)
    )
    assert chunked.steps == math.ceil(10_000 / 768)
    assert chunked.ttft_ms == pytest.approx(brute * 1e3, rel=1e-9)
    whole = estimate_prefill(cost, prompt_tokens=10_000)
    # Causal pairs add up: sum over chunks of q*c + q(q+1)/2 = n(n+1)/2.
    assert chunked.flops.attention == pytest.approx(whole.flops.attention, rel=1e-12)
    assert chunked.flops.linear == pytest.approx(whole.flops.linear, rel=1e-12)
    assert chunked.flops.lm_head == pytest.approx(14 * whole.flops.lm_head)  # each chunk
    assert chunked.bytes.weights > whole.bytes.weights  # re-read every step
    assert chunked.ttft_ms > whole.ttft_ms


def test_prefill_rejects_impossible_input(cost: StepCostModel) -> None:
    cases = [
        ({"prompt_tokens": 0}, "prompt_tokens"),
        ({"prompt_tokens": 200_000}, "prompt_tokens"),
        ({"prompt_tokens": 100, "batch_size": 0}, "batch_size"),
        ({"prompt_tokens": 100, "cached_prefix_tokens": 100}, "cached_prefix_tokens"),
        ({"prompt_tokens": 100, "chunk_tokens": 0}, "chunk_tokens"),
    ]
    for kwargs, field in cases:
        with pytest.raises(SpecError) as error:
            estimate_prefill(cost, **kwargs)  # type: ignore[arg-type]
        assert error.value.field == field


def test_prefill_warns_past_the_crossover_and_on_kv_replication() -> None:
    cost = StepCostModel(LLAMA3_70B, H100, Deployment(tp=16))
    estimate = estimate_prefill(cost, prompt_tokens=131_072)
    assert any("replicated 2 times" in w for w in estimate.warnings)
    # Llama-3-70B, causal: 2*l/a - 1, per layer l = 2*(8192*10240 + 8192^2 + 3*8192*28672)
    # = 1,711,276,032 and a = 4*64*128 = 32,768: l/a = 52,224 (the model's, whatever the tp).
    assert estimate.crossover_tokens == 2 * 52_224 - 1


def test_curve_ratios_and_slopes(cost: StepCostModel) -> None:
    curve = prefill_curve(cost, [1000, 2000, 2000, 8000])
    ttft = [p.ttft_ms for p in curve.points]
    assert curve.points[0].ratio_to_previous is None
    assert curve.points[1].ratio_to_previous == pytest.approx(ttft[1] / ttft[0])
    assert curve.points[1].loglog_slope == pytest.approx(math.log(ttft[1] / ttft[0]) / math.log(2))
    assert curve.points[2].loglog_slope is None  # same length twice
    assert curve.points[3].ttft_ms == pytest.approx(
        estimate_prefill(cost, prompt_tokens=8000).ttft_ms, rel=1e-12
    )
    assert curve.points[3].attention_share == pytest.approx(
        estimate_prefill(cost, prompt_tokens=8000).attention_share, rel=1e-6
    )


def test_decode_estimate(cost: StepCostModel) -> None:
    estimate = estimate_decode(cost, batch_size=16, context_tokens=2048)
    seconds = cost.seconds(decode_load(16, 2048))
    assert estimate.tpot_ms == pytest.approx(seconds * 1e3, rel=1e-12)
    assert estimate.tokens_per_s == pytest.approx(16 / seconds)
    assert estimate.compute_utilization == pytest.approx(
        estimate.flops.total / seconds / 312e12, rel=1e-12
    )
    assert estimate.bound is Bound.MEMORY
    assert estimate.bytes.kv_cache == pytest.approx(16 * 2049 * 131_072)


def test_decode_warns_when_the_batch_does_not_fit(cost: StepCostModel) -> None:
    estimate = estimate_decode(cost, batch_size=1000, context_tokens=8192)
    assert any("KV cache per GPU" in w for w in estimate.warnings)


def test_request_end_to_end(cost: StepCostModel) -> None:
    estimate = estimate_request(cost, prompt_tokens=1000, output_tokens=300)
    mean = sum(cost.seconds(decode_load(1, 1000 + i)) for i in range(300)) / 300
    assert estimate.tpot_ms == pytest.approx(mean * 1e3, rel=1e-9)
    assert estimate.e2e_ms == pytest.approx(estimate.ttft_ms + 299 * estimate.tpot_ms)
    with pytest.raises(SpecError) as error:
        estimate_request(cost, prompt_tokens=131_000, output_tokens=1000)
    assert error.value.field == "output_tokens"


def test_batch_ceiling_by_hand_memory_limited() -> None:
    """Llama-3-8B on an 80 GiB A100, 4096-token contexts, 90 % utilisation:
    usable 0.9 * 85,899,345,920 = 77,309,411,328 B; weights 8,030,261,248 * 2 B;
    reserve 8192*(2*4096 + 3*14336)*2 + 2*256*128256*4 = 1,101,529,088 B; pool 60,147,359,744 B;
    a sequence 4096 * 131,072 = 536,870,912 B: 112 sequences. At 4K of context each sequence
    reads 537 MB of KV per step (263 us) and computes 17 GFLOP (55 us): never compute-bound."""
    result = estimate_batch_ceiling(StepCostModel(LLAMA3_8B, A100), context_tokens=4096)
    assert result.memory.usable_bytes == pytest.approx(0.9 * 80 * GIB)
    assert result.memory.weights_bytes == 8_030_261_248 * 2
    assert result.memory.activation_reserve_bytes == 1_101_529_088
    assert result.memory.kv_pool_bytes == pytest.approx(60_147_359_744)
    assert result.kv_bytes_per_sequence == 536_870_912
    assert result.max_batch_by_memory == 112
    assert result.ridge_batch is None
    assert result.ridge_batch_reason is not None
    assert result.batch_ceiling == 112
    assert result.limited_by is Bound.MEMORY
    assert result.tpot_ms_at_ceiling is not None
    assert result.tokens_per_s_at_ceiling == pytest.approx(112 / result.tpot_ms_at_ceiling * 1e3)


def test_ridge_batch_by_hand_at_short_context() -> None:
    """Llama-3-8B on the H100, ideal, 16 tokens of context. Per sequence: FLOPs
    13,958,643,712 (linear) + 1,050,673,152 (LM head) + 4*32*128*32*16 (attention); bytes
    655,360 + 524,288 + 3,276,800 (QKV, O, FFN activations) + 521,216 (LM head) + 524,288 (Q/O)
    + 17 * 131,072 (KV); per step 15,009,316,864 weight bytes. Compute-bound once
    B * (F/peak - M/bw) >= W/bw."""
    flops = 13_958_643_712 + 1_050_673_152 + 4 * 32 * 128 * 32 * 16
    moved = 655_360 + 524_288 + 3_276_800 + 521_216 + 524_288 + 17 * 131_072
    weights = 15_009_316_864
    expected = math.ceil(weights / 3.35e12 / (flops / 989.4e12 - moved / 3.35e12))
    result = estimate_batch_ceiling(StepCostModel(LLAMA3_8B, H100), context_tokens=16)
    assert result.ridge_batch == expected
    assert result.limited_by is Bound.COMPUTE
    assert result.batch_ceiling == expected


def test_batch_ceiling_when_nothing_fits() -> None:
    result = estimate_batch_ceiling(StepCostModel(LLAMA3_70B, A100), context_tokens=2048)
    assert result.max_batch_by_memory == 0
    assert result.batch_ceiling == 0
    assert result.tpot_ms_at_ceiling is None
    assert any("not one" in w for w in result.warnings)
