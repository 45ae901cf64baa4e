"""The capacity planner against hand calculations and against its own promises.

The hand-checked case (issue 5): Llama-3-8B, 10 requests/s, 2,048-token prompts, 256-token
outputs, TTFT p99 1 s, TPOT p99 50 ms, 20 % headroom. Steps are timed by `LinearTimer`, a
constant plus a cost per token, so the replica's capacity has a closed form; the replica count
is then checked twice, against that closed form and against a plain linear scan of the
simulator written out in the test. The promises: a tighter SLA never gets a cheaper plan,
doubling the traffic never lowers a candidate's replica count, and pruning never changes the
best plan. Those use the engine's own `StepCostModel` on datasheet GPUs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
import pytest

from app.engine.dtypes import DType
from app.engine.memory import memory_plan
from app.engine.planning import (
    CandidatePlan,
    CandidateStatus,
    CapacityPlan,
    GpuOffer,
    PlanOptions,
    Slo,
    Traffic,
    TtftBucket,
    plan_capacity,
)
from app.engine.planning.analysis import LoadStats, capacity_bound, lone_prefill_seconds
from app.engine.planning.planner import _replicas_before
from app.engine.planning.probes import build_sample
from app.engine.planning.screening import Candidate
from app.engine.simulation import SchedulerConfig, StepTimer, simulate
from app.engine.specs import (
    Deployment,
    Efficiency,
    FfnType,
    GpuSpec,
    InterconnectSpec,
    ModelSpec,
    MoeSpec,
    SpecError,
)
from app.engine.step_cost import StepCostModel
from app.engine.step_load import StepLoad
from app.engine.workload import HistogramLengths, PercentileLengths, PoissonWorkload, Trace
from tests.engine.test_counting import A100, H100, LLAMA3_8B, LLAMA3_70B

EXACT = 1e-9

# NVIDIA L40S datasheet: bf16 362 TFLOP/s dense, fp8 733, 864 GB/s, 48 GB, PCIe 4.0.
L40S = GpuSpec(
    memory_bytes=48 * 10**9,
    memory_bandwidth_bytes_per_s=864e9,
    peak_flops_per_s={DType.BF16: 362e12, DType.FP8: 733e12},
    interconnect=InterconnectSpec("pcie4", 64e9),
    id="l40s-48gb",
)
# Round efficiencies near the catalog's calibrations; what matters here is that they are fixed.
EFFICIENCY = Efficiency(gemm=0.6, attention=0.6, memory=0.8, overhead_ms=2.0, source="test")


@dataclass(frozen=True)
class LinearTimer:
    """base + per_token * tokens + per_pair * prefill attention pairs (seconds)."""

    base_s: float
    per_token_s: float
    per_pair_s: float = 0.0

    def seconds(self, load: StepLoad) -> float:
        return (
            self.base_s
            + self.per_token_s * load.tokens
            + self.per_pair_s * load.prefill_attention_pairs
        )


def constant(tokens: int) -> PercentileLengths:
    return PercentileLengths(p50=tokens, p90=tokens, p99=tokens)


# -- The hand-checked case --------------------------------------------------------------------

A_S, B_S = 0.004, 40e-6  # 4 ms a step plus 40 us a token
CHUNK = 1024
PROMPT, OUTPUT = 2048, 256
TRAFFIC = Traffic(10.0, constant(PROMPT), constant(OUTPUT))
SLO = Slo(ttft_p99_ms=1000, tpot_p99_ms=50)
PRICE = 2.0
HAND = PlanOptions(
    tp_candidates=(1,),
    dtype_pairs=((DType.BF16, DType.BF16),),
    max_num_seqs_candidates=(256,),
    chunk_tokens_candidates=(CHUNK,),
    headroom=0.2,
    timer_factory=lambda model, gpu, deployment, efficiency: LinearTimer(A_S, B_S),
)


def hand_plan(**changes: object) -> CapacityPlan:
    options = replace(HAND, **changes)  # type: ignore[arg-type]
    return plan_capacity(LLAMA3_8B, [GpuOffer(H100, PRICE)], TRAFFIC, SLO, options)


def p99_meets(trace: Trace, timer: StepTimer, kv_tokens: int) -> bool:
    result = simulate(
        trace,
        timer,
        kv_capacity_tokens=kv_tokens,
        scheduler=SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=CHUNK),
    )
    times = result.requests
    ttft_ms = float(np.percentile(times.ttft_s, 99)) * 1e3
    tpot_ms = float(np.percentile(times.tpot_s, 99)) * 1e3
    return not result.saturated and ttft_ms <= 1000 and tpot_ms <= 50


@pytest.mark.slow
def test_hand_checked_plan_agrees_with_the_closed_form_and_a_linear_scan() -> None:
    plan = hand_plan()
    best = plan.best
    assert best is not None

    # Closed form. Saturated, every step carries the whole 1,024-token budget (prefill chunks
    # and decodes) and takes A + 1024 B = 44.96 ms; a request needs 2,048 prefill + 255 decode
    # tokens, so one replica completes at most 1024 / (0.04496 * 2303) = 9.89 requests/s.
    capacity = CHUNK / ((A_S + CHUNK * B_S) * (PROMPT + OUTPUT - 1))
    assert capacity == pytest.approx(9.8897, rel=1e-4)
    # The planner's bound rounds each step's load down to whole tokens (1,023 of 1,024): 0.1 %.
    assert best.analytic_max_requests_per_s_per_replica == pytest.approx(capacity, rel=2e-3)
    # 12 requests/s with headroom exceed one replica; two carry 6 each, 61 % of capacity,
    # where every step is at most 44.96 ms (TPOT cannot reach 50 ms) and the queue is short.
    demand = 10.0 * 1.2
    assert math.ceil(demand / capacity) == 2
    assert best.replicas == 2

    # Linear scan with the simulator: the same 3,000 requests (seed 0) per k until one meets.
    kv_memory = memory_plan(
        LLAMA3_8B, H100, Deployment(), max_num_batched_tokens=CHUNK, max_num_seqs=256
    )
    kv_tokens = int(kv_memory.kv_pool_bytes / kv_memory.kv_bytes_per_token) // 16 * 16
    assert best.kv_capacity_tokens == kv_tokens
    timer = LinearTimer(A_S, B_S)
    scanned = next(
        k
        for k in range(1, 10)
        if p99_meets(
            PoissonWorkload(demand / k, 3000, constant(PROMPT), constant(OUTPUT)).trace(seed=0),
            timer,
            kv_tokens,
        )
    )
    assert scanned == best.replicas == 2

    assert best.gpus_total == 2
    assert best.cost_per_hour_usd == pytest.approx(2 * PRICE, rel=EXACT)
    # $4/h over 10 requests/s x 256 tokens x 3,600 s = 9.216 M tokens/h.
    assert best.cost_per_million_output_tokens_usd == pytest.approx(4.0 / 9.216, rel=EXACT)
    # The sustainable rate lies between the probed 6/s (met) and the bound (missed).
    assert best.max_requests_per_s_per_replica is not None
    assert best.failing_requests_per_s_per_replica is not None
    assert 6.0 <= best.max_requests_per_s_per_replica < best.failing_requests_per_s_per_replica
    assert best.failing_requests_per_s_per_replica <= capacity * 1.002
    # Predicted latencies: the simulator at 10 / 2 = 5 requests/s per replica, no headroom.
    predicted = best.predicted
    assert predicted is not None
    assert predicted.requests_per_s_per_replica == 5.0
    direct = simulate(
        PoissonWorkload(5.0, 3000, constant(PROMPT), constant(OUTPUT)).trace(seed=0),
        timer,
        kv_capacity_tokens=kv_tokens,
        scheduler=SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=CHUNK),
    )
    assert predicted.ttft_p99_ms == pytest.approx(direct.ttft_ms.p99, rel=EXACT)
    assert predicted.tpot_p50_ms == pytest.approx(direct.tpot_ms.p50, rel=EXACT)
    # Two chunks at least (2,048 tokens through 1,024-token steps): TTFT >= 2 * 44.96 ms less
    # the budget decodes take; TPOT is a mean of steps of at most 44.96 ms.
    assert predicted.ttft_p50_ms >= 2 * (A_S + B_S) * 1e3
    assert predicted.tpot_p99_ms <= (A_S + CHUNK * B_S) * 1e3


def test_capacity_bound_closed_form_for_a_decode_limited_replica() -> None:
    # 100-token prompts, 1,001-token outputs, max_num_seqs 8: decodes need E[T-1] / N = 125
    # steps per request, more than (100 + 1000) / 2048 for the tokens. Each step then carries
    # 8 decodes and 100/125 prompt tokens (rounded down to 0): 4 ms + 8 * 40 us.
    sample = build_sample(Traffic(1.0, constant(100), constant(1001)), 200, seed=0)
    bound = capacity_bound(
        LinearTimer(A_S, B_S),
        LoadStats.of(sample),
        chunk_tokens=2048,
        max_num_seqs=8,
        kv_capacity_tokens=10**7,
    )
    assert bound == pytest.approx(1 / (125 * (A_S + 8 * B_S)), rel=EXACT)


def test_lone_prefill_is_the_sum_of_its_chunks() -> None:
    timer = LinearTimer(A_S, B_S, per_pair_s=1e-9)
    # 3,000 tokens in chunks of 1,024, 1,024 and 952; causal pairs q*c + q(q+1)/2 sum to
    # 3000 * 3001 / 2 = 4,501,500.
    expected = 3 * A_S + 3000 * B_S + 1e-9 * 4_501_500
    assert lone_prefill_seconds(timer, 3000, 1024) == pytest.approx(expected, rel=EXACT)
    # The engine's timer is summed in closed form: the same as timing each chunk.
    cost = StepCostModel(LLAMA3_8B, H100, Deployment(), EFFICIENCY)
    chunks = [
        StepLoad(
            prefill_tokens=q,
            prefill_chunks=1,
            prefill_attention_pairs=float(q * c + q * (q + 1) // 2),
            prefill_kv_tokens=c + q,
        )
        for c, q in ((0, 1024), (1024, 1024), (2048, 952))
    ]
    looped = sum(cost.seconds(load) for load in chunks)
    assert lone_prefill_seconds(cost, 3000, 1024) == pytest.approx(looped, rel=EXACT)


# A fine-grained mixture of experts (Qwen3-30B-A3B's shape: 128 experts, 8 per token).
FINE_MOE = ModelSpec(
    num_layers=48,
    hidden_size=2048,
    num_attention_heads=32,
    num_kv_heads=4,
    head_dim=128,
    intermediate_size=6144,
    ffn_type=FfnType.GATED,
    vocab_size=151936,
    max_context_tokens=40960,
    moe=MoeSpec(num_experts=128, experts_per_token=8, expert_intermediate_size=768),
    id="fine-moe",
)


def naive_bound(timer: StepTimer, stats: LoadStats, chunk: int, decodes: float) -> float:
    """The Jensen bound without the mixture-of-experts correction: 1 / (sigma f(mean load))."""
    steps = max((stats.prompt_tokens + stats.decode_tokens) / chunk, stats.decode_tokens / decodes)
    load = StepLoad(
        prefill_tokens=math.floor(stats.prompt_tokens / steps),
        prefill_attention_pairs=stats.prefill_pairs / steps,
        prefill_kv_tokens=math.floor(stats.prompt_tokens / steps),
        decode_seqs=math.floor(stats.decode_tokens / steps),
        decode_context_tokens=math.floor(stats.decode_context_tokens / steps),
    )
    return 1 / (steps * timer.seconds(load))


def test_the_capacity_bound_holds_for_a_mixture_of_experts_replica() -> None:
    # A KV cache of 12 sequences: decode-only steps carry 12 tokens and read the weights of the
    # ~68 experts those touch, prefill steps 2,048 tokens and all 128. A step's time is concave
    # in its tokens there, so the mean step overstates the work: the uncorrected bound is below
    # what the replica really completes. The bound uses the convex minorant and stays above it.
    timer = StepCostModel(
        FINE_MOE, L40S, Deployment(weight_dtype=DType.FP8, kv_dtype=DType.FP8), EFFICIENCY
    )
    sample = build_sample(Traffic(1.0, constant(4000), constant(256)), 300, seed=0)
    stats = LoadStats.of(sample)
    kv_tokens = 12 * 4256 // 16 * 16
    bound = capacity_bound(
        timer, stats, chunk_tokens=2048, max_num_seqs=256, kv_capacity_tokens=kv_tokens
    )
    overloaded = simulate(
        sample.trace(10 * bound),
        timer,
        kv_capacity_tokens=kv_tokens,
        scheduler=SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=2048),
    )
    served = overloaded.requests_per_s  # completions over the whole run, tail included
    # (1.24 times: overloaded, vLLM V1's allocation chunk by chunk admits more prompts than the
    # cache finishes, and the preempted ones recompute.)
    assert served > 1.2 * naive_bound(timer, stats, 2048, kv_tokens / stats.mean_decode_context)
    assert served <= bound
    # A dense model is convex: there the correction is nothing.
    dense = StepCostModel(LLAMA3_8B, H100, Deployment(), EFFICIENCY)
    assert capacity_bound(
        dense, stats, chunk_tokens=2048, max_num_seqs=256, kv_capacity_tokens=kv_tokens
    ) == pytest.approx(naive_bound(dense, stats, 2048, kv_tokens / stats.mean_decode_context))


def test_a_one_token_chunk_has_a_finite_bound_and_is_planned() -> None:
    # Chunks of one token: a mean step carries less than one prompt and one decode token, which
    # round down to an empty step. The bound falls back to "every step takes at least a
    # one-token step" and stays finite, so the search sizes the candidate instead of probing
    # one replica at the whole demand and calling it unreachable.
    traffic = Traffic(10.0, constant(16), constant(4))
    cost = StepCostModel(LLAMA3_8B, H100, Deployment(), EFFICIENCY)
    sample = build_sample(traffic, 200, seed=0)
    bound = capacity_bound(
        cost, LoadStats.of(sample), chunk_tokens=1, max_num_seqs=1, kv_capacity_tokens=10**6
    )
    one_token_s = cost.seconds(StepLoad(decode_seqs=1, decode_context_tokens=1))
    assert math.isfinite(bound) and bound <= 1 / (19 * one_token_s) * (1 + EXACT)
    options = PlanOptions(
        tp_candidates=(1,),
        dtype_pairs=((DType.BF16, DType.BF16),),
        chunk_tokens_candidates=(1,),
        probe_requests=200,
    )
    plan = plan_capacity(
        LLAMA3_8B, [GpuOffer(H100, PRICE, EFFICIENCY)], traffic, Slo(5000, 1000), options
    )
    (candidate,) = plan.candidates
    assert candidate.status is CandidateStatus.PLANNED, candidate.reasons
    assert candidate.max_num_seqs == 1 and candidate.replicas is not None
    assert candidate.replicas >= math.ceil(12.0 / bound)


@pytest.mark.slow
def test_confirming_with_longer_probes_never_plans_fewer_replicas() -> None:
    # 30 requests/s of the hand-checked traffic: 36 with headroom over replicas of ~9.9 each.
    traffic = replace(TRAFFIC, requests_per_s=30.0)
    short = plan_capacity(LLAMA3_8B, [GpuOffer(H100, PRICE)], traffic, SLO, HAND)
    confirmed = plan_capacity(
        LLAMA3_8B, [GpuOffer(H100, PRICE)], traffic, SLO, replace(HAND, confirm_requests=10_000)
    )
    (plain,) = short.candidates
    (checked,) = confirmed.candidates
    assert plain.replicas is not None and checked.replicas is not None
    assert checked.replicas >= plain.replicas
    assert checked.simulations > plain.simulations
    assert any("confirmed with 10000 requests" in note for note in confirmed.notes)
    # The rate reported is one the longer probes meet: it agrees with the replica count.
    assert checked.max_requests_per_s_per_replica is not None
    assert math.ceil(36.0 / checked.max_requests_per_s_per_replica) == checked.replicas


def bare_candidate(price: float, gpus: int, capacity_rps: float, order: int) -> Candidate:
    """A screened candidate with only what ranking reads: its cost and its capacity."""
    return Candidate(
        order=order,
        offer=GpuOffer(H100, price),
        deployment=Deployment(tp=gpus),
        scheduler=SchedulerConfig(),
        timer=LinearTimer(A_S, B_S),
        kv_capacity_tokens=16,
        replication=1.0,
        reasons=[],
        capacity_rps=capacity_rps,
        estimate_rps=capacity_rps,
        k_min=1,
        cost_bound=gpus * price,
    )


def test_the_cost_threshold_counts_replicas_ranked_before_it() -> None:
    for price in (0.1, 0.7, 1.09, 3.49, 2.59):
        for gpus in (1, 2, 8):
            for k in range(1, 40):
                other = bare_candidate(price, gpus, capacity_rps=2.0, order=0)
                kth = (other.cost(k), -2.0, 0)  # a plan of k replicas of the same price
                # A larger capacity wins the tie at equal cost; a smaller one does not.
                wins = bare_candidate(price, gpus, capacity_rps=3.0, order=1)
                loses = bare_candidate(price, gpus, capacity_rps=1.0, order=1)
                assert _replicas_before(wins, kth) == k
                assert _replicas_before(loses, kth) == k - 1
                # Equal capacity: screened earlier wins.
                first = bare_candidate(price, gpus, capacity_rps=2.0, order=-1)
                assert _replicas_before(first, kth) == k
                # Another price: strictly below the threshold's cost, whatever the rounding.
                cheaper = bare_candidate(price * 0.7, gpus, capacity_rps=1.0, order=1)
                below = _replicas_before(cheaper, kth)
                assert cheaper.cost(below) < kth[0] <= cheaper.cost(below + 1)
    assert _replicas_before(bare_candidate(1.0, 1, 1.0, 0), None) > 10**15


@pytest.mark.slow
def test_headroom_and_traffic_scale_the_analytic_minimum() -> None:
    # No headroom: 10 / 9.89 still needs 2. 30 requests/s with 20 %: 36 / 9.89 -> at least 4.
    assert hand_plan(headroom=0.0).best.replicas == 2  # type: ignore[union-attr]
    busy = plan_capacity(
        LLAMA3_8B,
        [GpuOffer(H100, PRICE)],
        replace(TRAFFIC, requests_per_s=30.0),
        SLO,
        HAND,
    )
    assert busy.best is not None and busy.best.replicas is not None
    assert busy.best.replicas >= 4


def test_a_trace_replays_time_scaled() -> None:
    trace = PoissonWorkload(10.0, 3000, constant(PROMPT), constant(OUTPUT)).trace(seed=5)
    from_trace = plan_capacity(
        LLAMA3_8B, [GpuOffer(H100, PRICE)], Traffic(10.0, trace=trace), SLO, HAND
    )
    assert from_trace.best is not None and from_trace.best.replicas == 2
    # The same trace at 40 requests/s: the demand quadruples, and so does the analytic minimum.
    faster = plan_capacity(
        LLAMA3_8B, [GpuOffer(H100, PRICE)], Traffic(40.0, trace=trace), SLO, HAND
    )
    assert faster.demand_requests_per_s == pytest.approx(48.0, rel=EXACT)
    assert faster.best is not None and faster.best.replicas is not None
    assert faster.best.replicas >= math.ceil(48.0 / 9.8897)


# -- Infeasible candidates and their reasons --------------------------------------------------


def statuses(plan: CapacityPlan) -> dict[tuple[str, int, DType], CandidatePlan]:
    return {(c.gpu, c.tp, c.weight_dtype): c for c in plan.candidates}


@pytest.mark.slow
def test_infeasible_candidates_say_why() -> None:
    options = replace(
        HAND,
        timer_factory=PlanOptions().timer_factory,  # StepCostModel: it knows the formats
        tp_candidates=(1, 3, 16),
        dtype_pairs=((DType.BF16, DType.BF16), (DType.FP8, DType.FP8)),
        gpus_per_node=8,
    )
    plan = plan_capacity(
        LLAMA3_8B, [GpuOffer(H100, 3.0), GpuOffer(A100, 1.5)], TRAFFIC, SLO, options
    )
    by_key = statuses(plan)
    assert (
        "cannot be split evenly across 3 GPUs"
        in by_key[("h100-sxm5-80gb", 3, DType.BF16)].reasons[0]
    )
    assert "exceeds the 8 GPUs of a node" in by_key[("h100-sxm5-80gb", 16, DType.BF16)].reasons[0]
    assert "no fp8 compute" in by_key[("a100-sxm4-80gb", 1, DType.FP8)].reasons[0]
    for candidate in plan.candidates:
        assert candidate.feasible == (candidate.status is CandidateStatus.PLANNED)
        if candidate.status is CandidateStatus.INFEASIBLE:
            assert candidate.replicas is None and candidate.reasons
    # Ranked: planned by cost, then pruned, then infeasible.
    order = [c.status for c in plan.candidates]
    assert order == sorted(
        order,
        key=[CandidateStatus.PLANNED, CandidateStatus.PRUNED, CandidateStatus.INFEASIBLE].index,
    )
    costs = [c.cost_per_hour_usd or 0.0 for c in plan.candidates if c.feasible]
    assert costs == sorted(costs) and len(costs) >= 2


def test_requests_the_kv_cache_cannot_hold_are_a_caveat() -> None:
    # 0.5 % of the prompts are longer than a replica's whole KV cache: within the 1 % a p99
    # tolerates, so the candidate is planned, but it says those requests cannot be served.
    kv_plan = memory_plan(
        LLAMA3_8B, H100, Deployment(), max_num_batched_tokens=CHUNK, max_num_seqs=256
    )
    kv_tokens = int(kv_plan.kv_pool_bytes / kv_plan.kv_bytes_per_token) // 16 * 16
    prompts = HistogramLengths((2048, 2049, kv_tokens + 1, kv_tokens + 2), (0.995, 0.0, 0.005))
    traffic = Traffic(10.0, prompts, constant(OUTPUT))
    plan = plan_capacity(LLAMA3_8B, [GpuOffer(H100, PRICE)], traffic, SLO, HAND)
    (candidate,) = plan.candidates
    assert candidate.status is CandidateStatus.PLANNED
    assert any("cannot be served on it" in reason for reason in candidate.reasons)
    # The hand-checked case's cache holds ~213 sequences at 2,176 tokens: below max_num_seqs.
    (hand,) = hand_plan().candidates
    assert any(
        reason.startswith("KV-limited batch: the cache holds about 213 sequences")
        for reason in hand.reasons
    ), hand.reasons


def test_tp_beyond_the_kv_heads_is_planned_and_reported() -> None:
    options = replace(HAND, tp_candidates=(16,), gpus_per_node=16)
    plan = plan_capacity(LLAMA3_8B, [GpuOffer(H100, PRICE)], TRAFFIC, SLO, options)
    (candidate,) = plan.candidates
    assert candidate.status is CandidateStatus.PLANNED
    assert candidate.kv_head_replication == 2.0  # 16 GPUs over 8 KV heads
    assert any("KV heads replicated" in reason for reason in candidate.reasons)


def test_weights_that_do_not_fit_are_infeasible() -> None:
    small = replace(H100, memory_bytes=24 * 10**9, id="small-24gb")
    options = replace(HAND, timer_factory=PlanOptions().timer_factory)
    plan = plan_capacity(LLAMA3_70B, [GpuOffer(small, 1.0)], TRAFFIC, SLO, options)
    (candidate,) = plan.candidates
    assert candidate.status is CandidateStatus.INFEASIBLE
    # 70.6 B parameters in bf16 are 141 GB: nothing of a 21.6 GB usable part is left.
    assert candidate.reasons[0].startswith("does not fit")


def test_an_sla_a_lone_request_misses_is_unreachable_at_any_load() -> None:
    # A lone 2,048-token prompt takes two 1,024-token steps: 2 * 44.96 = 89.9 ms.
    tight_ttft = plan_capacity(
        LLAMA3_8B, [GpuOffer(H100, PRICE)], TRAFFIC, Slo(ttft_p99_ms=80, tpot_p99_ms=50), HAND
    )
    (candidate,) = tight_ttft.candidates
    assert candidate.status is CandidateStatus.INFEASIBLE
    assert "unreachable even at low load" in candidate.reasons[0]
    assert "takes 90 ms to prefill" in candidate.reasons[0]
    assert candidate.simulations == 0  # decided without simulating
    # A lone decode step is 4 ms + 40 us = 4.04 ms.
    tight_tpot = plan_capacity(
        LLAMA3_8B, [GpuOffer(H100, PRICE)], TRAFFIC, Slo(ttft_p99_ms=1000, tpot_p99_ms=4), HAND
    )
    (candidate,) = tight_tpot.candidates
    assert "decodes at 4.0 ms per token" in candidate.reasons[0]


def test_per_bucket_ttft_slos_are_checked_on_their_own_prompts() -> None:
    # 90 % short prompts (100-200 tokens), 10 % long ones (8,000-9,000). A long prompt takes
    # some 8 steps of 45 ms to prefill, and short requests arriving meanwhile wait behind it
    # (article A: one long prefill spoils everyone's p99).
    prompts = HistogramLengths(edges_tokens=(100, 200, 8000, 9000), weights=(0.9, 0.0, 0.1))
    traffic = Traffic(4.0, prompts, constant(64))
    options = replace(HAND, probe_requests=1000)

    def plan(*buckets: TtftBucket) -> CandidatePlan:
        (candidate,) = plan_capacity(
            LLAMA3_8B, [GpuOffer(H100, PRICE)], traffic, Slo(5000, 50, buckets), options
        ).candidates
        return candidate

    plain = plan()
    assert plain.replicas == 1 and plain.predicted is not None
    assert plain.predicted.ttft_p99_ms <= 5000
    # 400 ms for the short prompts: at 4 requests/s a replica, 1 % of them wait behind a long
    # prefill for longer; halving the load (two replicas) halves how often that happens.
    split = plan(TtftBucket(1000, 400))
    assert split.replicas == 2
    assert split.predicted is not None
    (short,) = split.predicted.ttft_p99_ms_by_bucket
    assert short.max_prompt_tokens == 1000
    short_p99 = short.ttft_p99_ms
    assert short_p99 is not None and short_p99 <= 400
    # 300 ms: still missed at an eighth of the capacity, where blocking is rarer but still
    # above 1 %: unreachable without separating the long prompts.
    blocked = plan(TtftBucket(1000, 300))
    assert blocked.status is CandidateStatus.INFEASIBLE
    assert "for prompts up to 1000 tokens" in blocked.reasons[0]
    # 10 ms: below a lone short prompt's prefill (4 ms + 200 x 40 us = 12 ms): no simulation.
    alone = plan(TtftBucket(1000, 10))
    assert alone.status is CandidateStatus.INFEASIBLE and alone.simulations == 0
    assert "the p99 of prompts up to 1000 tokens" in alone.reasons[0]


def test_a_bucket_with_few_probe_requests_says_its_p99_is_about_its_maximum() -> None:
    prompts = HistogramLengths(edges_tokens=(100, 200, 2000, 2100), weights=(0.97, 0.0, 0.03))
    slo = Slo(5000, 50, (TtftBucket(1000, 2000), TtftBucket(4096, 3000)))
    plan = plan_capacity(
        LLAMA3_8B,
        [GpuOffer(H100, PRICE)],
        Traffic(4.0, prompts, constant(64)),
        slo,
        replace(HAND, probe_requests=1000),
    )
    (note,) = [n for n in plan.notes if n.startswith("only ")]
    assert "have prompts in (1000, 4096] tokens" in note  # some 30 of 1,000
    assert not any("(0, 1000]" in n for n in plan.notes)


# -- Disaggregated pools ----------------------------------------------------------------------


def test_disaggregated_pools_beside_the_aggregated_plan() -> None:
    plan = hand_plan(disaggregated=True)
    split = plan.disaggregated
    assert split is not None and plan.best is not None
    # Decode pool: a decode step of n is 4 ms + n * 40 us, within 50 ms up to n = 1,150, capped
    # by max_num_seqs 256 and (below) the KV cache. The mean batch L has L + 2.326 sqrt(L) = B.
    # and by the sequences the KV cache holds at the mean decode context P + T/2 = 2,176.
    kv_tokens = plan.best.kv_capacity_tokens
    assert kv_tokens is not None
    batch = min(256, kv_tokens // (PROMPT + OUTPUT // 2))
    assert split.decode_batch_size == batch == 213  # the KV cache binds here
    z = 2.3263478740408408
    mean = ((-z + math.sqrt(z * z + 4 * batch)) / 2) ** 2
    assert split.decode_mean_batch == pytest.approx(mean, rel=EXACT)
    # That bound, L / (E[T-1] x step) = 63 requests/s a replica, starts the simulated search:
    # one decode replica carries all 12 requests/s within the TPOT SLO.
    step_s = A_S + math.ceil(mean) * B_S
    assert mean / (255 * step_s) == pytest.approx(63.15, rel=1e-3)
    assert split.decode_replicas == 1
    assert split.decode_max_requests_per_s_per_replica == pytest.approx(12.0, rel=EXACT)
    assert split.decode_tpot_ms is not None and split.decode_tpot_ms <= 50
    # Prefill pool: at most 1024 / (44.96 ms x 2048) = 11.1 prompts/s a replica: 2 or more.
    assert split.prefill_replicas is not None and split.prefill_replicas >= 2
    total = split.prefill_replicas + split.decode_replicas
    assert split.cost_per_hour_usd == pytest.approx(total * PRICE, rel=EXACT)
    assert split.cheaper == "aggregated"  # 3+ replicas against 2
    assert split.verdict.startswith("aggregated")


# -- Promises: monotone in the SLA and in the traffic, pruning is safe -------------------------

OFFERS = [GpuOffer(H100, 3.49), GpuOffer(A100, 1.59), GpuOffer(L40S, 1.09)]
REAL = PlanOptions(
    tp_candidates=(1, 2),
    dtype_pairs=((DType.BF16, DType.BF16), (DType.FP8, DType.FP8)),
    chunk_tokens_candidates=(2048,),
    probe_requests=1000,
    max_plans=2,
)
REAL_TRAFFIC = Traffic(10.0, PercentileLengths(1500, 2500, 4000), PercentileLengths(200, 300, 400))


def efficient(offers: list[GpuOffer]) -> list[GpuOffer]:
    return [replace(offer, efficiency=EFFICIENCY) for offer in offers]


def best_cost(plan: CapacityPlan) -> float:
    best = plan.best
    return best.cost_per_hour_usd if best and best.cost_per_hour_usd else math.inf


@pytest.mark.slow
def test_a_tighter_sla_never_gets_a_cheaper_plan() -> None:
    ladder = [(2000, 100), (1000, 50), (500, 30), (250, 20), (120, 10)]
    plans = [
        plan_capacity(LLAMA3_8B, efficient(OFFERS), REAL_TRAFFIC, Slo(ttft, tpot), REAL)
        for ttft, tpot in ladder
    ]
    costs = [best_cost(plan) for plan in plans]
    assert costs == sorted(costs)
    assert math.isfinite(costs[0]) and costs[0] < costs[-1]  # the ladder does bite
    # Candidate by candidate too, wherever both SLAs planned it.
    for loose, tight in itertools.pairwise(plans):
        loose_replicas = {
            (c.gpu, c.tp, c.weight_dtype): c.replicas for c in loose.candidates if c.feasible
        }
        for c in tight.candidates:
            key = (c.gpu, c.tp, c.weight_dtype)
            if c.feasible and key in loose_replicas:
                assert c.replicas >= loose_replicas[key]  # type: ignore[operator]


@pytest.mark.slow
def test_doubling_the_traffic_never_lowers_the_replica_count() -> None:
    options = replace(REAL, exhaustive=True, max_plans=50)
    previous: dict[tuple[str, int, DType], int] = {}
    for rate in (5.0, 10.0, 20.0, 40.0):
        plan = plan_capacity(
            LLAMA3_8B,
            efficient([GpuOffer(H100, 3.49)]),
            replace(REAL_TRAFFIC, requests_per_s=rate),
            Slo(1000, 50),
            options,
        )
        replicas = {
            (c.gpu, c.tp, c.weight_dtype): c.replicas
            for c in plan.candidates
            if c.feasible and c.replicas is not None
        }
        assert replicas  # every rate plans something
        for key, count in replicas.items():
            assert count >= previous.get(key, 0), key
        previous = replicas


@pytest.mark.slow
def test_pruning_never_changes_the_best_plan() -> None:
    slo = Slo(1000, 50)
    pruned = plan_capacity(LLAMA3_8B, efficient(OFFERS), REAL_TRAFFIC, slo, REAL)
    everything = plan_capacity(
        LLAMA3_8B, efficient(OFFERS), REAL_TRAFFIC, slo, replace(REAL, exhaustive=True)
    )
    assert best_cost(pruned) == best_cost(everything)
    assert pruned.simulations < everything.simulations
    # What was pruned could not have entered the answer: its cost bound is at least the cost
    # of the last (max_plans-th) plan returned.
    returned = [c.cost_per_hour_usd or 0.0 for c in pruned.candidates if c.feasible]
    assert len(returned) == REAL.max_plans
    for candidate in pruned.candidates:
        if candidate.status is CandidateStatus.PRUNED:
            assert candidate.cost_lower_bound_per_hour_usd is not None
            assert candidate.cost_lower_bound_per_hour_usd >= returned[-1] - 1e-9
    # And every exhaustively planned candidate costs at least its analytic bound.
    for candidate in everything.candidates:
        if candidate.feasible:
            assert candidate.cost_per_hour_usd >= candidate.cost_lower_bound_per_hour_usd  # type: ignore[operator]


def planned(plan: CapacityPlan) -> list[tuple[str, int, DType, int | None, int | None, float]]:
    """What a plan chose: each returned candidate, its replica count and sustainable rate."""
    return [
        (c.gpu, c.tp, c.weight_dtype, c.chunk_tokens, c.replicas, c.max_requests_per_s_per_replica)
        for c in plan.candidates
        if c.status is CandidateStatus.PLANNED
        and c.replicas is not None
        and c.max_requests_per_s_per_replica is not None
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "offers", "traffic", "slo", "options"),
    [
        pytest.param(LLAMA3_8B, OFFERS, REAL_TRAFFIC, Slo(1000, 50), REAL, id="8b"),
        # Chunk siblings tie at equal cost: the larger analytic capacity ranks first, found in
        # whichever order the search meets them.
        pytest.param(
            LLAMA3_8B,
            OFFERS,
            REAL_TRAFFIC,
            Slo(500, 30),
            replace(REAL, chunk_tokens_candidates=(512, 2048), max_plans=3),
            id="8b-ties",
        ),
        pytest.param(
            LLAMA3_70B,
            [GpuOffer(H100, 3.49), GpuOffer(A100, 1.59)],
            replace(REAL_TRAFFIC, requests_per_s=4.0),
            Slo(1500, 60),
            replace(
                REAL,
                tp_candidates=(2, 4, 8),
                dtype_pairs=((DType.BF16, DType.BF16),),
                chunk_tokens_candidates=(512, 2048),
            ),
            id="70b",
        ),
    ],
)
def test_branch_and_bound_plans_what_the_exhaustive_search_plans(
    model: ModelSpec, offers: list[GpuOffer], traffic: Traffic, slo: Slo, options: PlanOptions
) -> None:
    # The search is ordered by an estimate, starts each replica search at a guess and prunes
    # on rank: none of it may change which candidates are returned, in which order, with how
    # many replicas and what sustainable rate (the sizing probes follow from the replicas).
    fast = plan_capacity(model, efficient(offers), traffic, slo, options)
    everything = plan_capacity(
        model, efficient(offers), traffic, slo, replace(options, exhaustive=True)
    )
    chosen = planned(fast)
    assert len(chosen) == options.max_plans
    assert chosen == planned(everything)
    assert fast.simulations < everything.simulations


# -- Input checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Slo(ttft_p99_ms=0, tpot_p99_ms=50), "slo.ttft_p99_ms"),
        (lambda: Slo(ttft_p99_ms=100, tpot_p99_ms=-1), "slo.tpot_p99_ms"),
        (
            lambda: Slo(100, 50, (TtftBucket(4096, 200), TtftBucket(1024, 100))),
            "slo.ttft_p99_ms_by_prompt_tokens[1].max_prompt_tokens",
        ),
        (lambda: Traffic(-1.0, constant(10), constant(10)), "traffic.requests_per_s"),
        (lambda: Traffic(1.0), "traffic"),
        (lambda: PlanOptions(tp_candidates=()), "tp_candidates"),
        (lambda: PlanOptions(tp_candidates=(1, 0)), "tp_candidates[1]"),
        (lambda: PlanOptions(headroom=-0.1), "headroom"),
        (lambda: GpuOffer(H100, 0.0), "price_per_gpu_hour_usd[h100-sxm5-80gb]"),
        (lambda: plan_capacity(LLAMA3_8B, [], TRAFFIC, SLO, HAND), "gpus"),
        (lambda: PlanOptions(max_simulated_steps=0), "max_simulated_steps"),
        (
            lambda: plan_capacity(
                LLAMA3_8B,
                [GpuOffer(replace(H100, id=f"gpu-{i}"), PRICE) for i in range(65)],
                TRAFFIC,
                SLO,
                replace(
                    HAND,
                    tp_candidates=(1, 2, 4, 8),
                    dtype_pairs=((DType.BF16, DType.BF16), (DType.FP8, DType.FP8)),
                    chunk_tokens_candidates=(512, 1024),
                ),
            ),
            "candidates",  # 65 GPUs x 4 tp x 2 formats x 2 chunks = 1,040 > 1,024
        ),
        (
            lambda: plan_capacity(
                LLAMA3_8B,
                [GpuOffer(H100, PRICE)],
                TRAFFIC,
                SLO,
                replace(HAND, max_simulated_steps=1000),
            ),
            "probe_requests",  # one probe of 3,000 requests takes some 20,000 steps
        ),
    ],
)
def test_impossible_input_names_the_field(build: object, field: str) -> None:
    with pytest.raises(SpecError) as raised:
        build()  # type: ignore[operator]
    assert raised.value.field == field


def test_a_model_spec_is_all_the_planner_needs_from_the_model() -> None:
    # Not a catalog id: any ModelSpec plans (here a tiny one that fits everywhere).
    tiny = ModelSpec(
        num_layers=4,
        hidden_size=512,
        num_attention_heads=8,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=2048,
        ffn_type=LLAMA3_8B.ffn_type,
        vocab_size=32000,
        max_context_tokens=8192,
    )
    plan = plan_capacity(tiny, [GpuOffer(H100, PRICE)], TRAFFIC, SLO, HAND)
    assert plan.best is not None and plan.best.replicas == 2  # the timer alone decides
