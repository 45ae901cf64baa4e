"""StepCostModel: the single source of step time."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.counting import OpClass
from app.engine.dtypes import DType
from app.engine.parallelism import assess_tp
from app.engine.specs import Deployment, Efficiency, ModelSpec, SpecError
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from tests.engine.test_counting import A100, H100, LLAMA2_7B, LLAMA3_8B, LLAMA3_70B, MIXTRAL

CALIBRATED = Efficiency(gemm=0.6, attention=0.55, memory=0.8, communication=0.7, overhead_ms=2.0)


def test_empty_step_takes_no_time() -> None:
    assert StepCostModel(LLAMA3_8B, A100).seconds(StepLoad()) == 0.0


def test_ideal_decode_by_hand() -> None:
    """Llama-2-7B, batch 1, 100 tokens of context on the A100: memory-bound, so time = bytes /
    bandwidth. Weights 2*(6.476e9 decoder + 0.131e9 LM head) B, KV 100 reads + 1 write of
    524,288 B, activations per op class as counted; every op class is memory-bound."""
    cost = StepCostModel(LLAMA2_7B, A100)
    load = decode_load(1, 100)
    counts = cost.count(load)
    assert cost.breakdown(load).bound.value == "memory"
    assert cost.seconds(load) == pytest.approx(counts.bytes / 2.039e12, rel=1e-9)
    layer_params = 4 * 4096 * 4096 + 3 * 4096 * 11008
    weights = 2 * (32 * layer_params + 32000 * 4096)
    assert counts.weight_bytes == weights
    assert counts.kv_bytes == 101 * 524_288


def _lm_head_read_s() -> float:
    # One row through the LM head is a weight read: 4096 x 128256 bf16 over 3.35 TB/s.
    return (4096 * 128256 * 2 + 4096 * 2 + 128256 * 4) / 3.35e12


def test_ideal_long_prefill_is_compute_time() -> None:
    """An 8K-token prefill on the H100 is compute-bound in every op class but the LM head,
    which multiplies one row per sequence and so reads its weights: FLOPs / peak + that read."""
    cost = StepCostModel(LLAMA3_8B, H100)
    load = prefill_load(8192)
    counts = cost.count(load)
    compute_s = (counts.flops - counts.lm_head_flops) / 989.4e12
    assert cost.seconds(load) == pytest.approx(compute_s + _lm_head_read_s(), rel=1e-9)


def _elementwise_s(tokens: int, memory: float = 1.0) -> float:
    """Llama-3-8B's norms and activations at `memory` efficiency, by hand: per layer two fused
    residual-add + RMSNorm kernels (8 d bytes a token) and the SwiGLU (3 f), 32 layers, bf16;
    96 kernels at 3 us x 0.8 / memory."""
    kernels_s = 96 * 3e-6 * 0.8 / memory
    bytes_per_token = (8 * 4096 + 3 * 14336) * 32 * 2
    return kernels_s + tokens * bytes_per_token / (3.35e12 * memory)


def test_efficiency_and_overhead_apply() -> None:
    """Half the compute efficiency doubles the compute-bound ops; the norms and activations
    (which the ideal roofline leaves out) and the overhead come on top."""
    load = prefill_load(8192)
    ideal = StepCostModel(LLAMA3_8B, H100).seconds(load) - _lm_head_read_s()
    efficient = StepCostModel(
        LLAMA3_8B, H100, efficiency=Efficiency(gemm=0.5, attention=0.5, overhead_ms=3.0)
    ).seconds(load)
    expected = 2 * ideal + _lm_head_read_s() + _elementwise_s(8192) + 3e-3
    assert efficient == pytest.approx(expected, rel=1e-9)
    # 8,192 tokens move 39.7 GB through them: 11.9 ms at 3.35 TB/s, 0.23 ms of kernel latency.
    assert _elementwise_s(8192) == pytest.approx(0.0121, rel=0.01)


def test_communication_only_with_tp() -> None:
    load = prefill_load(1024)
    assert StepCostModel(LLAMA3_70B, H100, Deployment(tp=1)).breakdown(load).communication_s == 0
    step = StepCostModel(LLAMA3_70B, H100, Deployment(tp=4)).breakdown(load)
    # 160 all-reduces of 1024*8192*2 bytes over 450 GB/s one way, ring factor 2*3/4.
    expected = 160 * (1.5 * 1024 * 8192 * 2 / 450e9 + 6 * 5e-6)
    assert step.communication_s == pytest.approx(expected, rel=1e-9)


def test_fp8_weights_need_fp8_compute() -> None:
    with pytest.raises(SpecError) as error:
        StepCostModel(LLAMA3_8B, A100, Deployment(weight_dtype=DType.FP8))
    assert error.value.field == "weight_dtype"
    fp8 = StepCostModel(LLAMA3_8B, H100, Deployment(weight_dtype=DType.FP8))
    bf16 = StepCostModel(LLAMA3_8B, H100)
    load = prefill_load(8192)
    assert fp8.seconds(load) < bf16.seconds(load)


def test_int4_weights_compute_in_bf16_and_read_a_quarter() -> None:
    int4 = StepCostModel(LLAMA3_8B, A100, Deployment(weight_dtype=DType.INT4))
    assert int4.gemm_dtype is DType.BF16
    assert int4.coefficients.ffn_weight_bytes == pytest.approx(
        StepCostModel(LLAMA3_8B, A100).coefficients.ffn_weight_bytes / 4
    )


def test_moe_decode_reads_few_experts() -> None:
    cost = StepCostModel(MIXTRAL, H100)
    small = cost.count(decode_load(1, 100)).weight_bytes
    large = cost.count(decode_load(256, 100)).weight_bytes
    expert = cost.coefficients.routed_expert_weight_bytes
    assert large - small == pytest.approx(6 * expert, rel=1e-6)  # 2 -> all 8 experts


loads = st.builds(
    StepLoad,
    prefill_tokens=st.integers(0, 20_000),
    prefill_chunks=st.integers(0, 8),
    prefill_attention_pairs=st.floats(0, 1e9),
    prefill_kv_tokens=st.integers(0, 100_000),
    decode_seqs=st.integers(0, 512),
    decode_context_tokens=st.integers(0, 2_000_000),
)


@settings(max_examples=300, deadline=None)
@given(
    load=loads,
    layout=st.sampled_from([(1, 1, 1), (2, 1, 1), (2, 2, 4), (1, 4, 4), (1, 8, 8)]),
    graphs=st.sampled_from([(), (1, 2, 4, 8, 16, 32, 64, 128, 256)]),
)
def test_communication_alone_is_the_steps(
    load: StepLoad, layout: tuple[int, int, int], graphs: tuple[int, ...]
) -> None:
    """`communication_seconds` computes the communication family only (what TP feasibility asks
    twice per layout), and it is exactly the step's: with data parallelism, expert exchanges
    and CUDA-graph padding of decode-only steps."""
    tp, dp, ep = layout
    cost = StepCostModel(MIXTRAL, H100, Deployment(tp=tp, dp=dp, ep=ep), CALIBRATED, graphs)
    assert cost.communication_seconds(load) == cost.breakdown(load).communication_s


@settings(max_examples=200, deadline=None)
@given(load=loads, tp=st.sampled_from([1, 2, 8, 16]))
def test_seconds_equals_breakdown_total(load: StepLoad, tp: int) -> None:
    cost = StepCostModel(LLAMA3_70B, H100, Deployment(tp=tp), CALIBRATED)
    step = cost.breakdown(load)
    assert cost.seconds(load) == pytest.approx(step.total_s, rel=1e-12, abs=0)
    assert cost.communication_seconds(load) == step.communication_s
    # The same step from its fields, without a StepLoad (what the searches call).
    fields = (
        load.prefill_tokens,
        load.prefill_chunks,
        load.prefill_attention_pairs,
        load.prefill_kv_tokens,
        load.decode_seqs,
        load.decode_context_tokens,
    )
    assert cost.step_seconds(*fields) == cost.seconds(load)


@settings(max_examples=100, deadline=None)
@given(
    first=loads,
    pairs=st.floats(0, 1e7),
    kv=st.integers(0, 5000),
    context=st.integers(0, 5000),
    count=st.integers(0, 40),
    moe=st.booleans(),
)
def test_sum_seconds_equals_the_brute_force_sum(
    first: StepLoad, pairs: float, kv: int, context: int, count: int, moe: bool
) -> None:
    cost = StepCostModel(MIXTRAL if moe else LLAMA3_8B, A100, efficiency=CALIBRATED)
    step = StepLoad(
        prefill_attention_pairs=pairs, prefill_kv_tokens=kv, decode_context_tokens=context
    )
    brute = sum(
        cost.seconds(
            StepLoad(
                first.prefill_tokens,
                first.prefill_chunks,
                first.prefill_attention_pairs + j * pairs,
                first.prefill_kv_tokens + j * kv,
                first.decode_seqs,
                first.decode_context_tokens + j * context,
            )
        )
        for j in range(count)
    )
    assert cost.sum_seconds(first, step, count) == pytest.approx(brute, rel=1e-9, abs=1e-15)


def test_sum_seconds_rejects_varying_tokens() -> None:
    with pytest.raises(ValueError, match="only attention fields"):
        StepCostModel(LLAMA3_8B, A100).sum_seconds(StepLoad(), StepLoad(decode_seqs=1), 3)


_TOTALS_CASES = [
    (LLAMA3_8B, Deployment()),
    (LLAMA3_70B, Deployment(tp=8)),
    (MIXTRAL, Deployment(tp=2)),
    (MIXTRAL, Deployment(tp=2, dp=2, ep=4)),
]
_TOTALS_LOADS = [
    prefill_load(3000, batch_size=2, cached_tokens=500),
    decode_load(48, 1500),
    decode_load(7, 900) + prefill_load(512, cached_tokens=4096),
]


@pytest.mark.parametrize(("model", "deployment"), _TOTALS_CASES)
def test_count_totals_are_the_step_counts_summed_to_the_last_bit(
    model: ModelSpec, deployment: Deployment
) -> None:
    """`count_totals` skips the per-op records the estimates never report: its sums must be
    the very floats `StepCount`'s properties give (exact equality, no tolerance)."""
    cost = StepCostModel(model, H100, deployment)
    for load in _TOTALS_LOADS:
        counts, totals = cost.count(load), cost.count_totals(load)
        assert totals.flops == counts.flops
        assert totals.linear_flops == counts.linear_flops
        assert totals.attention_flops == counts.attention_flops
        assert totals.lm_head_flops == counts.lm_head_flops
        assert totals.router_flops == counts.op(OpClass.MOE_ROUTER).flops
        assert totals.weight_bytes == counts.weight_bytes
        assert totals.kv_bytes == counts.kv_bytes
        assert totals.activation_bytes == counts.activation_bytes
        assert totals.arithmetic_intensity == counts.arithmetic_intensity


def test_count_totals_with_a_remainder_add_op_class_by_op_class() -> None:
    """Four steps of a 1,024-token chunk plus a 300-token remainder: each op class's counts
    add before the kinds are summed, as two `StepCount`s added op by op would."""
    cost = StepCostModel(MIXTRAL, H100, Deployment(tp=2))
    full, remainder = prefill_load(4096, cached_tokens=2000), prefill_load(300, cached_tokens=9)
    totals = cost.count_totals(full, steps=4, then=remainder)
    a, b = cost.count(full, steps=4).ops, cost.count(remainder).ops
    assert totals.linear_flops == sum(x.flops + y.flops for x, y in zip(a[:5], b[:5], strict=True))
    assert totals.weight_bytes == sum(
        x.weight_bytes + y.weight_bytes for x, y in zip(a, b, strict=True)
    )
    assert totals.kv_bytes == sum(
        (x.kv_read_bytes + y.kv_read_bytes) + (x.kv_write_bytes + y.kv_write_bytes)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize(("model", "deployment"), _TOTALS_CASES)
def test_time_totals_are_the_breakdown_summed_to_the_last_bit(
    model: ModelSpec, deployment: Deployment
) -> None:
    cost = StepCostModel(model, H100, deployment, CALIBRATED)
    for load in [*_TOTALS_LOADS, StepLoad()]:
        step, totals = cost.breakdown(load), cost.time_totals(load)
        assert (totals.compute_s, totals.memory_s, totals.total_s) == (
            step.compute_s,
            step.memory_s,
            step.total_s,
        )
        assert (totals.communication_s, totals.overhead_s) == (
            step.communication_s,
            step.overhead_s,
        )
        assert totals.bound is step.bound
        assert totals.communication_share == step.communication_share


def test_bound_of_weighs_each_op_class_at_its_own_rate() -> None:
    """A 4,096-token prefill of Llama-3-8B is compute-bound and one decode token memory-bound,
    as their step breakdowns say."""
    cost = StepCostModel(LLAMA3_8B, H100, Deployment(), CALIBRATED)
    prefill, decode = prefill_load(4096), decode_load(1, 100)
    assert cost.bound_of(cost.count_totals(prefill)).value == "compute"
    assert cost.bound_of(cost.count_totals(decode)).value == "memory"


def test_derived_values_are_made_once_and_the_store_is_bounded() -> None:
    cost = StepCostModel(LLAMA3_8B, H100)
    made: list[int] = []

    def make() -> int:
        made.append(1)
        return 42

    assert cost.derived(("answer", 1), make) == 42
    assert cost.derived(("answer", 1), make) == 42
    assert len(made) == 1
    for i in range(200):  # settings from requests: the store is cleared when full
        cost.derived(("other", i), lambda: 0)
    assert cost.derived(("answer", 1), make) == 42
    assert len(made) == 2


def test_a_cost_model_in_use_still_pickles() -> None:
    """The process pool receives cost models by pickle: one that has timed steps and kept TP
    layouts (`derived`) arrives as its arguments, builds itself again and times steps alike."""
    cost = StepCostModel(LLAMA3_70B, H100, Deployment(), Efficiency(), (1, 2, 4, 8, 16))
    load = decode_load(8, 1000) + prefill_load(512, cached_tokens=300)
    expected = cost.step_seconds(*load.fields())
    padded = cost.seconds(decode_load(9, 100))
    assess = assess_tp(LLAMA3_70B, H100, Deployment(), Efficiency(), cost=cost)
    copy = pickle.loads(pickle.dumps(cost))
    assert type(copy) is StepCostModel and copy.graph_sizes == (1, 2, 4, 8, 16)
    assert copy.seconds(load) == expected
    assert copy.step_seconds(*load.fields()) == expected
    assert copy.seconds(decode_load(9, 100)) == padded
    assert assess_tp(LLAMA3_70B, H100, Deployment(), Efficiency(), cost=copy) == assess
