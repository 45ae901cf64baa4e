"""The disaggregated plan's pools, sized by simulation, checked by simulating the planned pools:
they meet the SLOs, and one decode replica fewer does not. Steps are timed by a linear timer
(4 ms + 40 us a token)."""

from dataclasses import dataclass

import pytest

from app.engine.planning import DisaggregatedPlan, GpuOffer, Slo, Traffic
from app.engine.planning.disaggregated import plan_disaggregated
from app.engine.planning.probes import ProbeSample, build_sample
from app.engine.simulation import (
    DisaggregatedResult,
    KvLink,
    Pool,
    SchedulerConfig,
    simulate_disaggregated,
)
from app.engine.specs import Deployment
from app.engine.step_load import StepLoad
from app.engine.workload import PercentileLengths
from tests.engine.test_counting import H100

KV_TOKENS = 400_000
KV_BYTES_PER_TOKEN = 131_072.0  # Llama-3-8B, bf16
SCHEDULER = SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=2048)
SLO = Slo(ttft_p99_ms=500, tpot_p99_ms=10)
TRAFFIC = Traffic(
    50.0,
    PercentileLengths(p50=512, p90=512, p99=512),
    PercentileLengths(p50=256, p90=256, p99=256),
)
DEMAND = 60.0  # 20 % headroom


@dataclass(frozen=True)
class LinearTimer:
    def seconds(self, load: StepLoad) -> float:
        return 0.004 + 40e-6 * load.tokens


def plan(link: KvLink | None = None) -> tuple[ProbeSample, DisaggregatedPlan]:
    sample = build_sample(TRAFFIC, 1000, seed=0)
    outcome = plan_disaggregated(
        sample,
        LinearTimer(),
        Deployment(),
        GpuOffer(H100, 2.0),
        SCHEDULER,
        kv_capacity_tokens=KV_TOKENS,
        block_tokens=16,
        slo=SLO,
        traffic_rps=TRAFFIC.requests_per_s,
        demand_rps=DEMAND,
        aggregated_cost_per_hour_usd=100.0,
        kv_bytes_per_token=KV_BYTES_PER_TOKEN,
        link=link,
    )
    return sample, outcome.plan


def run(sample: ProbeSample, prefill: int, decode: int) -> DisaggregatedResult:
    return simulate_disaggregated(
        sample.trace(DEMAND),
        Pool(LinearTimer(), KV_TOKENS, SCHEDULER, prefill),
        Pool(LinearTimer(), KV_TOKENS, SCHEDULER, decode),
        kv_bytes_per_token=KV_BYTES_PER_TOKEN,
    )


def test_the_planned_pools_meet_the_slos_and_one_decode_replica_fewer_does_not() -> None:
    sample, split = plan()
    assert split.prefill_replicas is not None and split.decode_replicas is not None
    # A decode step of n sequences is 4 ms + n x 40 us: within 10 ms up to n = 150, so the
    # 60 requests/s of 255 decode tokens need more than one replica.
    assert split.decode_batch_size == 150
    assert split.decode_replicas >= 2
    planned = run(sample, split.prefill_replicas, split.decode_replicas)
    assert not planned.prefill.saturated and not planned.served.saturated
    assert planned.served.ttft_ms.p99 <= SLO.ttft_p99_ms
    assert planned.served.tpot_ms.p99 <= SLO.tpot_p99_ms
    assert split.decode_tpot_ms == pytest.approx(planned.served.tpot_ms.p99, rel=1e-9)
    fewer = run(sample, split.prefill_replicas, split.decode_replicas - 1)
    assert fewer.served.saturated or fewer.served.tpot_ms.p99 > SLO.tpot_p99_ms
    assert split.decode_max_requests_per_s_per_replica == pytest.approx(
        DEMAND / split.decode_replicas, rel=1e-9
    )
    total = split.prefill_replicas + split.decode_replicas
    assert split.cost_per_hour_usd == pytest.approx(total * 2.0, rel=1e-9)


def test_a_slow_link_can_leave_no_decode_pool_that_meets_the_tpot_slo() -> None:
    # 3 s per transfer spread over 255 gaps adds 11.8 ms to every TPOT: over the 10 ms SLO
    # whatever the decode pool.
    _, split = plan(KvLink(latency_s=3.0))
    assert split.decode_replicas is None
    assert split.cheaper == "aggregated"
    assert "decode pool cannot meet" in split.verdict
