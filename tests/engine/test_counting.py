"""Counting: FLOPs and bytes per op class, checked against hand formulas (docs/model.md).

The GPU and model specs defined here are datasheet/config figures and are reused by the other
engine tests (imported from this module).
"""

from __future__ import annotations

import pytest

from app.engine.counting import (
    OpClass,
    attention_dtype_for,
    count_step,
    expected_distinct_experts,
    kv_heads_per_gpu,
    op_coefficients,
    pairs_for_chunk,
    validate_tp,
)
from app.engine.dtypes import DType
from app.engine.specs import (
    Deployment,
    FfnType,
    GpuSpec,
    InterconnectSpec,
    ModelSpec,
    MoeSpec,
    SpecError,
)
from app.engine.step_cost import decode_load, prefill_load
from app.engine.units import GIB

# NVIDIA A100 SXM4 80GB datasheet: bf16 312 TFLOP/s dense, 2.039 TB/s, NVLink3 600 GB/s.
A100 = GpuSpec(
    memory_bytes=80 * GIB,
    memory_bandwidth_bytes_per_s=2.039e12,
    peak_flops_per_s={DType.BF16: 312e12, DType.FP16: 312e12, DType.INT8: 624e12},
    interconnect=InterconnectSpec("nvlink3", 600e9),
    id="a100-sxm4-80gb",
)
# NVIDIA H100 SXM5 datasheet: bf16 989.4 TFLOP/s dense, fp8 1978.9, 3.35 TB/s, NVLink4 900 GB/s.
H100 = GpuSpec(
    memory_bytes=80 * GIB,
    memory_bandwidth_bytes_per_s=3.35e12,
    peak_flops_per_s={
        DType.BF16: 989.4e12,
        DType.FP16: 989.4e12,
        DType.FP8: 1978.9e12,
        DType.INT8: 1978.9e12,
    },
    interconnect=InterconnectSpec("nvlink4", 900e9),
    id="h100-sxm5-80gb",
)
# Hugging Face config.json figures.
LLAMA3_8B = ModelSpec(
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    ffn_type=FfnType.GATED,
    vocab_size=128256,
    max_context_tokens=131072,
    id="llama-3-8b",
)
LLAMA2_7B = ModelSpec(
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=32,
    head_dim=128,
    intermediate_size=11008,
    ffn_type=FfnType.GATED,
    vocab_size=32000,
    max_context_tokens=4096,
    id="llama-2-7b",
)
LLAMA3_70B = ModelSpec(
    num_layers=80,
    hidden_size=8192,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=28672,
    ffn_type=FfnType.GATED,
    vocab_size=128256,
    max_context_tokens=131072,
    id="llama-3-70b",
)
# Article A's "7B-class MHA" model: d=4096, L=32, plain MLP f=4d.
SEED_MHA = ModelSpec(
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=32,
    head_dim=128,
    intermediate_size=4 * 4096,
    ffn_type=FfnType.MLP,
    vocab_size=32000,
    max_context_tokens=262144,
    id="article-a-mha",
)
MIXTRAL = ModelSpec(
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    ffn_type=FfnType.GATED,
    vocab_size=32000,
    max_context_tokens=32768,
    moe=MoeSpec(num_experts=8, experts_per_token=2, expert_intermediate_size=14336),
    id="mixtral-8x7b",
)

D = 4096


def test_seed_mha_linear_flops_are_24_d_squared_per_token_per_layer() -> None:
    c = op_coefficients(SEED_MHA, Deployment(), DType.BF16)
    assert c.linear_flops_per_token == 24 * D * D * 32  # Q, K, V, O 8d^2 + MLP 16d^2
    assert c.attention_flops_per_pair == 4 * D * 32  # QK^T and AV, 2*d each per pair


def test_gqa_projections_shrink_k_and_v_only() -> None:
    c = op_coefficients(LLAMA3_8B, Deployment(), DType.BF16)
    # Q and O: 2*d*H*h each; K and V: 2*d*K*h each, with K = 8 of 32 heads.
    assert c.qkv_flops_per_token == 2 * D * (32 + 2 * 8) * 128 * 32
    assert c.o_flops_per_token == 2 * D * D * 32
    assert c.ffn_flops_per_token == 3 * 2 * D * 14336 * 32  # gated: gate, up, down
    assert c.kv_bytes_per_token == 2 * 8 * 128 * 2 * 32  # 131,072 bytes


def test_mqa_keeps_one_kv_head() -> None:
    mqa = ModelSpec(
        num_layers=2,
        hidden_size=1024,
        num_attention_heads=16,
        num_kv_heads=1,
        head_dim=64,
        intermediate_size=4096,
        ffn_type=FfnType.MLP,
        vocab_size=1000,
        max_context_tokens=2048,
    )
    c = op_coefficients(mqa, Deployment(), DType.BF16)
    assert c.kv_bytes_per_token == 2 * 1 * 64 * 2 * 2
    assert c.ffn_flops_per_token == 2 * 2 * 1024 * 4096 * 2  # plain MLP: up and down


def test_causal_and_non_causal_pairs() -> None:
    assert pairs_for_chunk(4, 10, causal=True) == 4 * 10 + 4 * 5 / 2
    assert pairs_for_chunk(4, 10, causal=False) == 4 * 14


def test_prefill_counts_lm_head_once_per_sequence() -> None:
    c = op_coefficients(LLAMA3_8B, Deployment(), DType.BF16)
    counts = count_step(c, prefill_load(1000, batch_size=3))
    assert counts.lm_head_flops == pytest.approx(3 * 2 * D * 128256, rel=1e-12)
    assert counts.op(OpClass.QKV_PROJ).flops == pytest.approx(3000 * c.qkv_flops_per_token)


def test_decode_counts_kv_reads_per_context_token() -> None:
    c = op_coefficients(LLAMA3_8B, Deployment(), DType.BF16)
    counts = count_step(c, decode_load(4, 1000))
    attention = counts.op(OpClass.DECODE_ATTENTION)
    assert attention.kv_read_bytes == 4 * 1000 * 131072
    assert attention.kv_write_bytes == 4 * 131072
    assert attention.flops == 4 * 1000 * 4 * 32 * 128 * 32


@pytest.mark.parametrize(
    ("dtype", "factor"),
    [(DType.BF16, 1.0), (DType.FP16, 1.0), (DType.FP8, 0.5), (DType.INT8, 0.5), (DType.INT4, 0.25)],
)
def test_weight_bytes_scale_with_weight_dtype(dtype: DType, factor: float) -> None:
    bf16 = op_coefficients(LLAMA3_8B, Deployment(), DType.BF16)
    other = op_coefficients(LLAMA3_8B, Deployment(weight_dtype=dtype), DType.BF16)
    assert other.ffn_weight_bytes == pytest.approx(bf16.ffn_weight_bytes * factor, rel=1e-12)
    assert other.lm_head_weight_bytes == bf16.lm_head_weight_bytes  # LM head stays bf16


def test_kv_dtype_scales_kv_bytes() -> None:
    fp8 = op_coefficients(LLAMA3_8B, Deployment(kv_dtype=DType.FP8), DType.FP8)
    assert fp8.kv_bytes_per_token == 65536
    assert fp8.attention_qo_bytes_per_token == 2 * 32 * 128 * 1 * 32


def test_tp_splits_flops_but_not_their_total() -> None:
    load = prefill_load(512)
    one = count_step(op_coefficients(LLAMA3_8B, Deployment(tp=1), DType.BF16), load)
    eight = count_step(op_coefficients(LLAMA3_8B, Deployment(tp=8), DType.BF16), load)
    assert eight.flops == pytest.approx(one.flops, rel=1e-12)
    per_gpu = op_coefficients(LLAMA3_8B, Deployment(tp=8), DType.BF16)
    assert per_gpu.ffn_flops_per_token * 8 == pytest.approx(one.op(OpClass.FFN).flops / 512)


def test_tp_beyond_kv_heads_replicates_kv_physically() -> None:
    assert kv_heads_per_gpu(LLAMA3_70B, 16) == 1.0
    assert kv_heads_per_gpu(LLAMA3_70B, 4) == 2.0
    load = decode_load(1, 4096)
    eight = count_step(op_coefficients(LLAMA3_70B, Deployment(tp=8), DType.BF16), load)
    sixteen = count_step(op_coefficients(LLAMA3_70B, Deployment(tp=16), DType.BF16), load)
    assert sixteen.kv_bytes == pytest.approx(2 * eight.kv_bytes, rel=1e-12)


@pytest.mark.parametrize("tp", [3, 5, 64])
def test_tp_that_cannot_split_the_heads_names_tp(tp: int) -> None:
    with pytest.raises(SpecError) as error:
        validate_tp(LLAMA3_8B, tp)
    assert error.value.field == "tp"


def test_moe_reads_only_touched_experts() -> None:
    c = op_coefficients(MIXTRAL, Deployment(), DType.BF16)
    expert = 3 * D * 14336 * 2 * 32  # one expert's gate/up/down over 32 layers, bf16
    assert c.routed_expert_weight_bytes == expert
    assert c.expert_flops_per_token == 2 * 2 * 3 * D * 14336 * 32  # top-2
    one = count_step(c, decode_load(1, 100)).op(OpClass.MOE_EXPERTS)
    assert one.weight_bytes == pytest.approx(2 * expert, rel=1e-12)  # one token: k experts
    many = count_step(c, prefill_load(4096)).op(OpClass.MOE_EXPERTS)
    assert many.weight_bytes == pytest.approx(8 * expert, rel=1e-9)  # all E experts


def test_expected_distinct_experts_formula() -> None:
    # E*(1-(1-k/E)^B): B=2, E=8, k=2 -> 8*(1-0.75^2) = 3.5.
    assert expected_distinct_experts(8, 2, 2) == pytest.approx(3.5, rel=1e-12)
    assert expected_distinct_experts(8, 2, 0) == 0.0


def test_shared_experts_are_always_read() -> None:
    model = ModelSpec(
        num_layers=4,
        hidden_size=1024,
        num_attention_heads=8,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=4096,
        ffn_type=FfnType.GATED,
        vocab_size=1000,
        max_context_tokens=4096,
        moe=MoeSpec(
            num_experts=64,
            experts_per_token=6,
            expert_intermediate_size=512,
            num_shared_experts=2,
            num_dense_layers=1,
        ),
    )
    c = op_coefficients(model, Deployment(), DType.BF16)
    assert c.shared_expert_weight_bytes == 3 * 1024 * 2 * 512 * 2 * 3  # 2 shared, 3 MoE layers
    assert c.ffn_weight_bytes == 3 * 1024 * 4096 * 2 * 1  # the one dense layer
    experts = count_step(c, decode_load(1, 10)).op(OpClass.MOE_EXPERTS)
    assert experts.weight_bytes == pytest.approx(
        6 * c.routed_expert_weight_bytes + c.shared_expert_weight_bytes, rel=1e-12
    )


def test_attention_runs_in_fp8_only_where_the_gpu_has_it() -> None:
    fp8_kv = Deployment(kv_dtype=DType.FP8)
    assert attention_dtype_for(H100, fp8_kv) is DType.FP8
    assert attention_dtype_for(A100, fp8_kv) is DType.BF16
    assert attention_dtype_for(H100, Deployment()) is DType.BF16
