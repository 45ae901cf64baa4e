"""The pure parts of capacity answers: the replica count for an observed rate, and the
Prometheus text an autoscaler reads."""

from __future__ import annotations

import pytest

from app.capacity.schemas import CapacityPredicted, CapacityResponse
from app.capacity.search import replicas_for
from app.capacity.service import prometheus_text
from app.engine.specs import SpecError


def test_replicas_carry_the_observed_rate_with_headroom() -> None:
    # ceil(40 x 1.2 / 13) = ceil(3.69) = 4; exactly 2 when 10 x 1.2 / 6 is 2.0 (no float creep).
    assert replicas_for(40.0, 13.0, 0.2) == 4
    assert replicas_for(10.0, 6.0, 0.2) == 2
    assert replicas_for(0.0, 6.0, 0.2) == 1  # never fewer than one
    assert replicas_for(12.0001, 6.0, 0.0) == 3
    with pytest.raises(SpecError):
        replicas_for(1.0, 0.0, 0.2)


def _answer(name: str, replicas: int | None) -> CapacityResponse:
    return CapacityResponse(
        deployment=name,
        requests_per_s_per_replica=12.5,
        failing_requests_per_s_per_replica=12.6,
        analytic_max_requests_per_s_per_replica=14.0,
        predicted=CapacityPredicted(
            requests_per_s_per_replica=12.5,
            ttft_p50_ms=100.0,
            ttft_p99_ms=250.0,
            tpot_p50_ms=20.0,
            tpot_p99_ms=40.0,
            saturated=False,
        ),
        observed_requests_per_s=None if replicas is None else 30.0,
        headroom=0.2,
        replicas=replicas,
        kv_capacity_tokens=1000,
        engine="vllm@0.24.0",
        basis={"all": "roofline"},
        max_num_seqs=1024,
        chunk_tokens=8192,
        expected_error_pct={"ttft": 12.0, "tpot": None},
        probe_requests=3000,
        simulations=6,
        cached=False,
        reasons=[],
        metric="ridgeline_capacity_requests_per_second",
    )


def test_prometheus_text_has_one_series_per_deployment_and_metric() -> None:
    text = prometheus_text([_answer("chat", 3), _answer('odd"name', None)])
    lines = text.splitlines()
    assert "# TYPE ridgeline_capacity_requests_per_second gauge" in lines
    assert (
        'ridgeline_capacity_requests_per_second{deployment="chat",engine="vllm@0.24.0"} 12.5'
        in lines
    )
    # Latencies in seconds; a quote in a label value is escaped.
    assert (
        'ridgeline_capacity_ttft_p99_seconds{deployment="odd\\"name",engine="vllm@0.24.0"} 0.25'
        in lines
    )
    assert (
        'ridgeline_capacity_tpot_p99_seconds{deployment="chat",engine="vllm@0.24.0"} 0.04' in lines
    )
    # The replica count only where an observed rate was given.
    replicas = [line for line in lines if line.startswith("ridgeline_capacity_replicas{")]
    assert replicas == ['ridgeline_capacity_replicas{deployment="chat",engine="vllm@0.24.0"} 3.0']
