"""What a run measured: latency summaries, queue samples, per-request times."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["Percentiles", "QueueSample", "RequestTimes", "SimulationResult"]


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Summary of one latency over the requests (or, for ITL, over all token gaps). The unit is
    in the name of the field that holds it."""

    p50: float
    p90: float
    p99: float
    mean: float
    max: float


@dataclass(frozen=True, slots=True)
class QueueSample:
    """The replica's state during the step running at `time_s`."""

    time_s: float
    waiting_requests: int
    running_requests: int
    """Admitted and not finished: decoding or (partially) prefilling."""


@dataclass(frozen=True, eq=False)
class RequestTimes:
    """Per-request times in seconds, indexed like the trace. NaN for rejected requests, and
    `tpot_s` NaN for requests of one output token."""

    arrival_s: NDArray[np.float64]
    first_token_s: NDArray[np.float64]
    finish_s: NDArray[np.float64]
    output_tokens: NDArray[np.int64]

    @property
    def rejected(self) -> NDArray[np.bool_]:
        return np.isnan(self.finish_s)

    @property
    def ttft_s(self) -> NDArray[np.float64]:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> NDArray[np.float64]:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> NDArray[np.float64]:
        gaps = (self.output_tokens - 1).astype(np.float64)
        gaps[gaps == 0] = np.nan
        return (self.finish_s - self.first_token_s) / gaps


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """What one run of `simulate` measured.

    Latency percentiles (milliseconds) are over completed requests (linear interpolation between
    order statistics); ITL ones over every token gap of every request, each gap weighing one (the
    smallest gap whose cumulative share reaches the fraction, as gaps are kept in equal-valued
    groups). TPOT and ITL are 0 when no request produced a second token. Rates are per second of
    makespan: from the first arrival to the last token. `saturated` is defined in `simulate`.
    """

    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    throughput_tokens_per_s: float
    """Output tokens per second."""
    requests_per_s: float
    """Completed requests per second."""
    goodput_requests_per_s: float
    """Completed requests meeting both SLOs, per second."""
    saturated: bool
    backlog_growth_requests_per_s: float
    """Arrivals minus completions per second over the second half of the arrival window: about
    the arrival rate minus the service rate when saturated, about 0 when not."""
    completed_requests: int
    rejected_requests: int
    preemptions: int
    steps: int
    timer_calls: int
    """`StepTimer.seconds` calls the run made (at most `steps`; see `simulate`)."""
    makespan_s: float
    mean_requests_in_system: float
    """Time average of waiting + running over the makespan (Little's L)."""
    mean_waiting_requests: float
    max_waiting_requests: int
    """Most requests waiting at the start of a step, before its admissions."""
    max_running_requests: int
    """Most requests admitted and unfinished at once."""
    queue: tuple[QueueSample, ...]
    requests: RequestTimes
