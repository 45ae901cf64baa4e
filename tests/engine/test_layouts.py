"""Parallel layouts (tp, dp, ep, pp) and link tiers: memory per GPU, KV pools, exchanges and
hand-offs against figures worked out by hand, and the layouts the engines refuse."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.engine.counting import (
    OpClass,
    kv_bytes_per_token,
    op_coefficients,
    straggler_factor,
)
from app.engine.dtypes import DType
from app.engine.estimates import deployment_warnings
from app.engine.memory import memory_plan, weight_bytes_per_gpu
from app.engine.params import count_params
from app.engine.simulation import SchedulerConfig, kv_capacity_tokens
from app.engine.specs import (
    IDEAL_EFFICIENCY,
    Deployment,
    GpuSpec,
    InterconnectSpec,
    ModelSpec,
    SpecError,
)
from app.engine.step_cost import StepCostModel, decode_load, layout_communication
from tests.engine.test_architectures import DEEPSEEK, GPT_OSS
from tests.engine.test_counting import LLAMA3_70B, MIXTRAL

# An H200 board: 141 GB, 4.8 TB/s, NVLink 4 in a domain of 8, a 400 Gb/s NIC per GPU.
H200 = GpuSpec(
    memory_bytes=150_754_820_096,
    memory_bandwidth_bytes_per_s=4.8e12,
    peak_flops_per_s={DType.BF16: 989.4e12, DType.FP16: 989.4e12, DType.FP8: 1978.9e12},
    interconnect=InterconnectSpec("nvlink4", 900e9, latency_s=1e-6),
    id="h200",
)
FP8 = Deployment(weight_dtype=DType.FP8)


def test_dp_with_ep_holds_attention_whole_and_an_eighth_of_the_experts() -> None:
    """DeepSeek-V3 FP8 on 8 GPUs as dp 8 x ep 8: every GPU holds all of attention (61 x
    187,105,280), the 3 dense FFNs (1,189,085,184) and 1/8 of the 656,463,101,952 expert
    weights in fp8, plus router, norms, embedding and head in bf16."""
    params = count_params(DEEPSEEK)
    layout = replace(FP8, dp=8, ep=8)
    fp8_bytes = 61 * 187_105_280 + 1_189_085_184 + 656_463_101_952 / 8
    bf16_bytes = 2 * (params.router + params.norms + params.embedding + params.lm_head)
    assert weight_bytes_per_gpu(DEEPSEEK, layout) == pytest.approx(fp8_bytes + bf16_bytes)
    assert weight_bytes_per_gpu(DEEPSEEK, layout) / 1e9 == pytest.approx(98.58, abs=0.01)
    # tp 8 splits attention too: 84.9 GB, but caches every latent on all 8 GPUs.
    assert weight_bytes_per_gpu(DEEPSEEK, replace(FP8, tp=8)) / 1e9 == pytest.approx(84.93, 0.01)


def test_dp_gives_each_rank_its_own_kv_pool() -> None:
    """The latent is 70,272 bytes per token on each GPU either way; dp 8 has 8 pools, so the
    replica caches 8 x pool / 70,272 tokens where tp 8 caches pool / 70,272."""
    dp = memory_plan(DEEPSEEK, H200, replace(FP8, dp=8, ep=8))
    tp = memory_plan(DEEPSEEK, H200, replace(FP8, tp=8))
    assert dp.kv_bytes_per_token == tp.kv_bytes_per_token == 70_272
    assert dp.kv_pools == 8
    assert dp.replica_kv_tokens == (dp.kv_pool_bytes // 70_272) * 8
    assert tp.replica_kv_tokens == tp.kv_pool_bytes // 70_272
    # Fewer weights per GPU under tp, but 8 pools beat one: more than 5x the tokens.
    assert dp.replica_kv_tokens > 5 * tp.replica_kv_tokens
    assert kv_capacity_tokens(dp, 16) == (dp.kv_pool_bytes // 70_272) // 16 * 16 * 8


def test_ep_all_to_all_by_hand() -> None:
    """Per replica token, ep 8 over one NVLink domain: each of 58 MoE layers dispatches and
    combines 8 experts' copies of d = 7,168 bf16 activations, 7/8 of them elsewhere, each GPU
    its 1/8 share, over 450 GB/s one way; two latencies per layer."""
    layout = replace(FP8, dp=8, ep=8)
    c = op_coefficients(DEEPSEEK, layout, DType.BF16)
    per_token, latency, stage, stage_latency = layout_communication(
        DEEPSEEK, H200, layout, IDEAL_EFFICIENCY, c
    )
    assert per_token == pytest.approx(58 * 2 * 8 * 7168 * 2 * (7 / 8) / 8 / 450e9)
    assert latency == pytest.approx(58 * 2 * 1e-6)
    assert stage == stage_latency == 0.0
    # Across two boards (ep 16) the exchange runs at the NIC's 50 GB/s.
    wide = replace(FP8, dp=16, ep=16)
    c16 = op_coefficients(DEEPSEEK, wide, DType.BF16)
    per_token16, latency16, _, _ = layout_communication(DEEPSEEK, H200, wide, IDEAL_EFFICIENCY, c16)
    assert per_token16 == pytest.approx(58 * 2 * 8 * 7168 * 2 * (15 / 16) / 16 / 50e9)
    assert latency16 == pytest.approx(58 * 2 * 5e-6)


def test_dp_splits_attention_and_the_experts_see_every_rank() -> None:
    """dp 8 x ep 8 decoding 64 sequences: each rank's attention reads 8 sequences' latents;
    the experts of every GPU take all 64 tokens' routed copies / 8, at the busiest GPU's share."""
    layout = replace(FP8, dp=8, ep=8)
    cost = StepCostModel(DEEPSEEK, H200, layout)
    one_rank = StepCostModel(DEEPSEEK, H200, FP8)
    step = cost.breakdown(decode_load(64, 2048))
    rank = one_rank.breakdown(decode_load(8, 2048))
    attention = {op.op_class: op for op in step.ops}
    rank_ops = {op.op_class: op for op in rank.ops}
    assert attention[OpClass.DECODE_ATTENTION].seconds == pytest.approx(
        rank_ops[OpClass.DECODE_ATTENTION].seconds
    )
    experts = attention[OpClass.MOE_EXPERTS]
    c = cost.coefficients
    # 512 picks over 8 GPUs: the busiest takes 1.18x the mean, times the traffic's 1.3.
    assert experts.compute_s == pytest.approx(
        1.3 * straggler_factor(64 * 8, 8) * 64 * c.expert_flops_per_token / 1978.9e12, rel=1e-9
    )
    assert cost.seconds(decode_load(64, 2048)) == pytest.approx(step.total_s)


def test_pp_stages_hold_their_layers_and_hand_off() -> None:
    """Llama-3-70B at tp 4 x pp 2: 40 layers per stage (half the layer weights and KV per
    GPU, the embedding or the head whole on its stage) and one hand-off of d = 8,192 bf16 per
    token between the stages. A step's sequences are split into one micro-batch per stage: 32
    decoding sequences take what 16 take through both stages (the other 16 fill the other
    stage), plus the hand-off of 16 tokens; a lone sequence is not split."""
    tp4 = Deployment(tp=4)
    pp2 = replace(tp4, pp=2)
    params = count_params(LLAMA3_70B)
    ends = params.embedding * 2 / 4
    layers = weight_bytes_per_gpu(LLAMA3_70B, tp4) - (params.embedding + params.lm_head) * 2 / 4
    assert weight_bytes_per_gpu(LLAMA3_70B, pp2) == pytest.approx(layers / 2 + ends)
    assert kv_bytes_per_token(LLAMA3_70B, pp2) == kv_bytes_per_token(LLAMA3_70B, tp4) / 2
    one, two = StepCostModel(LLAMA3_70B, H200, tp4), StepCostModel(LLAMA3_70B, H200, pp2)
    handoff = 16 * 8192 * 2 / 450e9 + 1e-6
    assert two.seconds(decode_load(32, 1024)) == pytest.approx(
        one.seconds(decode_load(16, 1024)) + handoff, rel=1e-9
    )
    lone = two.seconds(decode_load(1, 1024)) - one.seconds(decode_load(1, 1024))
    assert lone == pytest.approx(8192 * 2 / 450e9 + 1e-6, rel=1e-6)
    assert two.micro_batches(32) == 2.0
    assert two.micro_batches(1) == one.micro_batches(32) == 1.0
    assert pp2.scheduler_batches == 2


def test_the_replica_scheduler_has_every_ranks_budget() -> None:
    config = SchedulerConfig(max_num_seqs=128, max_num_batched_tokens=4096)
    assert config.for_ranks(1) is config
    ranks = config.for_ranks(8)
    assert (ranks.max_num_seqs, ranks.max_num_batched_tokens) == (1024, 32768)


@pytest.mark.parametrize(
    ("model", "layout", "field", "words"),
    [
        (LLAMA3_70B, {"tp": 2, "dp": 2}, "dp", "replicas"),
        (LLAMA3_70B, {"tp": 2, "ep": 2}, "ep", "no experts"),
        (GPT_OSS, {"dp": 8, "ep": 4}, "ep", "1 or 8"),
        (MIXTRAL, {"tp": 2, "dp": 8, "ep": 16}, "ep", "8 experts"),
        (MIXTRAL, {"tp": 1, "dp": 3}, "dp", "does not divide"),
        (LLAMA3_70B, {"tp": 1, "pp": 81}, "pp", "80 layers"),
    ],
)
def test_layouts_the_engines_do_not_run_are_refused(
    model: ModelSpec, layout: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(SpecError) as caught:
        StepCostModel(model, H200, Deployment(**layout))
    assert caught.value.field == field
    assert words in caught.value.message


def test_ep_that_is_not_tp_times_dp_is_refused_at_the_spec() -> None:
    with pytest.raises(SpecError) as caught:
        Deployment(tp=2, dp=2, ep=2)
    assert caught.value.field == "ep"


def test_tp_across_link_domains_is_flagged() -> None:
    warnings = deployment_warnings(StepCostModel(LLAMA3_70B, H200, Deployment(tp=16)))
    assert any("spans 2 link domains" in w and "scale-out" in w for w in warnings)
    # Within a board: no such warning; an MLA model at tp 8 is told why dp.
    assert not any(
        "link domains" in w
        for w in deployment_warnings(StepCostModel(LLAMA3_70B, H200, Deployment(tp=8)))
    )
    mla = deployment_warnings(StepCostModel(DEEPSEEK, H200, replace(FP8, tp=8)))
    assert any("latent" in w and "dp" in w for w in mla)


def test_an_nvl72_rack_keeps_wide_expert_parallelism_on_nvlink() -> None:
    """ep 16 over GB300s stays within the 72-GPU NVLink domain (900 GB/s one way); over HGX
    H200s it crosses boards at the NIC's 50 GB/s: 18x the exchange time per token."""
    nvl72 = replace(
        H200,
        interconnect=InterconnectSpec("nvlink5", 1800e9, latency_s=1e-6, domain_size=72),
    )
    wide = replace(FP8, dp=16, ep=16)
    c = op_coefficients(DEEPSEEK, wide, DType.BF16)
    rack, _, _, _ = layout_communication(DEEPSEEK, nvl72, wide, IDEAL_EFFICIENCY, c)
    board, _, _, _ = layout_communication(DEEPSEEK, H200, wide, IDEAL_EFFICIENCY, c)
    assert board / rack == pytest.approx(900e9 / 50e9)


def test_few_tokens_routed_over_many_gpus_leave_one_busiest() -> None:
    """Balls in bins: one token's top-8 picks over 8 GPUs put 2.58 on the busiest (Poisson
    loads of mean 1: E[max] = sum over m of 1 - F(m)^8); one pick puts all of it on one GPU
    (8x the mean); a large batch evens out; one GPU has no straggler."""
    assert straggler_factor(8, 8) == pytest.approx(2.58, abs=0.01)
    assert straggler_factor(1, 8) == pytest.approx(8.0)
    assert straggler_factor(8 * 4096, 8) == pytest.approx(1.0, abs=0.03)
    assert straggler_factor(64, 1) == 1.0
    # The decode of one DeepSeek sequence under ep 8 takes the busiest GPU's experts.
    ep = StepCostModel(DEEPSEEK, H200, replace(FP8, dp=8, ep=8))
    experts = {op.op_class: op for op in ep.breakdown(decode_load(1, 1000)).ops}
    c = ep.coefficients
    assert experts[OpClass.MOE_EXPERTS].compute_s == pytest.approx(
        1.3 * straggler_factor(8, 8) * c.expert_flops_per_token / 1978.9e12
    )


def test_a_perfectly_balanced_traffic_still_has_routings_straggler() -> None:
    """expert_imbalance 1 removes the traffic's skew, not the randomness of few tokens."""
    balanced = StepCostModel(DEEPSEEK, H200, replace(FP8, dp=8, ep=8, expert_imbalance=1.0))
    experts = {op.op_class: op for op in balanced.breakdown(decode_load(1, 1000)).ops}
    c = balanced.coefficients
    assert experts[OpClass.MOE_EXPERTS].compute_s == pytest.approx(
        straggler_factor(8, 8) * c.expert_flops_per_token / 1978.9e12
    )
