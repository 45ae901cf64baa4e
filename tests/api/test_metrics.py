"""The request metrics (`app.web.metrics`) read as prometheus_client's own Counter and
Histogram would write the same observations: names, labels, buckets, counts and sums."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from app.web.metrics import LATENCY_BUCKETS_S, HttpMetrics

OBSERVED = [
    ("GET", "/v1/gpus/{entry_id}", 200, 0.0004),
    ("GET", "/v1/gpus/{entry_id}", 200, 0.0005),  # on a bound: that bucket (le is <=)
    ("GET", "/v1/gpus/{entry_id}", 404, 0.0031),
    ("POST", "/v1/estimates/prefill", 200, 0.0012),
    ("POST", "/v1/estimates/prefill", 422, 0.0007),
    ("POST", "/v1/plans", 202, 120.0),
    ("POST", "/v1/plans", 503, 121.5),  # past the last bound: +Inf only
]


def _request_lines(registry: CollectorRegistry) -> list[str]:
    """The request metrics' lines, each `_created` sample's value masked."""
    text = generate_latest(registry).decode()
    lines = [line for line in text.splitlines() if "ridgeline_http_request" in line]
    return sorted(re.sub(r"(_created\{.*\}) \S+$", r"\1 T", line) for line in lines)


def test_request_metrics_read_as_prometheus_clients_own() -> None:
    ours = HttpMetrics()
    reference = CollectorRegistry()
    requests = Counter(
        "ridgeline_http_requests",
        "HTTP requests by method, route template and status.",
        ["method", "route", "status"],
        registry=reference,
    )
    latency = Histogram(
        "ridgeline_http_request_duration_seconds",
        "Time from the request's arrival to the end of its response, by route template.",
        ["method", "route"],
        buckets=LATENCY_BUCKETS_S,
        registry=reference,
    )
    for method, route, status, elapsed_s in OBSERVED:
        ours.observe(method, route, status, elapsed_s)
        requests.labels(method, route, str(status)).inc()
        latency.labels(method, route).observe(elapsed_s)
    expected = _request_lines(reference)
    assert _request_lines(ours.registry) == expected
    # Not vacuous: the buckets and +Inf counted as they should.
    assert (
        'ridgeline_http_request_duration_seconds_bucket{le="0.0005",method="GET",'
        'route="/v1/gpus/{entry_id}"} 2.0'
    ) in expected
    assert (
        'ridgeline_http_request_duration_seconds_bucket{le="120.0",method="POST",'
        'route="/v1/plans"} 1.0'
    ) in expected
    assert (
        'ridgeline_http_requests_total{method="POST",route="/v1/plans",status="503"} 1.0'
    ) in expected
