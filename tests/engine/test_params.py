"""Parameter counts: hand-computed totals, the catalog against published counts, invariants."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine.params import ParamCount, count_params
from app.engine.specs import FfnType, ModelSpec, MoeSpec
from app.formats.specs import build_spec


def _catalog() -> list[dict[str, Any]]:
    text = resources.files("app.catalog").joinpath("data/models.json").read_text("utf-8")
    models: list[dict[str, Any]] = json.loads(text)["models"]
    return models


def _spec(entry: dict[str, Any]) -> ModelSpec:
    spec: ModelSpec = build_spec(ModelSpec, entry | {"id": entry["id"]})
    return spec


CATALOG = {entry["id"]: entry for entry in _catalog()}

# Llama-2-7B (meta-llama/Llama-2-7b-hf config.json): MHA, SwiGLU, untied.
LLAMA_2_7B = ModelSpec(
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=32,
    head_dim=128,
    intermediate_size=11008,
    ffn_type=FfnType.GATED,
    vocab_size=32000,
    max_context_tokens=4096,
)
# Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json): GQA with 8 KV heads.
LLAMA_3_8B = replace(LLAMA_2_7B, num_kv_heads=8, intermediate_size=14336, vocab_size=128256)
# Llama-3-70B (meta-llama/Meta-Llama-3-70B config.json).
LLAMA_3_70B = replace(
    LLAMA_3_8B, num_layers=80, hidden_size=8192, num_attention_heads=64, intermediate_size=28672
)
# Mixtral-8x7B (mistralai/Mixtral-8x7B-v0.1 config.json): Mistral-7B attention, 8 experts, top-2.
MIXTRAL_8X7B = replace(
    LLAMA_3_8B,
    vocab_size=32000,
    max_context_tokens=32768,
    moe=MoeSpec(num_experts=8, experts_per_token=2, expert_intermediate_size=14336),
)


def test_llama_2_7b_exact_breakdown() -> None:
    # Hand count: embedding 32000*4096; per layer Q,K,V,O 4*4096^2 = 67,108,864 and SwiGLU
    # 3*4096*11008 = 135,266,304; norms 2*4096 per layer + 4096 final; LM head 32000*4096.
    assert count_params(LLAMA_2_7B) == ParamCount(
        embedding=131_072_000,
        attention=32 * 67_108_864,
        attention_qo=32 * 33_554_432,
        attention_kv=32 * 33_554_432,
        ffn=32 * 135_266_304,
        dense_ffn=32 * 135_266_304,
        router=0,
        experts=0,
        norms=32 * 8192 + 4096,
        lm_head=131_072_000,
        mtp=0,
        total=6_738_415_616,
        active=6_738_415_616,
        non_embedding=6_738_415_616 - 131_072_000,
        active_non_embedding=6_738_415_616 - 131_072_000,
    )


@pytest.mark.parametrize(
    ("model", "params"),
    # Hugging Face model cards' exact parameter counts.
    [
        (LLAMA_2_7B, 6_738_415_616),
        (LLAMA_3_8B, 8_030_261_248),
        (LLAMA_3_70B, 70_553_706_496),
        (MIXTRAL_8X7B, 46_702_792_704),
    ],
)
def test_totals_match_the_model_cards(model: ModelSpec, params: int) -> None:
    assert count_params(model).total == params


def test_llama_3_8b_exact_total() -> None:
    counted = count_params(LLAMA_3_8B)
    # Per layer: Q and O 2*4096*4096 = 33,554,432; K and V 2*4096*1024 = 8,388,608.
    assert counted.attention_qo == 32 * 33_554_432
    assert counted.attention_kv == 32 * 8_388_608
    assert counted.attention == 32 * (33_554_432 + 8_388_608)
    # Per layer SwiGLU 3*4096*14336 = 176,160,768.
    assert counted.ffn == 32 * 176_160_768
    # 2 * 128256*4096 (embedding + LM head) + 1,342,177,280 + 5,637,144,576 + 266,240.
    assert counted.total == 8_030_261_248


def test_mixtral_8x7b_total_and_active() -> None:
    counted = count_params(MIXTRAL_8X7B)
    expert = 3 * 4096 * 14336  # 176,160,768 per SwiGLU expert
    # Per layer: 8 experts plus a 4096x8 router; no dense FFN layer.
    assert counted.experts == 32 * 8 * expert
    assert counted.router == 32 * 4096 * 8
    assert counted.dense_ffn == 0
    assert counted.ffn == 32 * (8 * expert + 4096 * 8)
    # 2*32000*4096 + 32*41,943,040 + 32*1,409,318,912 + 266,240, computed by hand.
    assert counted.total == 46_702_792_704
    # Only 2 of 8 experts per token: 6 experts per layer drop out.
    assert counted.active == 46_702_792_704 - 32 * 6 * expert == 12_879_925_248
    # Mixtral of Experts (arXiv:2401.04088) and Mistral's release: 46.7B total, 12.9B active;
    # rounding to 3 significant figures leaves at most 0.5 % either way.
    assert counted.total == pytest.approx(46.7e9, rel=0.005)
    assert counted.active == pytest.approx(12.9e9, rel=0.005)


def test_moe_with_dense_layers_and_shared_experts() -> None:
    # A DeepSeek-style toy: 3 layers, the first dense; 4 routed experts of width 6, top-2, and
    # one shared expert (width 0 means "same as a routed expert").
    model = ModelSpec(
        num_layers=3,
        hidden_size=8,
        num_attention_heads=2,
        num_kv_heads=2,
        head_dim=4,
        intermediate_size=16,
        ffn_type=FfnType.GATED,
        vocab_size=10,
        max_context_tokens=64,
        moe=MoeSpec(
            num_experts=4,
            experts_per_token=2,
            expert_intermediate_size=6,
            num_shared_experts=1,
            num_dense_layers=1,
        ),
    )
    counted = count_params(model)
    # Dense layer 3*8*16 = 384; each MoE layer: router 8*4 = 32, experts 4*144, shared 144.
    assert (counted.dense_ffn, counted.router, counted.experts) == (384, 2 * 32, 2 * 5 * 144)
    assert counted.ffn == 384 + 2 * (32 + 4 * 144 + 144)
    assert counted.active == counted.total - 2 * 2 * 144
    # Embedding 80, attention 3*256, norms 3*16 + 8, LM head 80.
    assert counted.total == 80 + 768 + 1888 + 56 + 80 == 2872
    assert counted.active_non_embedding == counted.active - 80 == 2216

    assert model.moe is not None
    wider_shared = replace(model, moe=replace(model.moe, shared_expert_intermediate_size=10))
    # The shared expert widens from 3*8*6 = 144 to 3*8*10 = 240 in both MoE layers.
    assert count_params(wider_shared).total == 2872 + 2 * (240 - 144)


def test_tied_embeddings_are_counted_once() -> None:
    untied = count_params(LLAMA_3_8B)
    tied = count_params(replace(LLAMA_3_8B, tie_word_embeddings=True))
    table = 128256 * 4096
    assert tied.lm_head == 0
    assert tied.total == untied.total - table
    # The tied matrix still does the output matmul, so the matmul weights do not change.
    assert tied.non_embedding == untied.non_embedding
    assert tied.embedding + tied.non_embedding == tied.total + table


def test_attention_bias_adds_qkv_biases() -> None:
    qwen = _spec(CATALOG["qwen2.5-7b"])
    without = count_params(replace(qwen, attention_bias=False))
    biased = count_params(qwen)
    # 28 layers of Q (28*128) + K and V (2 * 4*128) biases.
    assert biased.total - without.total == 28 * (3584 + 2 * 512) == 129_024
    assert biased.attention_qo - without.attention_qo == 28 * 3584
    assert biased.attention_kv - without.attention_kv == 28 * 2 * 512


def test_plain_mlp_matches_article_a_layer() -> None:
    # Article A's model: d = 4096, MHA, plain MLP of 4d, so 4d^2 attention + 8d^2 MLP weights per
    # layer: the 12*d^2 behind its 24*n*d^2 linear FLOPs.
    d = 4096
    seed = replace(LLAMA_2_7B, intermediate_size=4 * d, ffn_type=FfnType.MLP)
    counted = count_params(seed)
    assert counted.attention + counted.ffn == 32 * 12 * d * d


@pytest.mark.parametrize("model_id", sorted(CATALOG))
def test_catalog_total_within_1_percent_of_published(model_id: str) -> None:
    entry = CATALOG[model_id]
    assert count_params(_spec(entry)).total == pytest.approx(entry["published_params"], rel=0.01)


@pytest.mark.parametrize("model_id", ["llama-2-7b", "llama-3-8b", "mixtral-8x7b", "qwen2.5-7b"])
def test_catalog_matches_published_exactly_where_fully_modelled(model_id: str) -> None:
    # Llama, Mixtral and Qwen2 store no weights outside ParamCount's components.
    entry = CATALOG[model_id]
    assert count_params(_spec(entry)).total == entry["published_params"]


def test_qwen3_30b_a3b_active_matches_model_card() -> None:
    counted = count_params(_spec(CATALOG["qwen3-30b-a3b"]))
    # Qwen3-30B-A3B model card: 30.5B total, 3.3B activated (3 significant figures: 1.6 %).
    assert counted.total == pytest.approx(30.5e9, rel=0.002)
    assert counted.active == pytest.approx(3.3e9, rel=0.02)


@pytest.mark.parametrize("model_id", sorted(m for m in CATALOG if CATALOG[m]["moe"]))
def test_moe_active_below_total(model_id: str) -> None:
    counted = count_params(_spec(CATALOG[model_id]))
    assert counted.active < counted.total


@pytest.mark.parametrize("model_id", sorted(m for m in CATALOG if not CATALOG[m]["moe"]))
def test_dense_active_equals_total(model_id: str) -> None:
    counted = count_params(_spec(CATALOG[model_id]))
    assert counted.active == counted.total


positive = st.integers(min_value=1, max_value=64)


@st.composite
def model_specs(draw: st.DrawFn) -> ModelSpec:
    kv_heads = draw(positive)
    moe = None
    if draw(st.booleans()):
        experts = draw(positive)
        moe = MoeSpec(
            num_experts=experts,
            experts_per_token=draw(st.integers(min_value=1, max_value=experts)),
            expert_intermediate_size=draw(positive),
            num_shared_experts=draw(st.integers(min_value=0, max_value=2)),
            shared_expert_intermediate_size=draw(st.integers(min_value=0, max_value=64)),
            num_dense_layers=draw(st.integers(min_value=0, max_value=4)),
        )
    return ModelSpec(
        num_layers=draw(st.integers(min_value=4, max_value=8)),
        hidden_size=draw(positive),
        num_attention_heads=kv_heads * draw(st.integers(min_value=1, max_value=8)),
        num_kv_heads=kv_heads,
        head_dim=draw(positive),
        intermediate_size=draw(positive),
        ffn_type=draw(st.sampled_from(FfnType)),
        vocab_size=draw(positive),
        max_context_tokens=128,
        tie_word_embeddings=draw(st.booleans()),
        attention_bias=draw(st.booleans()),
        moe=moe,
    )


@given(model_specs())
def test_components_add_up(model: ModelSpec) -> None:
    counted = count_params(model)
    output_matmul = model.vocab_size * model.hidden_size
    assert counted.total == (
        counted.embedding + counted.attention + counted.ffn + counted.norms + counted.lm_head
    )
    assert counted.attention == counted.attention_qo + counted.attention_kv
    assert counted.ffn == counted.dense_ffn + counted.router + counted.experts
    assert counted.non_embedding == counted.total - counted.embedding + (
        output_matmul if model.tie_word_embeddings else 0
    )
    assert 0 < counted.active <= counted.total
    assert counted.total - counted.active == counted.non_embedding - counted.active_non_embedding
