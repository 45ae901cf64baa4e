"""Closed-loop load (a fixed number of users, each sending its next request when the last one
finishes, after a think time) against closed forms: throughput = concurrency / (E2E + think)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from app.engine.simulation import ClosedLoop, SchedulerConfig, SimulationResult, simulate
from app.engine.specs import SpecError
from app.engine.workload import Trace
from tests.engine.test_simulator import BIG_KV, LinearTimer

STEP = LinearTimer(base_s=0.010)  # every step 10 ms, whatever it holds


def _trace(requests: int, prompt: int = 100, output: int = 11) -> Trace:
    # Arrival times are ignored by a closed loop; any sorted ones do.
    return Trace.from_rows([(float(i), prompt, output) for i in range(requests)])


def test_one_user_sends_back_to_back() -> None:
    """One user: each request alone, a 100-token prefill step (its first token) and 10 decode
    steps: E2E 110 ms, and 1 / 0.110 s = 9.09 requests per second."""
    result = simulate(_trace(20), STEP, kv_capacity_tokens=BIG_KV, closed_loop=ClosedLoop(1))
    assert result.e2e_ms.p50 == pytest.approx(110.0)
    assert result.e2e_ms.p99 == pytest.approx(110.0)
    assert result.requests_per_s == pytest.approx(1 / 0.110)
    assert result.max_running_requests == 1
    assert not result.saturated


def test_users_in_lockstep_with_think_time() -> None:
    """4 users, 0.5 s think time, their requests reaching the engine at the same instant (no
    spacing): the four prefill together (400 tokens in one step) and decode together, 110 ms a
    round, then think. 40 requests are 10 rounds: the makespan is 10 x 0.110 + 9 x 0.5 s (no
    think after the last), and the throughput tends to 4 / (0.110 + 0.5)."""
    think = 0.5
    loop = ClosedLoop(4, think, spacing_s=0.0)
    result = simulate(_trace(40), STEP, kv_capacity_tokens=BIG_KV, closed_loop=loop)
    assert result.max_running_requests == 4
    assert result.e2e_ms.p99 == pytest.approx(110.0)
    assert result.makespan_s == pytest.approx(10 * 0.110 + 9 * think)
    assert result.requests_per_s == pytest.approx(40 / (10 * 0.110 + 9 * think))
    long = simulate(_trace(4000), STEP, kv_capacity_tokens=BIG_KV, closed_loop=loop)
    assert long.requests_per_s == pytest.approx(4 / (0.110 + think), rel=0.001)


def _ttfts_ms(result: SimulationResult) -> NDArray[np.float64]:
    requests = result.requests
    return (np.asarray(requests.first_token_s) - np.asarray(requests.arrival_s)) * 1e3


def test_requests_sent_together_reach_the_engine_one_at_a_time_and_unlock_the_loop() -> None:
    """4 users of equal requests (100 prompt tokens, 11 output) against steps of 10 ms + 0.1 ms
    a token. Sent together, they prefill together for ever: every TTFT 10 + 0.1 x 400 = 50 ms.
    Reaching the engine 1 ms apart: the first finds it idle and is prefilled alone (20 ms); the
    other three join the next step beside its decode (10 + 0.1 x 301 = 40.1 ms, ending at
    60.1 ms: 59.1, 58.1, 57.1 ms after they arrived). Their users come back apart, and from
    then on a request is mostly prefilled beside the other three's decodes: 10 + 0.1 x 103 =
    20.3 ms. The throughput is the same; the spacing's size (0.1 or 1 ms) hardly matters."""
    timer = LinearTimer(base_s=0.010, per_token_s=1e-4)

    def run(spacing_s: float) -> SimulationResult:
        loop = ClosedLoop(4, spacing_s=spacing_s)
        return simulate(_trace(400), timer, kv_capacity_tokens=BIG_KV, closed_loop=loop)

    together, apart, closer = run(0.0), run(1e-3), run(1e-4)
    assert _ttfts_ms(together) == pytest.approx(np.full(400, 50.0))
    assert _ttfts_ms(apart)[:4] == pytest.approx([20.0, 59.1, 58.1, 57.1])
    assert apart.ttft_ms.p50 == pytest.approx(20.3)
    assert apart.ttft_ms.mean < 21.0
    assert closer.ttft_ms.mean == pytest.approx(apart.ttft_ms.mean, rel=0.02)
    assert apart.requests_per_s == pytest.approx(together.requests_per_s, rel=0.01)


def test_concurrency_is_capped_by_the_scheduler() -> None:
    """64 users against max_num_seqs 16: at most 16 run, the rest queue; Little's law holds for
    the system: mean in system = throughput x mean E2E (the queue wait inside E2E)."""
    result = simulate(
        _trace(640),
        STEP,
        kv_capacity_tokens=BIG_KV,
        scheduler=SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=2048),
        closed_loop=ClosedLoop(64),
    )
    assert result.max_running_requests == 16
    assert result.mean_requests_in_system == pytest.approx(
        result.requests_per_s * result.e2e_ms.mean / 1000, rel=0.03
    )
    # 64 users with no think time keep 64 requests in the system nearly all the time.
    assert result.mean_requests_in_system == pytest.approx(64, rel=0.05)


def test_closed_loop_rules() -> None:
    with pytest.raises(SpecError) as caught:
        ClosedLoop(0)
    assert caught.value.field == "workload.concurrency"
    with pytest.raises(SpecError) as caught:
        ClosedLoop(4, -1.0)
    assert caught.value.field == "workload.think_time_s"
    with pytest.raises(SpecError) as caught:
        ClosedLoop(4, spacing_s=-1e-3)
    assert caught.value.field == "workload.spacing_s"
