"""Timing one operation: warm-up, timed repeats, and their median with p10/p90.

A `Timer` runs a callable once and returns how long it took in milliseconds. `HostTimer` reads an
injected clock (nanoseconds; `time.perf_counter_ns` by default) between two synchronisations, so
tests can script the clock; the CUDA timer (device events) lives with the torch code in
`app.bench.device`. This module does not import torch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Clock", "HostTimer", "Timer", "TimingStats", "measure", "quantile", "summarize"]

_NS_PER_MS = 1_000_000

Clock = Callable[[], int]
"""Monotonic time in nanoseconds."""


class Timer(Protocol):
    def __call__(self, operation: Callable[[], object], /) -> float:
        """Run `operation` once and return its duration in milliseconds."""
        ...


def _no_sync() -> None:
    return None


@dataclass(frozen=True, slots=True)
class HostTimer:
    """Times with a host clock. `synchronize` waits for queued device work (a no-op on the CPU,
    where PyTorch runs operations eagerly), before the start and before the stop reading."""

    clock: Clock = time.perf_counter_ns
    synchronize: Callable[[], None] = field(default=_no_sync)

    def __call__(self, operation: Callable[[], object], /) -> float:
        self.synchronize()
        start_ns = self.clock()
        operation()
        self.synchronize()
        stop_ns = self.clock()
        return (stop_ns - start_ns) / _NS_PER_MS


@dataclass(frozen=True, slots=True)
class TimingStats:
    """Statistics of the timed repeats of one operation, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The `q`-quantile by linear interpolation between order statistics (numpy's default,
    Hyndman and Fan type 7): position `q * (n - 1)` in the sorted values."""
    if not sorted_values:
        raise ValueError("sorted_values: needs at least one value")
    if not 0 <= q <= 1:
        raise ValueError(f"q: must be in [0, 1], got {q}")
    position = q * (len(sorted_values) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    low, high = sorted_values[lower], sorted_values[upper]
    value = low + (high - low) * (position - lower)
    return min(max(value, low), high)  # rounding must not step outside the bracket


def summarize(samples_ms: Sequence[float]) -> TimingStats:
    """Median, p10 and p90 of the timed samples; `ValueError` unless all are finite and > 0."""
    if not samples_ms:
        raise ValueError("samples_ms: needs at least one timed repeat")
    for sample in samples_ms:
        if not (math.isfinite(sample) and sample > 0):
            raise ValueError(f"samples_ms: a duration must be finite and positive, got {sample}")
    ordered = sorted(samples_ms)
    return TimingStats(
        median_ms=quantile(ordered, 0.5),
        p10_ms=quantile(ordered, 0.1),
        p90_ms=quantile(ordered, 0.9),
        repeats=len(ordered),
    )


def measure(
    operation: Callable[[], object], timer: Timer, *, repeats: int, warmup: int
) -> TimingStats:
    """Run `operation` `warmup` times, then `repeats` timed times, and summarise the timed ones.

    Warm-up runs go through the same timer (so they pay the same synchronisation) and are
    discarded: they absorb one-off costs such as kernel selection and allocator growth.
    """
    if repeats < 1:
        raise ValueError(f"repeats: must be at least 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup: must not be negative, got {warmup}")
    for _ in range(warmup):
        timer(operation)
    return summarize([timer(operation) for _ in range(repeats)])
