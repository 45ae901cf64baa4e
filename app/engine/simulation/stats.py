"""A finished run summarised: percentiles, queue samples, the saturation verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np
from numpy.typing import NDArray

from app.engine.simulation.results import (
    Percentiles,
    QueueSample,
    RequestTimes,
    SimulationResult,
)
from app.engine.units import MS_PER_S
from app.engine.workload import Trace

if TYPE_CHECKING:
    from app.engine.simulation.loop import _Run

__all__ = ["QUEUE_SAMPLES", "SATURATION_GROWTH_FRACTION", "SATURATION_Z", "summarise"]

QUEUE_SAMPLES: Final = 200
"""At most this many (time, waiting, running) samples describe the queue over a run."""
SATURATION_GROWTH_FRACTION: Final = 0.02
"""`saturated` needs the backlog to grow by more than this fraction of the arrivals..."""
SATURATION_Z: Final = 3.0
"""...and by more than this many standard deviations of a Poisson count of those arrivals."""


def _percentiles(values_s: NDArray[np.float64]) -> Percentiles:
    if len(values_s) == 0:
        return Percentiles(p50=0.0, p90=0.0, p99=0.0, mean=0.0, max=0.0)
    p50, p90, p99 = np.percentile(values_s, [50, 90, 99]) * MS_PER_S
    return Percentiles(
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        mean=float(values_s.mean() * MS_PER_S),
        max=float(values_s.max() * MS_PER_S),
    )


def _weighted_percentiles(gaps_s: NDArray[np.float64], weights: NDArray[np.int64]) -> Percentiles:
    """Percentiles of a sample where `gaps_s[i]` occurs `weights[i]` times: the smallest value
    whose cumulative weight reaches the fraction (the inverted CDF)."""
    keep = weights > 0
    gaps_s, weights = gaps_s[keep], weights[keep]
    if len(gaps_s) == 0:
        return Percentiles(p50=0.0, p90=0.0, p99=0.0, mean=0.0, max=0.0)
    order = np.argsort(gaps_s, kind="stable")
    sorted_gaps = gaps_s[order]
    cumulative = np.cumsum(weights[order])
    total = int(cumulative[-1])
    at = np.searchsorted(cumulative, np.array([0.50, 0.90, 0.99]) * total, side="left")
    p50, p90, p99 = sorted_gaps[np.minimum(at, len(sorted_gaps) - 1)] * MS_PER_S
    return Percentiles(
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        mean=float(np.dot(gaps_s, weights) / total * MS_PER_S),
        max=float(sorted_gaps[-1] * MS_PER_S),
    )


def _queue_samples(run: _Run) -> tuple[QueueSample, ...]:
    stride = max(1, -(-len(run.queue_time_s) // QUEUE_SAMPLES))
    return tuple(
        QueueSample(time_s=time_s, waiting_requests=waiting, running_requests=running)
        for time_s, waiting, running in zip(
            run.queue_time_s[::stride],
            run.queue_waiting[::stride],
            run.queue_running[::stride],
            strict=True,
        )
    )


def _backlog_growth(
    arrival_s: NDArray[np.float64], finish_s: NDArray[np.float64], admitted: NDArray[np.bool_]
) -> tuple[int, int, float]:
    """Arrivals and completions in the second half of the arrival window, and its length."""
    arrivals = arrival_s[admitted]
    start_s, end_s = arrivals[len(arrivals) // 2], arrivals[-1]
    arrived = int(np.count_nonzero((arrivals > start_s) & (arrivals <= end_s)))
    finished = finish_s[admitted]
    completed = int(np.count_nonzero((finished > start_s) & (finished <= end_s)))
    return arrived, completed, end_s - start_s


def summarise(
    trace: Trace,
    run: _Run,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    request_overhead_s: float = 0.0,
) -> SimulationResult:
    """The run's statistics; every request's tokens come `request_overhead_s` later than the
    steps that made them (the engine's per-request dispatch, outside the step times)."""
    times = RequestTimes(
        arrival_s=trace.arrival_s,
        first_token_s=np.array(run.first_token_s) + request_overhead_s,
        finish_s=np.array(run.finish_s) + request_overhead_s,
        output_tokens=trace.output_tokens,
    )
    done = ~times.rejected
    ttft_s = times.ttft_s[done]
    e2e_s = times.e2e_s[done]
    tpot_all_s = times.tpot_s[done]
    tpot_s = tpot_all_s[~np.isnan(tpot_all_s)]
    makespan_s = float(times.finish_s[done].max() - trace.arrival_s[done].min())
    # A trace of one-token requests arriving together can finish in one step; it still took it.
    makespan_s = max(makespan_s, float(np.finfo(np.float64).tiny))

    good = np.ones(len(ttft_s), dtype=bool)
    if ttft_slo_ms is not None:
        good &= ttft_s * MS_PER_S <= ttft_slo_ms
    if tpot_slo_ms is not None:
        good &= ~(tpot_all_s * MS_PER_S > tpot_slo_ms)  # NaN (one token) meets any TPOT SLO

    arrived, completed, window_s = _backlog_growth(trace.arrival_s, times.finish_s, done)
    growth = arrived - completed
    saturated = growth > max(SATURATION_GROWTH_FRACTION * arrived, SATURATION_Z * arrived**0.5)

    return SimulationResult(
        ttft_ms=_percentiles(ttft_s),
        tpot_ms=_percentiles(tpot_s),
        itl_ms=_weighted_percentiles(
            np.frombuffer(run.itl_gap_s, dtype=np.float64),
            np.frombuffer(run.itl_weight, dtype=np.int64),
        ),
        e2e_ms=_percentiles(e2e_s),
        throughput_tokens_per_s=float(trace.output_tokens[done].sum()) / makespan_s,
        requests_per_s=int(done.sum()) / makespan_s,
        goodput_requests_per_s=int(good.sum()) / makespan_s,
        saturated=bool(saturated),
        backlog_growth_requests_per_s=growth / window_s if window_s > 0 else 0.0,
        completed_requests=int(done.sum()),
        rejected_requests=int(run.rejected_mask.sum()),
        preemptions=run.preemptions,
        steps=run.steps,
        timer_calls=run.timer_calls,
        makespan_s=makespan_s,
        mean_requests_in_system=run.area_in_system / makespan_s,
        mean_waiting_requests=run.area_waiting / makespan_s,
        max_waiting_requests=run.max_waiting,
        max_running_requests=run.max_running,
        queue=_queue_samples(run),
        requests=times,
    )
