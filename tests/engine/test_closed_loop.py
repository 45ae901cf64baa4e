"""Closed-loop load (a fixed number of users, each sending its next request when the last one
finishes, after a think time) against closed forms: throughput = concurrency / (E2E + think)."""

from __future__ import annotations

import pytest

from app.engine.simulation import ClosedLoop, SchedulerConfig, simulate
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
    """4 users, 0.5 s think time: the four prefill together (400 tokens in one step) and decode
    together, 110 ms a round, then think. 40 requests are 10 rounds: the makespan is 10 x 0.110
    + 9 x 0.5 s (no think after the last), and the throughput tends to 4 / (0.110 + 0.5)."""
    think = 0.5
    result = simulate(_trace(40), STEP, kv_capacity_tokens=BIG_KV, closed_loop=ClosedLoop(4, think))
    assert result.max_running_requests == 4
    assert result.e2e_ms.p99 == pytest.approx(110.0)
    assert result.makespan_s == pytest.approx(10 * 0.110 + 9 * think)
    assert result.requests_per_s == pytest.approx(40 / (10 * 0.110 + 9 * think))
    long = simulate(_trace(4000), STEP, kv_capacity_tokens=BIG_KV, closed_loop=ClosedLoop(4, think))
    assert long.requests_per_s == pytest.approx(4 / (0.110 + think), rel=0.001)


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
