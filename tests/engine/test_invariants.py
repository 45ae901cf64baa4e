"""Properties that hold for every valid spec (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.estimates import estimate_decode, estimate_prefill
from app.engine.memory import weight_bytes_per_gpu
from app.engine.specs import Deployment, Efficiency, FfnType, GpuSpec, ModelSpec
from app.engine.step_cost import StepCostModel
from tests.engine.test_counting import A100, H100


@st.composite
def models(draw: st.DrawFn) -> ModelSpec:
    kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv_heads * draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([64, 128]))
    return ModelSpec(
        num_layers=draw(st.integers(1, 64)),
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=64 * draw(st.integers(1, 512)),
        ffn_type=draw(st.sampled_from(FfnType)),
        vocab_size=draw(st.integers(1000, 200_000)),
        max_context_tokens=131072,
    )


efficiencies = st.builds(
    Efficiency,
    gemm=st.floats(0.1, 1.0),
    attention=st.floats(0.1, 1.0),
    memory=st.floats(0.1, 1.0),
    communication=st.floats(0.1, 1.0),
    overhead_ms=st.floats(0.0, 20.0),
)
gpus = st.sampled_from([A100, H100])
tokens = st.integers(1, 131072)


@settings(max_examples=150, deadline=None)
@given(model=models(), gpu=gpus, efficiency=efficiencies, a=tokens, b=tokens)
def test_ttft_grows_with_prompt_length(
    model: ModelSpec, gpu: GpuSpec, efficiency: Efficiency, a: int, b: int
) -> None:
    cost = StepCostModel(model, gpu, Deployment(), efficiency)
    short, long = sorted((a, b))
    assert (
        estimate_prefill(cost, prompt_tokens=short).ttft_ms
        <= estimate_prefill(cost, prompt_tokens=long).ttft_ms
    )


@settings(max_examples=150, deadline=None)
@given(
    model=models(),
    gpu=gpus,
    efficiency=efficiencies,
    batches=st.lists(st.integers(1, 1024), min_size=2, max_size=2),
    contexts=st.lists(tokens, min_size=2, max_size=2),
)
def test_tpot_grows_with_batch_and_context(
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    batches: list[int],
    contexts: list[int],
) -> None:
    cost = StepCostModel(model, gpu, Deployment(), efficiency)
    small_b, large_b = sorted(batches)
    short, long = sorted(contexts)

    def tpot(batch: int, context: int) -> float:
        return estimate_decode(cost, batch_size=batch, context_tokens=context).tpot_ms

    assert tpot(small_b, short) <= tpot(large_b, short)
    assert tpot(small_b, short) <= tpot(small_b, long)


@settings(max_examples=150, deadline=None)
@given(
    model=models(),
    gpu=gpus,
    efficiency=efficiencies,
    prompt=tokens,
    batch=st.integers(1, 256),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_ideal_is_never_slower_than_calibrated(
    model: ModelSpec, gpu: GpuSpec, efficiency: Efficiency, prompt: int, batch: int, tp: int
) -> None:
    if model.num_attention_heads % tp or model.intermediate_size % tp:
        return
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        return
    deployment = Deployment(tp=tp)
    ideal = StepCostModel(model, gpu, deployment)
    real = StepCostModel(model, gpu, deployment, efficiency)
    assert (
        estimate_prefill(ideal, prompt_tokens=prompt).ttft_ms
        <= estimate_prefill(real, prompt_tokens=prompt).ttft_ms
    )
    assert (
        estimate_decode(ideal, batch_size=batch, context_tokens=prompt).tpot_ms
        <= estimate_decode(real, batch_size=batch, context_tokens=prompt).tpot_ms
    )


@settings(max_examples=150, deadline=None)
@given(model=models())
def test_tp_halves_weights_per_gpu(model: ModelSpec) -> None:
    """Everything shards but the norms (2*d per layer and one more), and the K/V projections
    once tp exceeds the KV heads; with K >= 2 doubling tp halves the rest exactly."""
    if model.num_kv_heads < 2 or model.intermediate_size % 2:
        return
    one = weight_bytes_per_gpu(model, Deployment(tp=1))
    two = weight_bytes_per_gpu(model, Deployment(tp=2))
    norms = (2 * model.num_layers + 1) * model.hidden_size * 2
    assert two == pytest.approx((one - norms) / 2 + norms, rel=1e-12)
