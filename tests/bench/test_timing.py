"""Timing statistics against a scripted clock: exact medians and percentiles, warm-up dropped."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator

import numpy as np
import pytest

from app.bench.timing import HostTimer, measure, quantile, summarize

_NS_PER_MS = 1_000_000
_EXACT = 1e-12  # tolerance: only the rounding of one interpolation step


def _scripted_clock(durations_ms: list[float]) -> tuple[HostTimer, list[str]]:
    """A timer whose clock advances by the given durations, one per timed run, and a log of the
    synchronisations and clock reads it made."""
    log: list[str] = []

    def readings() -> Iterator[int]:
        now = 1_000 * _NS_PER_MS
        for duration in durations_ms:
            yield now
            now += round(duration * _NS_PER_MS)
            yield now
            now += 7 * _NS_PER_MS  # time between runs is never counted

    ticks = readings()

    def clock() -> int:
        log.append("clock")
        return next(ticks)

    def synchronize() -> None:
        log.append("sync")

    return HostTimer(clock=clock, synchronize=synchronize), log


def test_median_and_percentiles_of_scripted_runs_exclude_warmup() -> None:
    # Two warm-up runs of 1000 ms (cold caches, kernel selection) and five timed runs.
    timer, log = _scripted_clock([1000.0, 1000.0, 5.0, 1.0, 4.0, 2.0, 3.0])
    calls: list[int] = []
    stats = measure(lambda: calls.append(1), timer, repeats=5, warmup=2)
    # Sorted timed runs 1, 2, 3, 4, 5 ms: median 3; p10 at position 0.4 -> 1 + 0.4 * (2 - 1);
    # p90 at position 3.6 -> 4 + 0.6 * (5 - 4). Neither warm-up run of 1000 ms shows.
    assert stats.median_ms == pytest.approx(3.0, abs=_EXACT)
    assert stats.p10_ms == pytest.approx(1.4, abs=_EXACT)
    assert stats.p90_ms == pytest.approx(4.6, abs=_EXACT)
    assert stats.repeats == 5
    assert len(calls) == 7
    # Each run: synchronise, read, run, synchronise, read.
    assert log == ["sync", "clock", "sync", "clock"] * 7


def test_even_number_of_runs_interpolates_the_median() -> None:
    timer, _ = _scripted_clock([2.0, 8.0, 4.0, 6.0])
    stats = measure(lambda: None, timer, repeats=4, warmup=0)
    # Sorted 2, 4, 6, 8: median 5; p10 at 0.3 -> 2.6; p90 at 2.7 -> 7.4.
    assert (stats.median_ms, stats.p10_ms, stats.p90_ms) == pytest.approx(
        (5.0, 2.6, 7.4), abs=_EXACT
    )


def test_single_run_has_equal_statistics() -> None:
    stats = summarize([12.5])
    assert (stats.median_ms, stats.p10_ms, stats.p90_ms, stats.repeats) == (12.5, 12.5, 12.5, 1)


def test_quantile_agrees_with_numpy_linear_percentiles() -> None:
    rng = random.Random(4)
    for size in (1, 2, 3, 7, 50):
        values = sorted(rng.uniform(0.1, 100.0) for _ in range(size))
        for q in (0.0, 0.1, 0.5, 0.9, 1.0):
            expected = float(np.percentile(values, 100 * q))  # numpy's default: linear
            assert quantile(values, q) == pytest.approx(expected, rel=1e-12)


def test_percentiles_stay_ordered_with_ties() -> None:
    stats = summarize([3.0, 3.0, 3.0, 3.0 + 1e-12])
    assert stats.p10_ms <= stats.median_ms <= stats.p90_ms


@pytest.mark.parametrize("samples", [[], [1.0, 0.0], [1.0, -2.0], [math.nan], [math.inf]])
def test_summarize_rejects_impossible_durations(samples: list[float]) -> None:
    with pytest.raises(ValueError, match="samples_ms"):
        summarize(samples)


def test_measure_rejects_zero_repeats_and_negative_warmup() -> None:
    timer, _ = _scripted_clock([1.0])
    with pytest.raises(ValueError, match="repeats"):
        measure(lambda: None, timer, repeats=0, warmup=0)
    with pytest.raises(ValueError, match="warmup"):
        measure(lambda: None, timer, repeats=1, warmup=-1)


def test_default_host_timer_measures_real_sleep() -> None:
    elapsed_ms = HostTimer()(lambda: time.sleep(0.02))
    # Sleeps at least 20 ms; a loaded machine may add a lot, so only a loose upper bound.
    assert 20.0 <= elapsed_ms < 2_000.0
