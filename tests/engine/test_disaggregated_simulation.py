"""Disaggregated prefill and decode against hand-worked cases: a prefill pool and a decode pool
timed by linear timers, the KV moved over a link of known latency and bandwidth. Exact results
use a relative tolerance of 1e-9 (float rounding)."""

from dataclasses import dataclass

import numpy as np
import pytest

from app.engine.simulation import (
    KvLink,
    Pool,
    SchedulerConfig,
    SimulationTooLong,
    simulate_disaggregated,
)
from app.engine.simulation.loop import _run
from app.engine.specs import SpecError
from app.engine.step_load import StepLoad
from app.engine.workload import Trace

EXACT = 1e-9
KV_BYTES_PER_TOKEN = 131_072.0  # Llama-3-8B, bf16: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B


@dataclass(frozen=True)
class LinearTimer:
    base_s: float
    per_token_s: float

    def seconds(self, load: StepLoad) -> float:
        return self.base_s + self.per_token_s * load.tokens


PREFILL = LinearTimer(0.010, 1e-4)
DECODE = LinearTimer(0.005, 1e-5)


def pools(prefill_replicas: int = 1, decode_replicas: int = 1) -> tuple[Pool, Pool]:
    return (
        Pool(PREFILL, 1_000_000, SchedulerConfig(), prefill_replicas),
        Pool(DECODE, 1_000_000, SchedulerConfig(), decode_replicas),
    )


def test_two_requests_pay_prefill_then_transfer_then_decode() -> None:
    # Two requests 10 s apart, so neither waits for the other in either pool.
    trace = Trace.from_rows([(0.0, 100, 3), (10.0, 200, 2)])
    link = KvLink(bandwidth_bytes_per_s=50e9, latency_s=1e-3)
    prefill, decode = pools()
    result = simulate_disaggregated(
        trace, prefill, decode, kv_bytes_per_token=KV_BYTES_PER_TOKEN, link=link
    )
    # TTFT: one prefill step of the whole prompt.
    ttft_s = [0.010 + 100 * 1e-4, 0.010 + 200 * 1e-4]
    # Transfer: latency + prompt * 131,072 B / 50 GB/s.
    transfer_s = [1e-3 + 100 * KV_BYTES_PER_TOKEN / 50e9, 1e-3 + 200 * KV_BYTES_PER_TOKEN / 50e9]
    # Decode pool: the first step computes the first token's KV (1 token) and emits the second;
    # each later decode step of one sequence emits one more: 0.005 + 1e-5 s each.
    step_s = 0.005 + 1e-5
    finish_s = [ttft_s[0] + transfer_s[0] + 2 * step_s, 10.0 + ttft_s[1] + transfer_s[1] + step_s]
    times = result.served.requests
    assert times.ttft_s.tolist() == pytest.approx(ttft_s, rel=EXACT)
    assert times.finish_s.tolist() == pytest.approx(finish_s, rel=EXACT)
    # The transfer delays the second token: TPOT = (transfer + steps) / (T - 1).
    tpot_s = [(transfer_s[0] + 2 * step_s) / 2, transfer_s[1] + step_s]
    assert times.tpot_s.tolist() == pytest.approx(tpot_s, rel=EXACT)
    assert result.served.itl_ms.max == pytest.approx((transfer_s[1] + step_s) * 1e3, rel=EXACT)
    # Gaps: R1's transfer + step and step, R2's transfer + step; the median is the second.
    assert result.served.itl_ms.p50 == pytest.approx((transfer_s[0] + step_s) * 1e3, rel=EXACT)
    assert result.transfer_ms.max == pytest.approx(transfer_s[1] * 1e3, rel=EXACT)
    assert result.prefill.ttft_ms.max == pytest.approx(ttft_s[1] * 1e3, rel=EXACT)
    assert result.served.completed_requests == 2


def test_a_pool_of_k_replicas_serves_each_a_kth_of_the_rate() -> None:
    # 20 requests 1 ms apart overlap on one prefill replica; on 1,000 replicas each replica sees
    # them 1 s apart, alone, so every TTFT is one lone prefill step.
    trace = Trace.from_rows([(0.001 * i, 100, 2) for i in range(20)])
    crowded = simulate_disaggregated(trace, *pools(), kv_bytes_per_token=KV_BYTES_PER_TOKEN)
    spread = simulate_disaggregated(
        trace, *pools(1000, 1000), kv_bytes_per_token=KV_BYTES_PER_TOKEN
    )
    assert crowded.served.ttft_ms.max > 2 * (0.010 + 100 * 1e-4) * 1e3
    assert spread.served.ttft_ms.max == pytest.approx((0.010 + 100 * 1e-4) * 1e3, rel=EXACT)


def test_one_token_requests_end_at_the_prefill_pool() -> None:
    trace = Trace.from_rows([(0.0, 100, 1), (1.0, 100, 2)])
    result = simulate_disaggregated(trace, *pools(), kv_bytes_per_token=KV_BYTES_PER_TOKEN)
    times = result.served.requests
    assert times.finish_s[0] == pytest.approx(0.010 + 100 * 1e-4, rel=EXACT)
    assert np.isnan(times.tpot_s[0])
    assert result.served.completed_requests == 2


def test_impossible_links_name_their_field() -> None:
    with pytest.raises(SpecError) as error:
        KvLink(bandwidth_bytes_per_s=0.0)
    assert error.value.field == "link.bandwidth_bytes_per_s"
    with pytest.raises(SpecError) as error:
        KvLink(latency_s=-1.0)
    assert error.value.field == "link.latency_s"


class _RecordingTimer:
    """10 ms a step; records each step's prefill work (tokens, KV tokens, attention pairs)."""

    def __init__(self) -> None:
        self.prefills: list[tuple[int, int, float]] = []

    def seconds(self, load: StepLoad) -> float:
        if load.prefill_tokens:
            self.prefills.append(
                (load.prefill_tokens, load.prefill_kv_tokens, load.prefill_attention_pairs)
            )
        return 0.01


def test_a_request_preempted_in_a_decode_pool_recomputes_its_prompt() -> None:
    """Two 100-token prompts arrive with their KV; 15 blocks of 16 tokens hold 7 blocks each
    (112 tokens) and one spare. When both need an eighth block, the newer is preempted and its
    blocks, its prompt's among them, are freed: back in, it recomputes all 113 tokens it had
    (100 of prompt, 13 generated), nothing found cached: 113 x 114 / 2 = 6,441 attention
    pairs."""
    timer = _RecordingTimer()
    trace = Trace.from_rows([(0.0, 100, 60), (0.0, 100, 60)])
    run = _run(
        trace,
        timer,
        kv_capacity_tokens=15 * 16,
        block_tokens=16,
        scheduler=SchedulerConfig(),
        ttft_slo_ms=None,
        tpot_slo_ms=None,
        exact_step_times=True,
        max_steps=None,
        closed_loop=None,
        prefix_cache=None,
        prefilled_s=np.array([0.0, 0.0]),
    )
    assert run.preemptions == 1
    # The first step writes each request's first token (emitted by the prefill pool).
    assert timer.prefills == [(2, 202, 202.0), (113, 113, 6441.0)]


def test_a_decode_pool_run_is_bounded_by_its_own_steps_not_by_prompts() -> None:
    """100 prompts of 8,000 tokens and 2 output tokens: a decode pool never prefills the
    prompts, so a run of 200 steps holds its 100 (the prefill pool's prompt steps are not its)."""
    timer = _RecordingTimer()
    trace = Trace.from_rows([(0.01 * i, 8000, 2) for i in range(100)])
    pool = Pool(timer, 10_000_000, SchedulerConfig())
    first = simulate_disaggregated(trace, pool, pool, kv_bytes_per_token=1e5)
    again = simulate_disaggregated(
        trace, pool, pool, kv_bytes_per_token=1e5, max_steps=200, prefill_run=first.prefill
    )
    assert again.served.steps == first.served.steps <= 200
    # Without the prefill run, both runs share the 200 steps: the prefill pool's alone exceed it.
    assert first.prefill.steps > 200
    with pytest.raises(SimulationTooLong):
        simulate_disaggregated(trace, pool, pool, kv_bytes_per_token=1e5, max_steps=200)
