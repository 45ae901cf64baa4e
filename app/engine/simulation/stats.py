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

__all__ = [
    "QUEUE_SAMPLES",
    "SATURATION_GROWTH_FRACTION",
    "SATURATION_Z",
    "percentiles",
    "summarise",
]

QUEUE_SAMPLES: Final = 200
"""At most this many (time, waiting, running) samples describe the queue over a run."""
SATURATION_GROWTH_FRACTION: Final = 0.02
"""`saturated` needs the backlog to grow by more than this fraction of the arrivals..."""
SATURATION_Z: Final = 3.0
"""...and by more than this many standard deviations of a Poisson count of those arrivals."""


def percentiles(values_s: NDArray[np.float64]) -> Percentiles:
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


_BIN_SHIFT: Final = 40
"""`_weighted_percentiles` bins gaps by their bit patterns' top 23 bits: the exponent and 12
mantissa bits, 4096 bins a doubling (each under 2.5e-4 of its value wide)."""
_PIECE_BIN_SHIFT: Final = 46
"""`_itl_percentiles` bins by the top 17 bits: 64 bins a doubling (each under 1.1 % of its value
wide), so that most pieces of decode-only groups, whose gaps rise by about 1e-4 a step, lie in
one bin."""
_FINE_BIN_SHIFT: Final = 36
"""`_select` bins by the top 28 bits: 2**16 bins a doubling."""
_SORTED_AT_ONCE: Final = 1 << 12
"""`_select` sorts up to this many values at once; more it bins first."""
_MOST_BINS: Final = 1 << 22
"""Beyond this many bins (gaps spanning some thousand doublings) it sorts instead."""
_FRACTIONS: Final = (0.50, 0.90, 0.99)


def _weighted_percentiles(gaps_s: NDArray[np.float64], weights: NDArray[np.int64]) -> Percentiles:
    """Percentiles of a sample where `gaps_s[i]` occurs `weights[i]` times: the smallest value
    whose cumulative weight reaches the fraction (the inverted CDF).

    A run has millions of gaps; sorting them is what costs. Positive doubles order like their
    bit patterns as int64, so the top bits of those patterns are bins in order: one pass
    weighs the bins, the cumulative weights name the bin each percentile falls in, and only
    the gaps in that bin are sorted. Exact: the same values as a sort of every gap."""
    if not (weights > 0).all():
        keep = weights > 0
        gaps_s, weights = gaps_s[keep], weights[keep]
    if len(gaps_s) == 0:
        return Percentiles(p50=0.0, p90=0.0, p99=0.0, mean=0.0, max=0.0)
    total = int(weights.sum())
    targets = [fraction * total for fraction in _FRACTIONS]
    values: list[float] = []
    keys = gaps_s.view(np.int64) >> _BIN_SHIFT if float(gaps_s.min()) > 0 else None
    first_bin = int(keys.min()) if keys is not None else 0
    if keys is not None and int(keys.max()) - first_bin < _MOST_BINS:
        keys -= first_bin
        # Float sums of whole weights are exact below 2**53.
        cumulative = np.cumsum(np.bincount(keys, weights=weights))
        for target in targets:
            at = min(int(np.searchsorted(cumulative, target, side="left")), len(cumulative) - 1)
            before = float(cumulative[at - 1]) if at else 0.0
            inside = keys == at
            values.append(_select(gaps_s[inside], weights[inside], before, target))
    else:
        order = np.argsort(gaps_s)  # equal gaps are interchangeable: any order
        sorted_gaps = gaps_s[order]
        cumulative_weights = np.cumsum(weights[order])
        at_all = np.searchsorted(cumulative_weights, np.array(targets), side="left")
        values = [float(v) for v in sorted_gaps[np.minimum(at_all, len(sorted_gaps) - 1)]]
    p50, p90, p99 = (value * MS_PER_S for value in values)
    return Percentiles(
        p50=p50,
        p90=p90,
        p99=p99,
        mean=_weighted_sum(gaps_s, weights) / total * MS_PER_S,
        max=float(gaps_s.max() * MS_PER_S),
    )


def _weighted_sum(values: NDArray[np.float64], weights: NDArray[np.int64]) -> float:
    """The sum of `values` times `weights`. Not `np.dot`: OpenBLAS splits a long dot product
    over threads that spin on after it, a core taken for milliseconds from whatever else the
    machine runs (the server's event loop, the other simulations of a plan)."""
    return float(np.multiply(values, weights, dtype=np.float64).sum())


def _select(
    values_s: NDArray[np.float64], weights: NDArray[np.int64], before: float, target: float
) -> float:
    """The smallest of `values_s` (positive) at which `before` plus the cumulative weight of
    the values up to it reaches `target`; many values are binned finely first (bins of 2**-16
    of their value), and only the bin it falls in is sorted."""
    if len(values_s) > _SORTED_AT_ONCE:
        keys = values_s.view(np.int64) >> _FINE_BIN_SHIFT
        keys -= int(keys.min())
        if int(keys.max()) < _MOST_BINS:
            cumulative = before + np.cumsum(np.bincount(keys, weights=weights))
            at = min(int(np.searchsorted(cumulative, target, side="left")), len(cumulative) - 1)
            before = float(cumulative[at - 1]) if at else before
            inside = keys == at
            values_s, weights = values_s[inside], weights[inside]
    order = np.argsort(values_s)
    running = before + np.cumsum(weights[order])
    index = min(int(np.searchsorted(running, target, side="left")), len(values_s) - 1)
    return float(values_s[order][index])


def _progressions(
    first_s: NDArray[np.float64], rise_s: NDArray[np.float64], steps: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Each progression's `first + rise * k` for k below its steps, one after another."""
    starts = np.cumsum(steps) - steps
    k = np.arange(int(steps.sum()), dtype=np.float64) - np.repeat(starts, steps)
    values = np.repeat(rise_s, steps) * k
    values += np.repeat(first_s, steps)
    return values


def _itl_percentiles(
    gaps_s: NDArray[np.float64],
    weights: NDArray[np.int64],
    groups: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]],
) -> Percentiles:
    """`_weighted_percentiles` of the single gaps and of the groups' progressions written
    out (gap k of a piece is `first + rise * k`, `weight` times), without writing out the
    millions of grouped gaps: a piece's gaps change by a millionth a step, so nearly every
    piece lies within one bin of `_weighted_percentiles`, weighed whole; only the pieces in
    the bins the percentiles fall in, and those spanning bins, are written out. The same
    values as writing every piece out; the mean in closed form (to rounding)."""
    first_s, rise_s, steps, group_weights = groups
    live = (steps > 0) & (group_weights > 0)
    if not live.all():
        first_s, rise_s = first_s[live], rise_s[live]
        steps, group_weights = steps[live], group_weights[live]
    if not (weights > 0).all():
        keep = weights > 0
        gaps_s, weights = gaps_s[keep], weights[keep]
    last_s = first_s + rise_s * (steps - 1)
    low_s, high_s = np.minimum(first_s, last_s), np.maximum(first_s, last_s)
    # Pieces spanning bins (or not positive, or far apart) are written out as single gaps.
    spans = (low_s.view(np.int64) >> _PIECE_BIN_SHIFT) != (
        high_s.view(np.int64) >> _PIECE_BIN_SHIFT
    )
    spans |= ~(low_s > 0)
    if spans.any():
        gaps_s = np.concatenate(
            [gaps_s, _progressions(first_s[spans], rise_s[spans], steps[spans])]
        )
        weights = np.concatenate([weights, np.repeat(group_weights[spans], steps[spans])])
        whole = ~spans
        first_s, rise_s, low_s = first_s[whole], rise_s[whole], low_s[whole]
        high_s, steps, group_weights = high_s[whole], steps[whole], group_weights[whole]
    if len(first_s) == 0 or not (len(gaps_s) == 0 or float(gaps_s.min()) > 0):
        everything = np.concatenate([gaps_s, _progressions(first_s, rise_s, steps)])
        return _weighted_percentiles(
            everything, np.concatenate([weights, np.repeat(group_weights, steps)])
        )
    piece_keys = low_s.view(np.int64) >> _PIECE_BIN_SHIFT
    gap_keys = gaps_s.view(np.int64) >> _PIECE_BIN_SHIFT
    first_bin = int(piece_keys.min())
    last_bin = int(piece_keys.max())
    if len(gap_keys):
        first_bin = min(first_bin, int(gap_keys.min()))
        last_bin = max(last_bin, int(gap_keys.max()))
    if last_bin - first_bin >= _MOST_BINS:
        everything = np.concatenate([gaps_s, _progressions(first_s, rise_s, steps)])
        return _weighted_percentiles(
            everything, np.concatenate([weights, np.repeat(group_weights, steps)])
        )
    piece_keys -= first_bin
    gap_keys -= first_bin
    bins = last_bin - first_bin + 1
    piece_tokens = steps * group_weights
    # Float sums of whole weights are exact below 2**53.
    cumulative = np.cumsum(
        np.bincount(gap_keys, weights=weights, minlength=bins)
        + np.bincount(piece_keys, weights=piece_tokens, minlength=bins)
    )
    total = int(weights.sum()) + int(piece_tokens.sum())
    values: list[float] = []
    for fraction in _FRACTIONS:
        target = fraction * total
        at = min(int(np.searchsorted(cumulative, target, side="left")), bins - 1)
        before = float(cumulative[at - 1]) if at else 0.0
        singles = gap_keys == at
        wholes = piece_keys == at
        in_bin = np.concatenate(
            [gaps_s[singles], _progressions(first_s[wholes], rise_s[wholes], steps[wholes])]
        )
        in_weights = np.concatenate(
            [weights[singles], np.repeat(group_weights[wholes], steps[wholes])]
        )
        values.append(_select(in_bin, in_weights, before, target))
    # A piece's gaps sum to steps * first + rise * steps * (steps - 1) / 2.
    grouped_sum = _weighted_sum(steps * first_s + rise_s * (steps * (steps - 1) / 2), group_weights)
    p50, p90, p99 = (value * MS_PER_S for value in values)
    return Percentiles(
        p50=p50,
        p90=p90,
        p99=p99,
        mean=(_weighted_sum(gaps_s, weights) + grouped_sum) / total * MS_PER_S,
        max=max(float(gaps_s.max()) if len(gaps_s) else 0.0, float(high_s.max())) * MS_PER_S,
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
    arrivals = np.sort(arrival_s[admitted])
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
    *,
    sent_s: NDArray[np.float64] | None = None,
) -> SimulationResult:
    """The run's statistics; every request's tokens come `request_overhead_s` later than the
    steps that made them (the engine's per-request dispatch, outside the step times).
    `sent_s`: when the requests were sent, where that is not when they reached the run (a
    disaggregated decode pool's requests reach it when their KV has come over)."""
    arrival_s = trace.arrival_s if sent_s is None else sent_s
    times = RequestTimes(
        arrival_s=arrival_s,
        first_token_s=np.frombuffer(run.first_token_s, dtype=np.float64) + request_overhead_s,
        finish_s=np.frombuffer(run.finish_s, dtype=np.float64) + request_overhead_s,
        output_tokens=trace.output_tokens,
    )
    done = ~times.rejected
    ttft_s = times.ttft_s[done]
    e2e_s = times.e2e_s[done]
    tpot_all_s = times.tpot_s[done]
    tpot_s = tpot_all_s[~np.isnan(tpot_all_s)]
    makespan_s = float(times.finish_s[done].max() - arrival_s[done].min())
    # A trace of one-token requests arriving together can finish in one step; it still took it.
    makespan_s = max(makespan_s, float(np.finfo(np.float64).tiny))

    good = np.ones(len(ttft_s), dtype=bool)
    if ttft_slo_ms is not None:
        good &= ttft_s * MS_PER_S <= ttft_slo_ms
    if tpot_slo_ms is not None:
        good &= ~(tpot_all_s * MS_PER_S > tpot_slo_ms)  # NaN (one token) meets any TPOT SLO

    arrived, completed, window_s = _backlog_growth(arrival_s, times.finish_s, done)
    growth = arrived - completed
    saturated = growth > max(SATURATION_GROWTH_FRACTION * arrived, SATURATION_Z * arrived**0.5)

    return SimulationResult(
        ttft_ms=percentiles(ttft_s),
        tpot_ms=percentiles(tpot_s),
        itl_ms=_itl_percentiles(*run.itl_singles(), run.itl_groups()),
        e2e_ms=percentiles(e2e_s),
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
