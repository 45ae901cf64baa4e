"""MLA, sliding and chunked windows, interleaved MoE: FLOPs, bytes and memory against figures
worked out by hand from the published configs (tests/fixtures/hf_configs)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.engine.counting import (
    OpClass,
    count_step,
    kv_bytes_per_token,
    kv_slots,
    op_coefficients,
)
from app.engine.dtypes import DType
from app.engine.memory import kv_bytes_per_sequence, weight_bytes_per_gpu
from app.engine.parallelism import assess_tp
from app.engine.params import count_params
from app.engine.simulation import SchedulerConfig, simulate
from app.engine.specs import Deployment, ModelSpec, SpecError, expert_dtype_for
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from app.engine.workload import Trace
from app.formats.hf_config import parse_hf_config
from tests.engine.test_counting import H100

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


def _model(name: str) -> ModelSpec:
    spec = parse_hf_config(json.loads((FIXTURES / f"{name}.json").read_text("utf-8")))
    return spec.to_model_spec(name)


DEEPSEEK = _model("deepseek-v3")
GPT_OSS = _model("gpt-oss-120b")
SCOUT = _model("llama-4-scout")
BF16 = Deployment()


# ---- MLA


def test_deepseek_v3_parameters_by_hand() -> None:
    """Per layer: q_a 7168 x 1536, q_b 1536 x 128 x 192, kv_a 7168 x 576, kv_b 512 x 128 x 256,
    o 128 x 128 x 7168; 3 dense FFNs of 3 x 7168 x 18432; 58 MoE layers of 257 experts of
    3 x 7168 x 2048 and a 7168 x 256 router; embedding and head 129280 x 7168 each; norms."""
    attention = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    dense = 3 * 3 * 7168 * 18432
    moe = 58 * (257 * 3 * 7168 * 2048 + 7168 * 256)
    embeddings = 2 * 129280 * 7168
    norms = 61 * (2 * 7168 + 1536 + 512) + 7168
    counted = count_params(DEEPSEEK)
    assert counted.total == 61 * attention + dense + moe + embeddings + norms == 671_026_404_352
    # The published 671B main model (its 58 x 256 routing biases aside: 14,848).
    assert counted.total == pytest.approx(671_026_419_200, rel=1e-7)
    # The MTP layer: one MoE layer, eh_proj 2d x d and three norms, outside the total.
    mtp = attention + 257 * 3 * 7168 * 2048 + 7168 * 256 + 2 * 7168 + 1536 + 512
    assert counted.mtp == mtp + 2 * 7168 * 7168 + 3 * 7168
    # 37B activated: 8 of 256 routed experts per MoE layer.
    assert counted.active == pytest.approx(37.55e9, rel=0.001)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_mla_kv_cache_is_the_latent_on_every_gpu(tp: int) -> None:
    """61 x (512 + 64) x 2 = 70,272 bytes per token in bf16, whatever tp: the heads split, the
    latent does not. fp8 halves it."""
    assert kv_bytes_per_token(DEEPSEEK, Deployment(tp=tp)) == 70_272
    fp8 = Deployment(tp=tp, kv_dtype=DType.FP8)
    assert kv_bytes_per_token(DEEPSEEK, fp8) == 35_136
    # A GQA model of the same heads would cache 2 x 61 x 128 / tp x 192 x 2 bytes.
    assert kv_bytes_per_token(DEEPSEEK, Deployment(tp=tp)) < 2 * 61 * 128 / tp * 192 * 2


def test_mla_prefill_decompresses_and_decode_absorbs() -> None:
    """Per layer, tp 1: prefill attends as MHA over 128 heads of qk 192 and v 128 (2 x 128 x
    (192 + 128) FLOPs per pair) after kv_b expands each attended latent (2 x 512 x 128 x 256);
    decode attends over the latent as MQA: 2 x 128 x (512 + 64) + 2 x 128 x 512 FLOPs per
    cached token, plus the query's and output's absorbed projections (2 x 128 x 512 x 256)."""
    c = op_coefficients(DEEPSEEK, BF16, DType.BF16)
    assert c.attention_flops_per_pair == 61 * 2 * 128 * (192 + 128)
    assert c.prefill_expand_flops_per_token == 61 * 2 * 512 * 128 * 256
    assert c.decode_attention_flops_per_token == 61 * (2 * 128 * 576 + 2 * 128 * 512)
    assert c.decode_absorb_flops_per_sequence == 61 * 2 * 128 * 512 * 256
    # Decode of 4 sequences at 1,000 tokens: FLOPs and the latent read once for all heads.
    load = decode_load(4, 1000)
    counts = count_step(c, load).op(OpClass.DECODE_ATTENTION)
    assert counts.flops == 4000 * c.decode_attention_flops_per_token + 4 * (
        c.decode_absorb_flops_per_sequence
    )
    assert counts.kv_read_bytes == 4000 * 70_272
    # Prefill of 1,000 tokens from scratch: causal pairs, and 1,000 latents expanded.
    prefill = count_step(c, prefill_load(1000)).op(OpClass.PREFILL_ATTENTION)
    pairs = 1000 * 1001 / 2
    assert prefill.flops == pairs * c.attention_flops_per_pair + 1000 * (
        c.prefill_expand_flops_per_token
    )


def test_mla_projections_by_hand() -> None:
    """Per token per layer at tp 8: q_a (7168 x 1536) and kv_a (7168 x 576) whole on each GPU,
    q_b 1536 x 16 x 192 and o 16 x 128 x 7168 split; kv_b's weights are read every step."""
    c = op_coefficients(DEEPSEEK, Deployment(tp=8), DType.BF16)
    q = 7168 * 1536 + 1536 * 16 * 192
    assert c.qkv_flops_per_token == 61 * 2 * (q + 7168 * 576)
    assert c.qkv_weight_bytes == 61 * 2 * (q + 7168 * 576 + 512 * 16 * 256)
    assert c.o_flops_per_token == 61 * 2 * 16 * 128 * 7168


def test_mla_weights_replicate_the_down_projections_under_tp() -> None:
    """At tp 8 each GPU holds 1/8 of everything sharded plus the whole q_a and kv_a
    (61 x 7168 x (1536 + 576) weights) and the norms: the difference to an even split."""
    fp8 = Deployment(tp=1, weight_dtype=DType.FP8)
    one = weight_bytes_per_gpu(DEEPSEEK, fp8)
    eight = weight_bytes_per_gpu(DEEPSEEK, replace(fp8, tp=8))
    replicated = 61 * 7168 * (1536 + 576) * 1.0  # fp8: a byte each
    norms = count_params(DEEPSEEK).norms * 2.0  # bf16
    assert eight - one / 8 == pytest.approx((replicated + norms) * (1 - 1 / 8), rel=1e-9)
    # 669.2 B linear weights / 8 + 1.85 B embedding and head x 2 bytes / 8 + 0.81 GB replicated.
    assert eight / 1e9 == pytest.approx(669.17 / 8 + 1.853 * 2 / 8 + 0.923 * 7 / 8, abs=0.02)


def test_mla_is_timed_and_tp_feasibility_says_why_dp() -> None:
    cost = StepCostModel(DEEPSEEK, H100, Deployment(tp=8, weight_dtype=DType.FP8))
    assert cost.seconds(decode_load(8, 4096)) > 0
    result = assess_tp(
        DEEPSEEK,
        H100,
        Deployment(weight_dtype=DType.FP8),
        batch_size=1,
        prompt_tokens=1024,
        context_tokens=4096,
        candidates=[8],
    )
    (candidate,) = result.candidates
    assert any("latent" in reason and "dp" in reason for reason in candidate.reasons)


def test_mla_spec_rules() -> None:
    with pytest.raises(SpecError) as caught:
        replace(DEEPSEEK, head_dim=128)
    assert caught.value.field == "head_dim"
    with pytest.raises(SpecError) as caught:
        replace(DEEPSEEK, num_kv_heads=8)
    assert caught.value.field == "num_kv_heads"


# ---- windows


def test_gpt_oss_parameters_and_shape() -> None:
    """36 layers: q and o 2880 x 4096, k and v 2880 x 512, q/k/v biases, 64 sinks; 128 experts
    of 3 x 2880 x 2880 and a 2880 x 128 router; embedding and head 201088 x 2880."""
    attention = 2 * 2880 * 4096 + 2 * 2880 * 512 + 4096 + 2 * 512 + 64
    experts = 128 * 3 * 2880 * 2880 + 2880 * 128
    total = 36 * (attention + experts + 2 * 2880) + 2880 + 2 * 201088 * 2880
    assert count_params(GPT_OSS).total == total == 116_789_235_264
    # The published 116,829,156,672 adds the expert, router and o_proj biases (39,921,408).
    assert total + 36 * (128 * (2 * 2880 + 2880) + 128 + 2880) == 116_829_156_672


def test_windowed_kv_cache_holds_only_the_window() -> None:
    """gpt-oss-120b at 8,192 tokens in 16-token blocks: 18 full layers hold 512 blocks, 18
    sliding layers at most ceil(128 / 16) + 1 = 9: slots (512 + 9) / 2 x 16 = 4,168 tokens of
    all-layer KV (2 x 36 x 8 x 64 x 2 = 73,728 bytes each)."""
    assert kv_slots(GPT_OSS, 8192, 16) == 4168
    assert kv_bytes_per_sequence(GPT_OSS, BF16, 8192) == 4168 * 73_728
    # Below the window every layer holds every token.
    assert kv_slots(GPT_OSS, 100, 16) == 112
    # Llama 4 Scout at 32,768: 12 global layers hold 2,048 blocks, 36 chunked ones 513.
    assert kv_slots(SCOUT, 32768, 16) == (2048 * 12 / 48 + 513 * 36 / 48) * 16


def test_windowed_attention_work_is_bounded() -> None:
    """A decode at 8,192 tokens of context reads 8,192 cached tokens on full layers and 128 on
    sliding ones: (8192 + 128) / 2 all-layer tokens; prefill of 8,192 tokens has 8192 x 8193 / 2
    pairs on full layers and at most 8,192 x 128 on sliding ones."""
    c = op_coefficients(GPT_OSS, BF16, DType.BF16)
    decode = count_step(c, decode_load(1, 8192)).op(OpClass.DECODE_ATTENTION)
    assert decode.kv_read_bytes == (8192 + 128) / 2 * 73_728
    assert decode.flops == (8192 + 128) / 2 * c.decode_attention_flops_per_token
    prefill = count_step(c, prefill_load(8192)).op(OpClass.PREFILL_ATTENTION)
    full_pairs = 8192 * 8193 / 2
    assert prefill.flops == (full_pairs / 2 + 8192 * 128 / 2) * c.attention_flops_per_pair
    # A model without windows is unchanged by the bound.
    dense = replace(GPT_OSS, sliding_window=0, window_layers=0)
    unbounded = count_step(op_coefficients(dense, BF16, DType.BF16), decode_load(1, 8192))
    assert unbounded.op(OpClass.DECODE_ATTENTION).kv_read_bytes == 8192 * 73_728


def test_windowed_sums_agree_with_step_by_step() -> None:
    """sum_seconds over decode steps that cross the window equals the step-by-step sum."""
    cost = StepCostModel(GPT_OSS, H100, Deployment(weight_dtype=DType.MXFP4))
    first, step = decode_load(8, 8 * 64), StepLoad(decode_context_tokens=8)
    by_step = sum(
        cost.seconds(
            StepLoad(decode_seqs=8, decode_context_tokens=first.decode_context_tokens + 8 * j)
        )
        for j in range(300)
    )
    assert cost.sum_seconds(first, step, 300) == pytest.approx(by_step, rel=1e-12)


def test_window_rules() -> None:
    with pytest.raises(SpecError) as caught:
        replace(GPT_OSS, sliding_window=0)
    assert caught.value.field == "window_layers"
    with pytest.raises(SpecError) as caught:
        replace(GPT_OSS, window_layers=37)
    assert caught.value.field == "window_layers"


def test_llama4_interleaved_moe_counts_dense_and_expert_layers() -> None:
    """Maverick: 24 dense layers of 3 x 5120 x 16384 and 24 MoE layers of 128 + 1 experts of
    3 x 5120 x 8192; 400.7 B for the language model (401.6 B published with the vision
    encoder)."""
    maverick = _model("llama-4-maverick")
    counted = count_params(maverick)
    assert counted.dense_ffn == 24 * 3 * 5120 * 16384
    assert counted.experts == 24 * 129 * 3 * 5120 * 8192
    assert counted.total == 400_711_848_960


def test_the_simulator_holds_only_the_window_of_windowed_layers() -> None:
    """gpt-oss-120b, 18 of 36 layers within 128 tokens. 40 prompts of 4,000 tokens (250 blocks
    of 16) arrive at once into 10 x 4,000 all-layer slots (2,500 blocks), one step may take
    them all. Keeping every layer's KV, 10 are admitted. With the window, counted in full-layer
    blocks, the pool is 2,500 / (1 - 0.5) = 5,000 and each prompt 250 + ceil(9 x 0.5 / 0.5) =
    259 of them: 19 at once."""
    cost = StepCostModel(GPT_OSS, H100, Deployment(weight_dtype=DType.MXFP4))
    assert cost.kv_window == (0.5, 128)
    trace = Trace.from_rows([(0.0, 4000, 1)] * 40)
    wide = SchedulerConfig(max_num_batched_tokens=200_000)
    capacity = 10 * 4000
    windowed = simulate(trace, cost, kv_capacity_tokens=capacity, scheduler=wide)
    dense = replace(GPT_OSS, sliding_window=0, window_layers=0)
    full = simulate(
        trace,
        StepCostModel(dense, H100, cost.deployment),
        kv_capacity_tokens=capacity,
        scheduler=wide,
    )
    assert full.max_running_requests == 10
    assert windowed.max_running_requests == 5000 // 259 == 19
    assert windowed.completed_requests == full.completed_requests == 40


def test_gpt_oss_serves_mxfp4_experts_beside_bf16_attention() -> None:
    """As published: attention (0.96 B), router, embedding and head in bf16; the 114.7 B of
    expert weights in MXFP4, 0.53125 bytes each with the E8M0 scale per 32. At tp 1:
    2 x (955,701,504 + 13,271,040 + 210,240 + 1,158,266,880) + 114,661,785,600 x 17/32."""
    assert (GPT_OSS.checkpoint_dtype, GPT_OSS.expert_checkpoint_dtype) == ("bf16", "mxfp4")
    as_published = weight_bytes_per_gpu(GPT_OSS, BF16)
    bf16 = 2 * (955_701_504 + 13_271_040 + 210_240 + 1_158_266_880)
    assert as_published == pytest.approx(bf16 + 114_661_785_600 * 17 / 32)
    assert as_published / 1e9 == pytest.approx(65.2, abs=0.1)
    # Asking for fp8 weights quantises the experts too; naming expert_dtype keeps them.
    fp8 = Deployment(weight_dtype=DType.FP8)
    assert expert_dtype_for(GPT_OSS, fp8) is DType.FP8
    assert expert_dtype_for(GPT_OSS, replace(fp8, expert_dtype=DType.MXFP4)) is DType.MXFP4
    # On Hopper (no FP4) the experts multiply in bf16; the attention projections too.
    cost = StepCostModel(GPT_OSS, H100, BF16)
    assert (cost.gemm_dtype, cost.expert_dtype) == (DType.BF16, DType.BF16)
