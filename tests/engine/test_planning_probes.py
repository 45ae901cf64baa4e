"""Simulation probes: a verdict settled on a prefix of the requests is the full run's verdict.

A replica timed by `LinearTimer` (4 ms a step plus 40 us a token, chunks of 1,024 tokens) serves
3,000 requests of the planner tests' traffic; its capacity is about 9.9 requests/s for 2,048-token
prompts and 256-token outputs, and somewhat above that for these shorter means. Every rate is
judged twice, by a runner that tries the first quarter first wherever it may and by one that
always simulates the whole sample."""

from __future__ import annotations

import pytest

from app.engine.planning import Slo, Traffic, TtftBucket
from app.engine.planning.probes import PREFIX_SHARE, ProbeRunner, build_sample
from app.engine.simulation import SchedulerConfig
from app.engine.workload import PercentileLengths
from tests.engine.test_planner import A_S, B_S, CHUNK, LinearTimer

TRAFFIC = Traffic(10.0, PercentileLengths(1500, 2500, 4000), PercentileLengths(200, 300, 400))
SAMPLE = build_sample(TRAFFIC, 3000, seed=0)


def runner(slo: Slo, *, prefix: bool) -> ProbeRunner:
    return ProbeRunner(
        SAMPLE,
        LinearTimer(A_S, B_S),
        kv_capacity_tokens=10**7,
        block_tokens=16,
        scheduler=SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=CHUNK),
        slo=slo,
        prefix_above_rps=0.0 if prefix else None,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "slo",
    [
        Slo(1000, 50),
        Slo(400, 50),
        # A tight objective for the short prompts alone: the prefix judges each bucket.
        Slo(5000, 50, (TtftBucket(2000, 250),)),
    ],
    ids=["ttft-1s", "ttft-400ms", "bucket"],
)
def test_a_prefix_verdict_is_the_full_runs(slo: Slo) -> None:
    decided_early = 0
    for rate in (4.0, 6.0, 8.0, 9.0, 10.0, 11.0, 12.0, 14.0, 20.0):
        quick = runner(slo, prefix=True)
        whole = runner(slo, prefix=False)
        verdict = quick.verdict(rate)
        assert verdict.meets == whole.run(rate).meets, rate
        if quick.simulations == 1 and not verdict.meets:
            decided_early += 1
            assert f"of the first {3000 // PREFIX_SHARE} requests" in verdict.misses[0]
    # Overloaded rates are settled on the prefix alone (one simulation of 750 requests).
    assert decided_early >= 2


def test_a_rate_at_or_below_the_prefix_rate_is_simulated_whole() -> None:
    probe = runner(Slo(1000, 50), prefix=False)
    probe.prefix_above_rps = 20.0
    # 30 requests/s is three times what the replica completes: a miss either way.
    assert not probe.verdict(20.0).meets
    assert probe.verdict(20.0).ttft_p99_ms > 1000  # a full run: its latencies are known
    assert probe.simulations == 1
    assert not probe.verdict(30.0).meets
    assert probe.simulations == 2
    assert probe.verdict(30.0).ttft_p99_ms != probe.verdict(30.0).ttft_p99_ms  # NaN: a prefix
    # `run` always simulates whole, and then serves later verdicts at that rate.
    assert probe.run(30.0).ttft_p99_ms > 1000
    assert probe.simulations == 3
    assert probe.verdict(30.0).ttft_p99_ms > 1000
