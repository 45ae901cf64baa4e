"""Memory on one GPU: weights, KV cache, activation reserve, KV pool."""

from __future__ import annotations

import pytest

from app.engine.dtypes import DType
from app.engine.memory import (
    activation_reserve_bytes,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_tokens_per_sequence,
    memory_plan,
    weight_bytes_per_gpu,
)
from app.engine.params import count_params
from app.engine.specs import Deployment, SpecError
from app.engine.units import GIB
from tests.engine.test_counting import A100, LLAMA3_8B, LLAMA3_70B, MIXTRAL


def test_weights_shard_by_tp_except_norms() -> None:
    one = weight_bytes_per_gpu(LLAMA3_8B, Deployment(tp=1))
    two = weight_bytes_per_gpu(LLAMA3_8B, Deployment(tp=2))
    norms = (2 * 4096 * 32 + 4096) * 2
    assert two == pytest.approx((one - norms) / 2 + norms, rel=1e-12)


def test_kv_projection_is_replicated_beyond_the_kv_heads() -> None:
    """tp 16 on K=8: each GPU holds one whole KV head's K and V projections, not half."""
    eight = weight_bytes_per_gpu(LLAMA3_70B, Deployment(tp=8))
    sixteen = weight_bytes_per_gpu(LLAMA3_70B, Deployment(tp=16))
    kv_proj = 2 * 8192 * 8 * 128 * 80 * 2  # all layers, bf16
    norms = (2 * 8192 * 80 + 8192) * 2
    expected = (eight - norms - kv_proj / 8) / 2 + kv_proj / 8 + norms
    assert sixteen == pytest.approx(expected, rel=1e-12)


def test_quantised_weights_keep_embedding_and_lm_head_in_bf16() -> None:
    counts = count_params(LLAMA3_8B)
    int4 = weight_bytes_per_gpu(LLAMA3_8B, Deployment(weight_dtype=DType.INT4))
    # The attention projections and the FFN are int4; embedding, LM head and norms stay bf16.
    quantised = counts.attention + counts.ffn
    expected = quantised * 0.5 + (counts.embedding + counts.lm_head + counts.norms) * 2
    assert int4 == pytest.approx(expected, rel=1e-12)


def test_mixtral_router_stays_in_bf16_and_experts_shard() -> None:
    """Mixtral at tp 2 in fp8: attention and experts 1 byte and halved, the 4096x8 routers and
    the embedding and LM head 2 bytes and halved, norms 2 bytes on every GPU."""
    fp8 = weight_bytes_per_gpu(MIXTRAL, Deployment(tp=2, weight_dtype=DType.FP8))
    attention = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    experts = 32 * 8 * 3 * 4096 * 14336
    router = 32 * 4096 * 8
    table = 32000 * 4096
    norms = 32 * 2 * 4096 + 4096
    expected = (attention + experts) / 2 + (2 * table + router) / 2 * 2 + norms * 2
    assert fp8 == expected


def test_counted_params_may_be_passed_in() -> None:
    counted = count_params(LLAMA3_70B)
    for tp in (1, 2, 8, 16):
        deployment = Deployment(tp=tp)
        assert weight_bytes_per_gpu(LLAMA3_70B, deployment, params=counted) == weight_bytes_per_gpu(
            LLAMA3_70B, deployment
        )
        assert memory_plan(LLAMA3_70B, A100, deployment, params=counted) == memory_plan(
            LLAMA3_70B, A100, deployment
        )


def test_kv_per_token_and_sequence_rounded_to_blocks() -> None:
    assert kv_bytes_per_token(LLAMA3_8B, Deployment(kv_dtype=DType.FP8)) == 65_536
    assert kv_bytes_per_token(LLAMA3_70B, Deployment(tp=16)) == 2 * 80 * 1 * 128 * 2
    # 2049 tokens occupy 129 blocks of 16.
    assert kv_tokens_per_sequence(2049) == 129 * 16
    assert kv_tokens_per_sequence(2048) == 2048
    assert kv_bytes_per_sequence(LLAMA3_8B, Deployment(), 2049) == 129 * 16 * 131_072
    assert kv_bytes_per_sequence(LLAMA3_8B, Deployment(), 2049, block_tokens=1) == 2049 * 131_072
    with pytest.raises(SpecError) as error:
        kv_bytes_per_sequence(LLAMA3_8B, Deployment(), 2049, block_tokens=0)
    assert error.value.field == "block_tokens"


def test_activation_reserve_by_hand() -> None:
    """Llama-3-8B, 8192 tokens, bf16: hidden+residual 2*T*d, widest of attention
    (2*32 + 2*8)*128 = 10,240 and gated FFN 3*14336 = 43,008 per token; sampler 2*256*V*4."""
    expected = 8192 * (2 * 4096 + 43_008) * 2 + 2 * 256 * 128_256 * 4
    assert activation_reserve_bytes(LLAMA3_8B, Deployment()) == pytest.approx(expected)


def test_memory_plan_leaves_the_kv_pool() -> None:
    plan = memory_plan(LLAMA3_8B, A100, Deployment(), gpu_memory_utilization=0.9)
    assert plan.usable_bytes == pytest.approx(0.9 * 80 * GIB)
    assert plan.kv_pool_bytes == pytest.approx(
        plan.usable_bytes - plan.weights_bytes - plan.activation_reserve_bytes
    )
    assert plan.fits_weights
    with pytest.raises(SpecError) as error:
        memory_plan(LLAMA3_8B, A100, Deployment(), gpu_memory_utilization=1.5)
    assert error.value.field == "gpu_memory_utilization"
