"""Profiles: log-log interpolation, the fallback outside the tables, and step times from
hand-made tables whose right answers are known in closed form."""

from __future__ import annotations

import dataclasses
import math
import pickle
from itertools import product

import pytest

from app.engine.counting import OpClass
from app.engine.dtypes import DType
from app.engine.profiles import (
    AttentionTable,
    Curve,
    EngineOverhead,
    Grid,
    Profile,
    ProfiledStepCost,
)
from app.engine.profiles.fit import gemm_efficiency, held_out_error_pct
from app.engine.profiles.profile import ELEMENTWISE_BASIS
from app.engine.profiles.timer import kernel_floors
from app.engine.specs import (
    Deployment,
    Efficiency,
    FfnType,
    GpuSpec,
    InterconnectSpec,
    ModelSpec,
    MoeSpec,
)
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from app.validation.record import basis_kind_of

GPU = GpuSpec(
    id="test-gpu",
    memory_bytes=80 * 2**30,
    memory_bandwidth_bytes_per_s=3.0e12,
    peak_flops_per_s={DType.BF16: 1.0e15, DType.FP8: 2.0e15},
    interconnect=InterconnectSpec(kind="nvlink", bandwidth_bytes_per_s=9e11, latency_s=1e-6),
)
MODEL = ModelSpec(
    num_layers=4,
    hidden_size=1024,
    num_attention_heads=8,
    num_kv_heads=2,
    head_dim=128,
    intermediate_size=4096,
    ffn_type=FfnType.GATED,
    vocab_size=32768,
    max_context_tokens=32768,
)
POWERS = tuple(float(2**i) for i in range(0, 16))  # 1 .. 32,768
WIDTHS = tuple(float(2**i) for i in range(6, 17))  # 64 .. 65,536
RATE = 5.0e14  # FLOP/s the hand-made GEMMs run at: 50 % of peak, with a 5 us floor
FLOOR_MS = 5e-3


def gemm_ms(m: float, n: float, k: float) -> float:
    return FLOOR_MS + 2.0 * m * n * k / RATE * 1e3


def power_grid() -> Grid:
    """GEMM time exactly proportional to m * n * k: log-log interpolation is exact on it."""
    values = tuple(2.0 * m * n * k / RATE * 1e3 for m, n, k in product(POWERS, WIDTHS, WIDTHS))
    return Grid((POWERS, WIDTHS, WIDTHS), values)


def attention_grid(per_pair_ms: float) -> Grid:
    batches, lengths = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0), POWERS
    values = tuple(per_pair_ms * b * n * n for b, n in product(batches, lengths))
    return Grid((batches, lengths), values)


def profile(**changes: object) -> Profile:
    fields: dict[str, object] = {
        "id": "test-gpu-vllm-1.0",
        "gpu": "test-gpu",
        "engine": "vllm",
        "version": "1.0",
        "overhead": EngineOverhead(step_ms=1.0, per_sequence_ms=0.01, prefill_per_layer_ms=0.5),
        "fitted": Efficiency(gemm=0.5, attention=0.5, memory=0.8, communication=0.8),
        "gemm": {DType.BF16: power_grid()},
        "prefill_attention": {DType.BF16: (AttentionTable(4, 1, 128, attention_grid(1e-7)),)},
        "decode_attention": {DType.BF16: (AttentionTable(4, 1, 128, attention_grid(1e-9)),)},
        "residual_pct": {"gemm": 3.0, "prefill_attention": 4.0, "decode_attention": 5.0},
    }
    fields.update(changes)
    return Profile(**fields)  # type: ignore[arg-type]


def test_log_log_interpolation_is_exact_on_a_power_law_and_refuses_outside() -> None:
    grid = Grid(((1.0, 4.0), (10.0, 1000.0)), (1.0, 100.0, 4.0, 400.0))  # value = x * y / 10
    assert grid.at(2.0, 100.0) == pytest.approx(2.0 * 100.0 / 10, rel=1e-12)
    assert grid.at(0.5, 100.0) is None  # below the measurements
    assert grid.at(2.0, 2000.0) is None  # beyond them
    gap = Grid(((1.0, 4.0), (10.0, 1000.0)), (1.0, None, 4.0, 400.0))
    assert gap.at(2.0, 100.0) is None  # beside a cell nobody measured
    assert gap.at(4.0, 1000.0) == pytest.approx(400.0)


def test_a_curve_splits_work_beyond_its_last_point() -> None:
    curve = Curve((1.0, 1024.0), (1.0, 1024.0))
    assert curve.at(32.0) == pytest.approx(32.0, rel=1e-12)
    assert curve.at(4096.0) == pytest.approx(4 * 1024.0, rel=1e-12)  # four runs of 1,024
    assert curve.at(0.5) is None


def test_a_step_is_the_sum_of_its_measured_ops() -> None:
    """One decode step of 8 sequences at 1,024 tokens, by hand: four layers of QKV (n = 1,536),
    O (1,024 x 1,024), gate-up (8,192) and down GEMMs at M = 8, the LM head, decode attention
    (8 query heads on 2 KV heads: twice the table's 1 KV head, as 16 sequences), overhead."""
    cost = ProfiledStepCost(MODEL, GPU, Deployment(), profile())
    m, d, layers = 8.0, 1024.0, 4

    def power(m: float, n: float, k: float) -> float:
        return 2.0 * m * n * k / RATE * 1e3

    linear_ms = layers * (
        power(m, 1536, d) + power(m, d, d) + power(m, 8192, d) + power(m, d, 4096)
    )
    lm_ms = power(m, 32768, d)
    attention_ms = layers * 1e-9 * 16 * 1024 * 1024
    # Norms and activations (no table): 3 kernels a layer at 3 us (at the fitted 0.8 memory
    # efficiency), 8 d + 3 f bf16 bytes a token and layer at 0.8 x 3 TB/s.
    elementwise_ms = 12 * 3e-3 + m * (8 * d + 3 * 4096) * 2 * layers / (0.8 * 3.0e12) * 1e3
    overhead_ms = 1.0 + 0.01 * 8
    expected_s = (linear_ms + lm_ms + attention_ms + elementwise_ms + overhead_ms) / 1e3
    assert cost.seconds(decode_load(8, 1024)) == pytest.approx(expected_s, rel=1e-9)
    assert cost.breakdown(decode_load(8, 1024)).total_s == pytest.approx(expected_s, rel=1e-9)
    assert cost.request_overhead_s == pytest.approx(4 * 0.5e-3)
    label = "profile test-gpu vllm@1.0"
    assert cost.basis == {
        "gemm": label,
        "prefill_attention": label,
        "decode_attention": label,
        "elementwise": ELEMENTWISE_BASIS,  # no table measures them
        "overhead": label,
    }
    assert basis_kind_of(cost.basis) == "measured"


def test_prefill_attention_is_timed_at_the_equivalent_causal_length() -> None:
    """A 512-token chunk after 1,536 cached tokens has 512 * 1536 + 512 * 513 / 2 pairs: the
    table is read at the prompt whose causal self-attention has that many (to the nearest
    token)."""
    cost = ProfiledStepCost(MODEL, GPU, Deployment(), profile())
    load = prefill_load(512, cached_tokens=1536)
    length = round(math.sqrt(2.0 * load.prefill_attention_pairs))
    breakdown = cost.breakdown(load)
    attention = next(op for op in breakdown.ops if op.op_class.value == "prefill_attention")
    assert attention.seconds == pytest.approx(4 * 1e-7 * 2 * length * length / 1e3, rel=1e-9)


def test_shapes_outside_every_table_fall_back_to_the_roofline_at_the_fitted_efficiency() -> None:
    """fp8 weights: the profile has only bf16 GEMMs, so the GEMMs are the roofline's at the
    profile's fitted efficiency; a head layout of another group size, likewise attention."""
    fp8 = Deployment(weight_dtype=DType.FP8)
    cost = ProfiledStepCost(MODEL, GPU, fp8, profile())
    assert cost.basis["gemm"] == "roofline fitted to profile test-gpu vllm@1.0"
    roofline = StepCostModel(MODEL, GPU, fp8, profile().fitted)
    load = decode_load(8, 1024)
    measured = {op.op_class: op.seconds for op in cost.breakdown(load).ops}
    modelled = {op.op_class: op.seconds for op in roofline.breakdown(load).ops}
    for op_class in ("qkv_proj", "o_proj", "ffn"):
        assert measured[OpClass(op_class)] == pytest.approx(modelled[OpClass(op_class)], rel=1e-12)
    other_group = profile(
        decode_attention={DType.BF16: (AttentionTable(8, 8, 128, attention_grid(1e-6)),)},
        prefill_attention={},
    )
    fallback = ProfiledStepCost(MODEL, GPU, Deployment(), other_group)
    assert fallback.basis["decode_attention"].startswith("roofline fitted")
    assert fallback.basis["prefill_attention"].startswith("roofline fitted")


def floored_grid() -> Grid:
    """GEMMs that take at least FLOOR_MS (a kernel's launch and latency) plus their FLOPs."""
    values = tuple(gemm_ms(m, n, k) for m, n, k in product(POWERS, WIDTHS, WIDTHS))
    return Grid((POWERS, WIDTHS, WIDTHS), values)


def test_roofline_gemms_never_beat_the_fastest_kernel_the_gpu_ran() -> None:
    """fp8 weights outside the bf16 table, one sequence decoding: the roofline reads QKV's
    6.3 MB, O's 4.2 MB and the FFN's 50 MB at 0.8 x 3 TB/s (2.6, 1.7 and 21 us), below their
    kernels at the table's fastest cell (5.0 us of an M=1, 64 x 64 GEMM): 4 layers of one
    QKV GEMM, one O, two FFN GEMMs take 20, 20 and 40 us. The LM head computes in the
    activations' bf16, which the table measures: its own cell."""
    fp8 = Deployment(weight_dtype=DType.FP8)
    floored = profile(gemm={DType.BF16: floored_grid()})
    gemm_s, moe_s = kernel_floors(floored)
    assert gemm_s == pytest.approx(gemm_ms(1, 64, 64) * 1e-3, rel=1e-12)
    assert moe_s == 0.0  # no MoE table
    cost = ProfiledStepCost(MODEL, GPU, fp8, floored)
    roofline = StepCostModel(MODEL, GPU, fp8, floored.fitted)
    load = decode_load(1, 1024)
    timed = {op.op_class: op.seconds for op in cost.breakdown(load).ops}
    modelled = {op.op_class: op.seconds for op in roofline.breakdown(load).ops}
    assert timed[OpClass.QKV_PROJ] == pytest.approx(4 * gemm_s, rel=1e-12)
    assert timed[OpClass.O_PROJ] == pytest.approx(4 * gemm_s, rel=1e-12)
    assert timed[OpClass.FFN] == pytest.approx(8 * gemm_s, rel=1e-12)
    assert modelled[OpClass.FFN] == pytest.approx(3 * 1024 * 4096 * 4 / 2.4e12, rel=0.02)
    assert timed[OpClass.LM_HEAD] == pytest.approx(gemm_ms(1, 32768, 1024) * 1e-3, rel=1e-9)
    # A long prefill is far above every floor: the roofline's to the last digit.
    long = prefill_load(4096)
    assert cost.breakdown(long).op(OpClass.FFN).seconds == pytest.approx(
        roofline.breakdown(long).op(OpClass.FFN).seconds, rel=1e-12
    )


def test_long_steps_sum_within_a_tenth_of_a_percent_of_step_by_step() -> None:
    cost = ProfiledStepCost(MODEL, GPU, Deployment(), profile())
    first = StepLoad(decode_seqs=16, decode_context_tokens=16 * 100)
    step = StepLoad(decode_context_tokens=16)
    exact = sum(cost.seconds(first + StepLoad(decode_context_tokens=16 * j)) for j in range(2000))
    assert cost.sum_seconds(first, step, 2000) == pytest.approx(exact, rel=1e-3)


def test_fitted_efficiency_and_held_out_error_of_a_known_table() -> None:
    """Large GEMMs of the power-law table run at exactly 50 % of the bf16 peak; held out, each
    interior cell of a power law is predicted exactly by its neighbours."""
    grid = power_grid()
    assert gemm_efficiency(grid, GPU, DType.BF16) == pytest.approx(0.5, rel=1e-12)
    assert held_out_error_pct(grid) == pytest.approx(0.0, abs=1e-9)
    floored = Grid(
        (POWERS, WIDTHS, WIDTHS),
        tuple(gemm_ms(m, n, k) for m, n, k in product(POWERS, WIDTHS, WIDTHS)),
    )
    bent = held_out_error_pct(floored)
    assert bent is not None and bent > 1.0  # the floor bends the curve: not free


def _moe_model(moe: MoeSpec) -> ModelSpec:
    """`MODEL`'s layers, width and heads with `moe` in its FFN."""
    return ModelSpec(
        **{
            **{f: getattr(MODEL, f) for f in ("num_layers", "hidden_size", "num_attention_heads")},
            "num_kv_heads": 2,
            "head_dim": 128,
            "intermediate_size": 4096,
            "ffn_type": FfnType.GATED,
            "vocab_size": 32768,
            "max_context_tokens": 32768,
            "moe": moe,
        }
    )


def test_routed_experts_come_from_the_moe_table_of_the_layer_shape() -> None:
    """A Mixtral-shaped MoE model (8 experts, top-2, width 4,096): four MoE layers of the
    table's time at the step's token count, plus the router by the roofline."""
    moe_model = _moe_model(
        MoeSpec(num_experts=8, experts_per_token=2, expert_intermediate_size=4096)
    )
    tokens = (1.0, 64.0, 4096.0)
    table = Grid((tokens,), (0.02, 0.1, 2.0))
    with_table = profile(moe={(DType.BF16, 1024, 4096, 2, 8, 1, 1): table})
    cost = ProfiledStepCost(moe_model, GPU, Deployment(), with_table)
    assert cost.basis["moe"] == "profile test-gpu vllm@1.0"
    without = ProfiledStepCost(moe_model, GPU, Deployment(), profile())
    assert without.basis["moe"].startswith("roofline fitted")
    load = decode_load(64, 64 * 512)
    difference = cost.seconds(load) - without.seconds(load)
    roofline_experts = next(
        op.seconds for op in without.breakdown(load).ops if op.op_class is OpClass.MOE_EXPERTS
    )
    assert difference == pytest.approx(4 * 0.1e-3 - roofline_experts, rel=1e-9)
    assert cost.breakdown(load).total_s == pytest.approx(cost.seconds(load), rel=1e-12)


def test_shared_experts_and_expert_parallel_splits_come_from_their_tables() -> None:
    """A DeepSeek-shaped MoE layer: one shared expert beside the routed ones. The routed
    experts are read from the table of the split the layout makes (tp 2: each expert's width
    halved, tp 2 and ep 1 in the table; tp 2 with ep 2: the experts halved, tp 1 and ep 2); the
    shared expert, a gated FFN of its width over the tp x dp GPUs, from the GEMM table. Four MoE
    layers of both at the step's tokens."""
    model = _moe_model(
        MoeSpec(
            num_experts=8,
            experts_per_token=2,
            expert_intermediate_size=4096,
            num_shared_experts=1,
            shared_expert_intermediate_size=2048,
        )
    )
    tokens = (1.0, 64.0, 4096.0)
    tp_table = Grid((tokens,), (0.02, 0.1, 2.0))
    ep_table = Grid((tokens,), (0.03, 0.2, 3.0))
    tables = {
        (DType.BF16, 1024, 4096, 2, 8, 2, 1): tp_table,
        (DType.BF16, 1024, 4096, 2, 8, 1, 2): ep_table,
    }
    width = 2048 / 2  # the shared expert's width on each of the two GPUs
    shared_ms = 2 * 64 * (2 * width) * 1024 / RATE * 1e3 + 2 * 64 * 1024 * width / RATE * 1e3
    for deployment, routed_ms in ((Deployment(tp=2), 0.1), (Deployment(tp=2, ep=2), 0.2)):
        cost = ProfiledStepCost(model, GPU, deployment, profile(moe=tables))
        assert cost.basis["moe"] == "profile test-gpu vllm@1.0", deployment
        assert max(cost.experts.parts(64.0)) == pytest.approx(
            4 * (routed_ms + shared_ms) * 1e-3, rel=1e-9
        )
    # A split without a table (ep over tp 2 x dp 2: tp 1 and ep 4) is the roofline's.
    other = ProfiledStepCost(model, GPU, Deployment(tp=2, dp=2, ep=4), profile(moe=tables))
    assert other.basis["moe"].startswith("roofline fitted")


def test_the_expert_parallel_exchange_comes_from_the_all_to_all_table() -> None:
    """Under ep each MoE layer dispatches and combines with an all-to-all over the experts'
    GPUs: each sends its share of the replica's tokens (1 / (tp x dp)), each to its k experts,
    d activations of 2 bytes. Four MoE layers x 2 exchanges of the table's time at those bytes;
    `basis` calls communication measured only when the all-reduces are too."""
    model = _moe_model(MoeSpec(num_experts=8, experts_per_token=2, expert_intermediate_size=4096))
    sizes = (1024.0, 65536.0, 1 << 24)
    # 10 us a call up to 64 KiB, then 100 GB/s: log-log exact at the points only.
    a2a = Grid((sizes, (2.0, 4.0)), tuple(v for s in sizes for v in (0.01 + s / 1e8,) * 2))
    all_reduce = Grid((sizes, (2.0,)), tuple(0.005 + s / 2e8 for s in sizes))
    measured = profile(all_to_all=a2a, all_reduce=all_reduce)
    cost = ProfiledStepCost(model, GPU, Deployment(tp=2, ep=2), measured)
    tokens = 65536.0 / (2 * 1024 * 2.0 / 2)  # a GPU's bytes: exactly the table's 64 KiB
    assert cost.communication.layout(tokens) == pytest.approx(
        4 * 2 * (0.01 + 65536.0 / 1e8) * 1e-3, rel=1e-9
    )
    assert cost.basis["communication"] == "profile test-gpu vllm@1.0"
    roofline = ProfiledStepCost(model, GPU, Deployment(tp=2, ep=2), profile(all_reduce=all_reduce))
    assert roofline.basis["communication"].startswith("roofline fitted")
    assert roofline.communication.layout(tokens) != cost.communication.layout(tokens)
    # Without ep the experts' exchange is the all-reduce's (no all-to-all read).
    plain = ProfiledStepCost(model, GPU, Deployment(tp=2), measured)
    assert plain.communication.layout(tokens) == 0.0


def test_time_totals_of_a_profiled_step_are_its_breakdown_summed() -> None:
    """The measured times replace the roofline's op by op in `breakdown` and `time_totals`
    alike: the same floats, for a decode step (CUDA-graph padded), a prefill and a mix."""
    cost = ProfiledStepCost(MODEL, GPU, Deployment(), profile())
    loads = [
        decode_load(6, 1000),
        prefill_load(2000, cached_tokens=300),
        decode_load(3, 700) + prefill_load(128, cached_tokens=4000),
    ]
    for load in loads:
        step, totals = cost.breakdown(load), cost.time_totals(load)
        assert (totals.compute_s, totals.memory_s, totals.total_s) == (
            step.compute_s,
            step.memory_s,
            step.total_s,
        )
        assert totals.bound is step.bound


def test_a_profile_crosses_to_a_heavy_work_process_whole() -> None:
    """Simulations run in other processes: a profile (its grids and curves, compiled or not)
    pickles to an equal one that times every step the same."""
    sent = profile()
    received = pickle.loads(pickle.dumps(sent))
    for field in dataclasses.fields(sent):  # a profile is compared by identity
        assert getattr(received, field.name) == getattr(sent, field.name), field.name
    load = decode_load(8, 1000)
    here = ProfiledStepCost(MODEL, GPU, Deployment(), sent)
    there = ProfiledStepCost(MODEL, GPU, Deployment(), received)
    assert there.seconds(load) == here.seconds(load) > 0


def _bound(parts: tuple[float, float]) -> float:
    return max(parts)


def test_tables_measured_on_another_gpu_are_scaled_by_the_roofline_ratio_of_each_shape() -> None:
    """A GPU without tables timed from a relative's: each read is the relative's measured time
    times the ratio of the two GPUs' roofline times of that op and shape. Half the bandwidth
    and half the peaks: every kernel takes twice as long; half the bandwidth alone: the
    weight-bound small batches twice, the compute-bound large prefill GEMMs the same."""
    measured = ProfiledStepCost(MODEL, GPU, Deployment(), profile())
    half = dataclasses.replace(
        GPU,
        id="half-gpu",
        memory_bandwidth_bytes_per_s=GPU.memory_bandwidth_bytes_per_s / 2,
        peak_flops_per_s={d: f / 2 for d, f in GPU.peak_flops_per_s.items()},
    )
    scaled = ProfiledStepCost(MODEL, half, Deployment(), profile(), measured_on=GPU)
    for rows in (1.0, 3.0, 64.0, 1000.0, 32768.0):
        for name in ("qkv", "o", "ffn", "lm_head"):
            mine, theirs = getattr(scaled, name).parts(rows), getattr(measured, name).parts(rows)
            assert _bound(mine) == pytest.approx(2 * _bound(theirs), rel=1e-9), (name, rows)
    for length in (16.0, 1000.0, 8192.0):
        pairs = length * (length + 1) / 2
        mine = scaled.prefill_attention.parts(length, 1.0, pairs, length)
        theirs = measured.prefill_attention.parts(length, 1.0, pairs, length)
        assert _bound(mine) == pytest.approx(2 * _bound(theirs), rel=1e-9)
        assert _bound(scaled.decode_attention.parts(8.0, 8 * length)) == pytest.approx(
            2 * _bound(measured.decode_attention.parts(8.0, 8 * length)), rel=1e-9
        )
    assert scaled.basis["gemm"] == "profile test-gpu vllm@1.0 scaled to half-gpu by datasheet"

    slow_memory = dataclasses.replace(
        GPU, id="slow-memory", memory_bandwidth_bytes_per_s=GPU.memory_bandwidth_bytes_per_s / 2
    )
    scaled = ProfiledStepCost(MODEL, slow_memory, Deployment(), profile(), measured_on=GPU)
    small, large = 1.0, 32768.0
    assert _bound(scaled.ffn.parts(small)) == pytest.approx(
        2 * _bound(measured.ffn.parts(small)), rel=1e-9
    )
    assert _bound(scaled.ffn.parts(large)) == pytest.approx(
        _bound(measured.ffn.parts(large)), rel=1e-9
    )
    # It crosses to a heavy-work process as it is.
    received = pickle.loads(pickle.dumps(scaled))
    load = decode_load(8, 1000)
    assert received.seconds(load) == scaled.seconds(load) > measured.seconds(load)


def test_a_kept_timer_remembers_at_most_its_memo_entries_and_times_the_same() -> None:
    """The estimate path keeps timers for many requests with small memos
    (`memo_entries`): no memo grows past it (a full memo starts again, so the shapes of the
    requests now served are the ones remembered), and a shape it no longer remembers is timed
    exactly as an unbounded timer times it."""
    small = ProfiledStepCost(MODEL, GPU, Deployment(), profile(), memo_entries=16)
    full = ProfiledStepCost(MODEL, GPU, Deployment(), profile())
    loads = [decode_load(b, c) for b in (1, 3, 8, 30) for c in range(100, 4000, 97)]
    loads += [prefill_load(n) for n in range(64, 4096, 61)]
    ops: tuple[object, ...] = (
        small.qkv,
        small.o,
        small.ffn,
        small.lm_head,
        small.decode_attention,
        small.prefill_attention,
    )
    memos: list[dict[object, float]] = [op.memo for op in ops]  # type: ignore[attr-defined]
    largest = 0
    for load in loads:
        assert small.seconds(load) == full.seconds(load)
        largest = max(largest, *(len(memo) for memo in memos))
        assert largest <= 16
    assert largest == 16
    # The last load's shapes are remembered after the memos filled and started again.
    last = loads[-1]
    assert 0 < len(small.prefill_attention.memo) < 16  # type: ignore[attr-defined]
    assert small.seconds(last) == full.seconds(last)
    assert len(full.decode_attention.memo) > 16  # type: ignore[attr-defined]
