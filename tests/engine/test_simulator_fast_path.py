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
from app.engine.step_load import StepLoad
from app.engine.workload import PercentileLengths, PoissonWorkload, Trace

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
# busy, a tight KV cache (preemptions), a closed loop, a shared prefix, multi-step scheduling,
# SGLang's receive interval.
CASES: dict[str, tuple[Trace, int, SchedulerConfig, dict[str, Any]]] = {
    "low load": (poisson(0.5), 300_000, SchedulerConfig(), {}),
    "busy": (poisson(6.0), 300_000, SchedulerConfig(), {}),
    "tight kv": (poisson(6.0), 40_000, SchedulerConfig(max_num_seqs=64), {}),
    "closed loop": (poisson(1.0, 800), 300_000, SchedulerConfig(), {"closed_loop": ClosedLoop(8)}),
    "prefix": (poisson(2.0), 300_000, SchedulerConfig(), {"prefix_cache": PrefixCache(512)}),
    "multi-step": (poisson(3.0), 300_000, SchedulerConfig(num_scheduler_steps=8), {}),
    "recv interval": (poisson(3.0), 300_000, SchedulerConfig(scheduler_recv_interval=10), {}),
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
