"""The simulator's fast path (decode-only steps run in closed-form groups, decode steps timed by
interpolation) against the step-by-step path that calls the timer for every step
(`exact_step_times=True`).

Tolerance: a timer affine in the decode context gives the same schedule, so counts are equal
and times agree to float rounding (1e-9). A timer curved in the context is interpolated within
1/64 of the mean context, which can move a step across an arrival and reorder the schedule
slightly: counts of completed and rejected requests stay exact, latency percentiles agree within
0.5 %.
"""

import math
from dataclasses import dataclass
from typing import Any

import pytest

from app.engine.simulation import ClosedLoop, PrefixCache, SchedulerConfig, simulate
from app.engine.specs import Deployment, Efficiency
from app.engine.step_cost import StepCostModel
from app.engine.step_load import StepLoad
from app.engine.workload import PercentileLengths, PoissonWorkload, Trace
from tests.engine.test_counting import H100, LLAMA3_8B, MIXTRAL

PROMPTS = PercentileLengths(p50=1000, p90=3000, p99=8000, max_tokens=16_000)
OUTPUTS = PercentileLengths(p50=200, p90=500, p99=1000, max_tokens=2000)
PERCENTILE_TOLERANCE = 0.005


@dataclass(frozen=True)
class AffineTimer:
    def seconds(self, load: StepLoad) -> float:
        return (
            0.005
            + 2e-5 * load.tokens
            + 1e-8 * load.decode_context_tokens
            + 1e-12 * load.prefill_attention_pairs
        )


@dataclass(frozen=True)
class CurvedTimer:
    def seconds(self, load: StepLoad) -> float:
        return (
            0.005
            + 1e-5 * load.tokens
            + 2e-6 * math.sqrt(load.decode_context_tokens * load.decode_seqs)
            + 1e-12 * load.prefill_attention_pairs
        )


def poisson(rate: float, count: int = 1500, seed: int = 4) -> Trace:
    return PoissonWorkload(rate, count, PROMPTS, OUTPUTS).trace(seed=seed)


# (trace, KV tokens, scheduler, keyword arguments): low load (long decode-only stretches),
# busy, a tight KV cache (preemptions), a closed loop, a shared prefix, multi-step scheduling.
CASES: dict[str, tuple[Trace, int, SchedulerConfig, dict[str, Any]]] = {
    "low load": (poisson(0.5), 300_000, SchedulerConfig(), {}),
    "busy": (poisson(6.0), 300_000, SchedulerConfig(), {}),
    "tight kv": (poisson(6.0), 40_000, SchedulerConfig(max_num_seqs=64), {}),
    "closed loop": (poisson(1.0, 800), 300_000, SchedulerConfig(), {"closed_loop": ClosedLoop(8)}),
    "prefix": (poisson(2.0), 300_000, SchedulerConfig(), {"prefix_cache": PrefixCache(512)}),
    "multi-step": (poisson(3.0), 300_000, SchedulerConfig(num_scheduler_steps=8), {}),
}


@pytest.mark.parametrize("case", CASES)
def test_an_affine_timer_gives_the_same_schedule_both_ways(case: str) -> None:
    trace, kv_tokens, scheduler, extra = CASES[case]
    fast = simulate(
        trace, AffineTimer(), kv_capacity_tokens=kv_tokens, scheduler=scheduler, **extra
    )
    exact = simulate(
        trace,
        AffineTimer(),
        kv_capacity_tokens=kv_tokens,
        scheduler=scheduler,
        exact_step_times=True,
        **extra,
    )
    assert fast.steps == exact.steps
    assert fast.preemptions == exact.preemptions
    assert fast.completed_requests == exact.completed_requests
    assert fast.requests.first_token_s == pytest.approx(exact.requests.first_token_s, rel=1e-9)
    assert fast.requests.finish_s == pytest.approx(exact.requests.finish_s, rel=1e-9)
    for name in ("p50", "p90", "p99", "mean", "max"):
        assert getattr(fast.itl_ms, name) == pytest.approx(getattr(exact.itl_ms, name), rel=1e-9)
    assert fast.mean_requests_in_system == pytest.approx(exact.mean_requests_in_system, rel=1e-9)
    assert [(q.waiting_requests, q.running_requests) for q in fast.queue] == [
        (q.waiting_requests, q.running_requests) for q in exact.queue
    ]
    assert [q.time_s for q in fast.queue] == pytest.approx([q.time_s for q in exact.queue])
    if case == "tight kv":
        assert fast.preemptions > 0
    # The fast path calls the timer for a small share of the steps.
    assert fast.timer_calls < exact.timer_calls / 2


@pytest.mark.parametrize("case", CASES)
def test_a_curved_timer_agrees_within_half_a_percent(case: str) -> None:
    trace, kv_tokens, scheduler, extra = CASES[case]
    fast = simulate(
        trace, CurvedTimer(), kv_capacity_tokens=kv_tokens, scheduler=scheduler, **extra
    )
    exact = simulate(
        trace,
        CurvedTimer(),
        kv_capacity_tokens=kv_tokens,
        scheduler=scheduler,
        exact_step_times=True,
        **extra,
    )
    assert fast.completed_requests == exact.completed_requests
    assert fast.rejected_requests == exact.rejected_requests
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        for name in ("p50", "p90", "p99"):
            assert getattr(getattr(fast, metric), name) == pytest.approx(
                getattr(getattr(exact, metric), name), rel=PERCENTILE_TOLERANCE
            ), (metric, name)


# The roofline's closure (`StepCostModel.step_seconds_function`, what the loop times prefill
# steps with) and its memos must give the very float `step_seconds` computes, bit for bit:
# tolerance 0.
@pytest.mark.parametrize("moe", [False, True])
@pytest.mark.parametrize("tp", [1, 2])
def test_the_roofline_fast_path_is_the_same_float(moe: bool, tp: int) -> None:
    efficiency = Efficiency(gemm=0.6, attention=0.55, memory=0.8, overhead_ms=2.0)
    model = StepCostModel(MIXTRAL if moe else LLAMA3_8B, H100, Deployment(tp=tp), efficiency)
    reference = StepCostModel(MIXTRAL if moe else LLAMA3_8B, H100, Deployment(tp=tp), efficiency)
    fast = model.step_seconds_function()
    assert fast is not model.step_seconds  # a plain layout gets the closure
    loads = [
        (tokens, chunks, tokens * cached + tokens * (tokens + 1) // 2, cached + tokens, seqs, ctx)
        for tokens, chunks, cached in [(0, 0, 0), (1, 1, 0), (517, 1, 2048), (2048, 3, 7)]
        for seqs, ctx in [(0, 0), (1, 40), (37, 52_001), (256, 1_000_000)]
    ]
    for _ in range(2):  # the second pass reads the memos
        for load in loads:
            expected = reference.seconds(StepLoad(*load[:2], float(load[2]), *load[3:]))
            assert fast(*load) == expected
            assert model.step_seconds(*load) == expected
            assert model.seconds(StepLoad(*load[:2], float(load[2]), *load[3:])) == expected
