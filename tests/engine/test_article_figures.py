"""docs/model.md's acceptance figures (section 9) and errata (section 10), through the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.counting import OpClass
from app.engine.dtypes import DType
from app.engine.estimates import estimate_decode, estimate_prefill, prefill_curve
from app.engine.memory import kv_bytes_per_sequence, kv_bytes_per_token, weight_bytes_per_gpu
from app.engine.parallelism import assess_tp
from app.engine.roofline import RooflinePhase, roofline
from app.engine.specs import (
    Deployment,
    Efficiency,
    FfnType,
    GpuSpec,
    InterconnectSpec,
    ModelSpec,
)
from app.engine.step_cost import StepCostModel, decode_load
from tests.engine.test_counting import (
    A100,
    H100,
    LLAMA2_7B,
    LLAMA3_8B,
    LLAMA3_70B,
    SEED_MHA,
)

EFFICIENCY_JSON = Path(__file__).parents[2] / "app" / "catalog" / "data" / "efficiency.json"
K = 1024  # article A's "1K" etc.: we take K = 1024 tokens


@pytest.mark.parametrize(
    ("tokens", "total_tflops", "printed_to", "attention_share"),
    [
        (512, 6.7, 0.1, 0.02),
        (4 * K, 61.6, 0.1, 0.14),
        (32 * K, 985, 1, 0.57),
        (128 * K, 10_696, 1, 0.84),
    ],
)
def test_article_a_flops_table(
    tokens: int, total_tflops: float, printed_to: float, attention_share: float
) -> None:
    """L*(24*n*d^2 + 4*n^2*d), non-causal: within half a unit of the printed last digit."""
    estimate = estimate_prefill(StepCostModel(SEED_MHA, A100), prompt_tokens=tokens, causal=False)
    linear_plus_attention = estimate.flops.linear + estimate.flops.attention
    assert linear_plus_attention / 1e12 == pytest.approx(total_tflops, abs=printed_to / 2)
    assert estimate.attention_share == pytest.approx(attention_share, abs=5e-3)


def test_article_a_crossover_is_6d() -> None:
    cost = StepCostModel(SEED_MHA, A100)
    assert estimate_prefill(cost, prompt_tokens=512, causal=False).crossover_tokens == 24_576


def test_article_a_ttft_ratio_follows_its_formula_under_ideal_efficiency() -> None:
    """ratio(n -> 2n) = (48d + 16n) / (24d + 4n): 2x well below, 3x at the crossover."""
    cost = StepCostModel(SEED_MHA, A100)
    lengths = [1024, 2048, 24_576, 49_152, 131_072, 262_144]
    points = prefill_curve(cost, lengths, causal=False).points
    for index in (1, 3, 5):
        n = lengths[index - 1]
        expected = (48 * 4096 + 16 * n) / (24 * 4096 + 4 * n)
        # TTFT also carries the LM head and Q/K/V/O streaming: within 1 %.
        assert points[index].ratio_to_previous == pytest.approx(expected, rel=0.01)
    assert points[1].ratio_to_previous == pytest.approx(2.0, rel=0.05)
    assert points[3].ratio_to_previous == pytest.approx(3.0, rel=0.01)


def test_article_a_ratio_approaches_4_far_above_the_crossover() -> None:
    small = ModelSpec(
        num_layers=4,
        hidden_size=256,
        num_attention_heads=4,
        num_kv_heads=4,
        head_dim=64,
        intermediate_size=1024,
        ffn_type=FfnType.MLP,
        vocab_size=1000,
        max_context_tokens=1 << 20,
    )
    # Crossover 6d = 1536; at n = 256K the ratio is (48d+16n)/(24d+4n) = 3.99.
    points = prefill_curve(StepCostModel(small, A100), [262_144, 524_288], causal=False).points
    assert points[1].ratio_to_previous == pytest.approx(4.0, rel=0.01)


def _a100_calibrated() -> Efficiency:
    entry = json.loads(EFFICIENCY_JSON.read_text())["efficiencies"]["a100-sxm4-80gb"]
    return Efficiency(
        **{
            k: entry[k]
            for k in ("gemm", "attention", "memory", "communication", "overhead_ms", "source")
        }
    )


def test_calibrated_a100_reproduces_the_measured_llama_3_8b_table() -> None:
    """Article A's measured TTFT (ms), A100 SXM4, FlashAttention-2, batch 1: MAPE < 10 %."""
    measured = {1 * K: 81, 10 * K: 832, 50 * K: 7_717, 100 * K: 21_731, 128 * K: 32_863}
    cost = StepCostModel(LLAMA3_8B, A100, Deployment(), _a100_calibrated())
    errors = [
        abs(estimate_prefill(cost, prompt_tokens=n).ttft_ms / ms - 1) for n, ms in measured.items()
    ]
    assert sum(errors) / len(errors) < 0.10
    assert max(errors) < 0.15


# Article B: LLaMA-7B (N = 7e9), A100 at 312 TFLOP/s and 1.5 TB/s (the 40 GB part's 1.555).
A100_ARTICLE_B = GpuSpec(
    memory_bytes=80 * 10**9,
    memory_bandwidth_bytes_per_s=1.5e12,
    peak_flops_per_s={DType.BF16: 312e12, DType.FP16: 312e12},
    interconnect=InterconnectSpec("nvlink3", 600e9),
)


def test_article_b_prefill_lower_bound() -> None:
    """2LN/peak = 2*512*7e9/312e12 = 23.0 ms. Llama-2-7B has 6.74e9 parameters, 6.61e9 of them
    outside the embedding, so the engine's ideal TTFT is 4-6 % lower: 10 % tolerance."""
    estimate = estimate_prefill(StepCostModel(LLAMA2_7B, A100_ARTICLE_B), prompt_tokens=512)
    assert estimate.ttft_ms == pytest.approx(2 * 512 * 7e9 / 312e12 * 1e3, rel=0.10)


def test_article_b_decode_lower_bound_and_utilization() -> None:
    """TPOT >= 2N/bandwidth = 14e9/1.5e12 = 9.3 ms; utilization 0.045 ms / 9.3 ms = 0.5 %.
    Llama-2-7B reads 13.2 GB of weights (not 14): 7 % tolerance on the time; the utilization,
    FLOPs over bytes times bandwidth over peak, is independent of N (5 %)."""
    estimate = estimate_decode(
        StepCostModel(LLAMA2_7B, A100_ARTICLE_B), batch_size=1, context_tokens=16
    )
    assert estimate.tpot_ms == pytest.approx(14e9 / 1.5e12 * 1e3, rel=0.07)
    assert estimate.compute_utilization == pytest.approx(0.045 / 9.3, rel=0.05)


@pytest.mark.parametrize("batch", [1, 8, 64, 208])
def test_article_b_decode_intensity_equals_batch_without_kv(batch: int) -> None:
    counts = StepCostModel(LLAMA2_7B, A100_ARTICLE_B).count(decode_load(batch, 1))
    weight_flops = counts.flops - counts.op(OpClass.DECODE_ATTENTION).flops
    assert weight_flops / counts.weight_bytes == pytest.approx(batch, rel=1e-9)


def test_article_b_erratum_kv_cache_of_llama_2_7b() -> None:
    """K and V: 2*32*4096*2 = 524,288 bytes per token, 1.07 GB per 2,048-token sequence, about
    62 sequences in 80 GB beside 13.5 GB of weights (article B printed 0.43 GB and 20)."""
    assert kv_bytes_per_token(LLAMA2_7B, Deployment()) == 524_288
    per_sequence = kv_bytes_per_sequence(LLAMA2_7B, Deployment(), 2048)
    assert per_sequence / 1e9 == pytest.approx(1.07, abs=0.005)
    weights = weight_bytes_per_gpu(LLAMA2_7B, Deployment())
    assert weights / 1e9 == pytest.approx(13.5, abs=0.05)
    assert (80e9 - weights) / per_sequence == pytest.approx(62, abs=0.5)


def test_llama_3_8b_kv_bytes_per_token() -> None:
    assert kv_bytes_per_token(LLAMA3_8B, Deployment()) == 131_072


def _gqa(group: int) -> ModelSpec:
    return ModelSpec(
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=32 // group,
        head_dim=128,
        intermediate_size=14336,
        ffn_type=FfnType.GATED,
        vocab_size=128256,
        max_context_tokens=131072,
    )


def _attention_points(group: int) -> tuple[float, float]:
    result = roofline(
        H100,
        model=_gqa(group),
        deployment=Deployment(kv_dtype=DType.FP8),
        prompt_tokens=32768,
        context_tokens=32768,
    )
    by_phase = {p.phase: p.arithmetic_intensity for p in result.phases}
    return by_phase[RooflinePhase.PREFILL_ATTENTION], by_phase[RooflinePhase.DECODE_ATTENTION]


def test_article_c_fp8_attention_intensities() -> None:
    """Prefill 2*G*ISL/(G+1) = 58,254 for G=8, ISL=32768 (article C printed 15,990, which its
    own formula does not give); decode 2*G*KVSL/(G+KVSL) = 15.99 and 31.99."""
    prefill_8, decode_8 = _attention_points(8)
    prefill_16, decode_16 = _attention_points(16)
    assert prefill_8 == pytest.approx(58_254, abs=1)
    assert prefill_8 != pytest.approx(15_990, rel=0.5)
    assert decode_8 == pytest.approx(15.99, abs=0.01)
    assert decode_16 == pytest.approx(31.99, abs=0.02)
    assert abs(prefill_16 / prefill_8 - 1) < 0.06  # doubling G moves prefill < 6 %
    assert decode_16 / decode_8 == pytest.approx(2.0, rel=0.01)  # and doubles decode


def test_article_a_erratum_h100_ridge_uses_dense_bf16() -> None:
    """989.4 TFLOP/s dense bf16 over 3.35 TB/s: ridge 295, as article B prints (not 148)."""
    assert roofline(H100).ridge_intensity == pytest.approx(295, abs=0.5)


def test_llama_3_70b_tp_on_h100() -> None:
    """tp 1 does not fit; tp 2 fits with a small KV pool; tp 16 replicates KV heads 2x."""
    result = assess_tp(LLAMA3_70B, H100)
    by_tp = {c.tp: c for c in result.candidates}
    assert not by_tp[1].fits_memory
    assert by_tp[2].fits_memory
    assert 0 < by_tp[2].kv_pool_bytes_per_gpu < 10e9  # about 5.5 GB of 77 GB usable
    assert by_tp[16].kv_head_replication == 2.0
    assert result.recommended_tp == 2
