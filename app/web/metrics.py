"""The service's Prometheus metrics: requests and their latency by route template, the
heavy-work pool, and the process, in a registry of the app's own (`HttpMetrics`).

Every request is observed on the event loop, and a labelled `prometheus_client` counter and
histogram cost ~4 µs a request there (a lock per increment, a linear bucket search): a quarter of
what a `/healthz` costs. So requests are observed into plain lists here, ~0.5 µs, in batches
(`app.web.request_log`), and the registry reads them when Prometheus scrapes
(`_RequestCollector`), as the same families with the same names, labels, buckets and `_created`
samples that `Counter` and `Histogram` give.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from app.web.heavy import HeavyWork

__all__ = ["LATENCY_BUCKETS_S", "HttpMetrics"]

# Estimates answer in about a millisecond, catalog writes in a few; simulations and plans take
# seconds, up to the heavy-work timeout.
LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
"""Upper bounds of the latency histogram's buckets (and +Inf)."""

_LE = tuple(
    floatToGoString(bound)  # type: ignore[no-untyped-call]
    for bound in (*LATENCY_BUCKETS_S, math.inf)
)
"""The buckets' `le` labels as Histogram writes them ("0.0005", ..., "120.0", "+Inf")."""
_SUM = len(LATENCY_BUCKETS_S) + 1
"""Index of a series' latency sum, after its per-bucket counts (+Inf last)."""
_CREATED = _SUM + 1
"""Index of a series' creation time (the first request it counted)."""


class _HeavyWorkCollector(Collector):
    """The heavy-work pool's admission and outcomes, read when Prometheus scrapes."""

    def __init__(self, heavy: HeavyWork) -> None:
        self.heavy = heavy

    def collect(self) -> Iterator[Metric]:
        jobs = CounterMetricFamily(
            "ridgeline_heavy_jobs",
            "Heavy jobs (simulations, plans, charts) by outcome: done, failed (raised or "
            "timed out), refused (429), cancelled (client gone).",
            labels=["outcome"],
        )
        for outcome, count in self.heavy.outcomes.items():
            jobs.add_metric([outcome], count)
        yield jobs
        yield GaugeMetricFamily(
            "ridgeline_heavy_jobs_admitted",
            "Heavy jobs running or queued now.",
            value=self.heavy.admitted,
        )
        yield GaugeMetricFamily(
            "ridgeline_heavy_jobs_capacity",
            "Heavy jobs admitted at once before a 429.",
            value=self.heavy.capacity,
        )


class _RequestCollector(Collector):
    """`ridgeline_http_requests` (a counter by method, route template and status) and
    `ridgeline_http_request_duration_seconds` (a histogram by method and route template), read
    from `HttpMetrics`' series when Prometheus scrapes."""

    def __init__(self, metrics: HttpMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "ridgeline_http_requests",
            "HTTP requests by method, route template and status.",
            labels=["method", "route", "status"],
        )
        latency = HistogramMetricFamily(
            "ridgeline_http_request_duration_seconds",
            "Time from the request's arrival to the end of its response, by route template.",
            labels=["method", "route"],
        )
        if self.metrics.before_collect is not None:
            self.metrics.before_collect()  # requests answered but not yet observed
        # Snapshots: the event loop may add to a series while a scrape reads it.
        series = [(key, list(values)) for key, values in list(self.metrics.series.items())]
        by_route: dict[tuple[str, str], list[float]] = {}
        for (method, route, status), values in series:
            count = _count(values)
            requests.add_metric([method, route, str(status)], count, created=values[_CREATED])
            merged = by_route.get((method, route))
            if merged is None:
                by_route[method, route] = values
            else:
                for i in range(_SUM + 1):
                    merged[i] += values[i]
                merged[_CREATED] = min(merged[_CREATED], values[_CREATED])
        for (method, route), values in by_route.items():
            cumulative = 0.0
            buckets = []
            for le, count in zip(_LE, values, strict=False):
                cumulative += count
                buckets.append((le, cumulative))
            latency.add_metric([method, route], buckets, sum_value=values[_SUM])
            # HistogramMetricFamily takes no creation time; Histogram writes it as this sample.
            latency.samples.append(
                Sample(
                    f"{latency.name}_created",
                    {"method": method, "route": route},
                    values[_CREATED],
                )
            )
        yield requests
        yield latency


def _count(values: list[float]) -> float:
    """The requests a series counted: the sum of its buckets."""
    return sum(values[:_SUM])


class HttpMetrics:
    """The request counter and latency histogram, process metrics and the heavy-work pool's
    figures, in a registry of the app's own."""

    def __init__(self, heavy: HeavyWork | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        if heavy is not None:
            self.registry.register(_HeavyWorkCollector(heavy))
        self.before_collect: Callable[[], None] | None = None
        """Called as a scrape reads the series (the middleware's `RequestLog.flush`), on the
        event loop: the app's `/metrics` route is a coroutine."""
        self.series: dict[tuple[str, str, int], list[float]] = {}
        """(method, route template, status) -> requests per latency bucket (+Inf last), their
        latency sum, and when the first was counted."""
        self.registry.register(_RequestCollector(self))

    def observed(self, method: str, route: str, status: int) -> int:
        """Requests of this method, route template and status observed so far."""
        values = self.series.get((method, route, status))
        return 0 if values is None else round(_count(values))

    def observe(self, method: str, route: str, status: int, elapsed_s: float) -> None:
        """Count one request and its latency."""
        values = self.series.get((method, route, status))
        if values is None:
            values = [0.0] * (_CREATED + 1)
            values[_CREATED] = time.time()
            self.series[method, route, status] = values
        # The first bucket whose upper bound is at or above the latency (+Inf past the last),
        # as prometheus_client's Histogram counts it.
        values[bisect_left(LATENCY_BUCKETS_S, elapsed_s)] += 1.0
        values[_SUM] += elapsed_s
