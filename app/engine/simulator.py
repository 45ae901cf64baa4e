"""A discrete-event simulation of one replica serving a trace with continuous batching.

The replica runs forward steps back to back. Each step the scheduler picks the work, the
`StepTimer` says how long the step takes, and at its end every scheduled decode emits one token
and every prefill that completes emits one. Time jumps over idle gaps to the next arrival.

Scheduling follows vLLM. With chunked prefill (`enable_chunked_prefill`, the default, vLLM v1):
every step takes, within a budget of `max_num_batched_tokens` tokens,

1. every running decode, one token each (decodes are never starved);
2. the partially prefilled requests, in admission order, each up to the remaining budget (and up
   to `long_prefill_token_threshold` tokens when that is set);
3. waiting requests, first come first served, each taking up to the remaining budget as its
   first chunk, while running sequences stay within `max_num_seqs` and the head of the queue's
   prompt blocks fit the KV cache (a head that does not fit blocks the queue: FCFS, no skipping).

A chunk of q prompt tokens after c computed ones costs `q*c + q*(q+1)/2` causal attention pairs.

With chunking off a prompt is prefilled whole in one step, and `unchunked_policy` says how:
`PREFILL_FIRST` (the default) is vLLM v0's scheduler: a step that can admit waiting prompts
prefills only them, whole, and every running decode stalls until it ends; decode steps run when
nothing can be admitted. This is the default because it is what "chunked prefill off" meant in
vLLM v0, where the option was introduced and measured, and it is the behaviour article A's
head-of-line argument is about. `MIXED` is vLLM v1 with chunking off: decodes and
whole prompts share a step. Both let one prompt longer than the budget run as its step's only
new prompt (vLLM requires `max_num_batched_tokens >= max_model_len` when chunking is off, so the
budget never truly splits a prompt).

Note what chunking alone does and does not do. It bounds every step to about the budget, so
running decodes keep their inter-token latency while a long prompt prefills. It does not let
short requests that arrive during that prefill overtake it: the partial prefill is scheduled
before the waiting queue and takes the whole remaining budget, as vLLM v1 does by default. Set
`long_prefill_token_threshold` (vLLM's knob of the same name) to cap one request's chunk per step
and leave budget for the short requests behind it.

KV cache: `kv_capacity_tokens` in blocks of `block_tokens`. A request holds
`ceil((prompt + computed output tokens) / block_tokens)` blocks. A waiting request is admitted only
when the blocks for its whole prompt fit (vLLM v0's `can_allocate`; the blocks are reserved for
all its chunks). A decode that needs a new block when none is free preempts the most recently
admitted running request (its blocks are freed, it goes back to the head of the queue and later
recomputes its prompt plus the tokens it had generated; that recompute emits its next token),
repeated until the rest fit; no request is admitted in a step that preempted. A request whose
prompt plus output (less the last token, whose KV is never written) cannot fit in the whole cache
would never finish (it would preempt itself forever), and is rejected at arrival: counted, not
simulated. This includes every prompt that alone exceeds the cache.

Time accounting. The first token is emitted at the end of the step that completes a request's
prefill: TTFT = that time minus arrival. Each later token is emitted at the end of a decode step;
the inter-token latencies (ITL) are the gaps between a request's consecutive tokens, so a decode
stalled by prefill-only steps sees one long gap. TPOT of a request with T > 1 output tokens is
(e2e - TTFT) / (T - 1), the mean of its T - 1 gaps.

Work is bounded: `max_steps` caps the forward steps of a run. A run that provably needs more
(`minimum_steps`: the decode tokens over `max_num_seqs`, and all tokens over the step budget) is
refused before it starts, and one that reaches the cap stops there; both raise
`SimulationTooLong`. Arrival times are absolute seconds in float64: keep them below about 1e9 s
(a resolution of 0.1 us), or step times are lost in rounding.

Speed: decodes are kept in aggregate (their count, the sum of their contexts, how many cross a
block boundary at each step modulo `block_tokens`, a heap of finishing steps), so a step costs a
few Python operations whatever the batch size. Steps with prefill work call the timer; decode-only
steps, most of a run, interpolate memoised timer calls (see `simulate`). 100,000 requests at 70 %
of a replica's capacity take about a second (scripts/bench_simulator.py).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

import numpy as np
from numpy.typing import NDArray

from app.engine.counting import pairs_for_chunk
from app.engine.memory import MemoryPlan
from app.engine.specs import SpecError
from app.engine.step_load import StepLoad
from app.engine.units import MS_PER_S
from app.engine.workload import Trace

__all__ = [
    "QUEUE_SAMPLES",
    "SATURATION_GROWTH_FRACTION",
    "SATURATION_Z",
    "Percentiles",
    "QueueSample",
    "RequestTimes",
    "SchedulerConfig",
    "SimulationResult",
    "SimulationTooLong",
    "StepTimer",
    "UnchunkedPolicy",
    "expected_steps",
    "kv_capacity_tokens",
    "minimum_steps",
    "simulate",
]

QUEUE_SAMPLES: Final = 200
"""At most this many (time, waiting, running) samples describe the queue over a run."""
SATURATION_GROWTH_FRACTION: Final = 0.02
"""`saturated` needs the backlog to grow by more than this fraction of the arrivals..."""
SATURATION_Z: Final = 3.0
"""...and by more than this many standard deviations of a Poisson count of those arrivals."""


class StepTimer(Protocol):
    """How long one forward step takes; `StepCostModel` is one, a linear formula another."""

    def seconds(self, load: StepLoad) -> float:
        """Wall-clock seconds of a step doing `load`; positive."""
        ...


class SimulationTooLong(SpecError):
    """A run needs more forward steps than `max_steps` allows (`field` is "max_steps")."""

    def __init__(self, max_steps: int, message: str) -> None:
        super().__init__("max_steps", message)
        self.max_steps = max_steps


def kv_capacity_tokens(memory: MemoryPlan, block_tokens: int) -> int:
    """The KV pool of `memory` (one GPU of the replica) in whole blocks of `block_tokens`, as
    tokens: what `simulate` takes as `kv_capacity_tokens`. 0 when no block fits."""
    if block_tokens < 1:
        raise SpecError("block_tokens", f"must be at least 1, got {block_tokens}")
    tokens = max(0, math.floor(memory.kv_pool_bytes / memory.kv_bytes_per_token))
    return tokens // block_tokens * block_tokens


def minimum_steps(
    trace: Trace, scheduler: SchedulerConfig, served: NDArray[np.bool_] | None = None
) -> int:
    """A lower bound on the forward steps serving `trace` (the rows `served` marks, by default
    all) takes, whatever the timer and the KV cache: every output token after the first is one
    decode in a step of at most `max_num_seqs` decodes, every token (prompt or decode) is one of
    a step's at most `max_num_batched_tokens` (without chunking, one whole prompt may exceed
    that), and each request's own tokens after its prefill come one step apart. 0 for none."""
    prompts, outputs = trace.prompt_tokens, trace.output_tokens
    if served is not None:
        prompts, outputs = prompts[served], outputs[served]
    if len(outputs) == 0:
        return 0
    decodes = int(outputs.sum()) - len(outputs)
    tokens = int(prompts.sum()) + decodes
    per_step = scheduler.max_num_batched_tokens
    if not scheduler.enable_chunked_prefill:
        per_step += int(prompts.max())
    return max(-(-decodes // scheduler.max_num_seqs), -(-tokens // per_step), int(outputs.max()))


def expected_steps(
    trace: Trace,
    timer: StepTimer,
    scheduler: SchedulerConfig,
    served: NDArray[np.bool_] | None = None,
) -> int:
    """An estimate, made before the run, of the forward steps serving `trace` takes: what the
    service checks a request's work bound against before it starts (`minimum_steps` is a lower
    bound only, and far below the truth at low load, where every request decodes alone).

    A fluid model of the replica: requests arrive at the trace's mean rate `r`; each spends its
    prefill (mean prompt, one step at the budget per chunk) and its decode (mean output tokens,
    one step each) in the system, so the mean number of running decodes `b` solves
    `b = r * (prefill_s + output * step_s(b))` (Little's law), with `step_s(b)` the decode step
    time at `b` sequences of mean context, capped at `max_num_seqs`. While at least one request
    is in the system (a fraction `1 - exp(-b)` of the time, as for an M/G/inf queue) the replica
    steps back to back. Within a factor of about 1.5 of the real count for Poisson traces
    (tests/engine/test_simulator.py); never below `minimum_steps`.
    """
    prompts, outputs, arrivals = trace.prompt_tokens, trace.output_tokens, trace.arrival_s
    if served is not None:
        prompts, outputs, arrivals = prompts[served], outputs[served], arrivals[served]
    count = len(outputs)
    if count == 0:
        return 0
    floor = minimum_steps(trace, scheduler, served)
    mean_prompt = float(prompts.mean())
    mean_output = float(outputs.mean())
    context = max(1, round(mean_prompt + mean_output / 2))
    chunk = min(round(mean_prompt), scheduler.max_num_batched_tokens)
    chunks = math.ceil(mean_prompt / chunk) if scheduler.enable_chunked_prefill else 1
    # A chunk at the mean position of the prompt's chunks stands for all of them.
    cached = chunk * (chunks - 1) // 2
    prefill_s = chunks * _checked(
        timer.seconds(
            StepLoad(
                prefill_tokens=chunk,
                prefill_chunks=1,
                prefill_attention_pairs=pairs_for_chunk(chunk, cached, causal=True),
                prefill_kv_tokens=cached + chunk,
            )
        )
    )

    def step_s(batch: float) -> float:
        seqs = max(1, min(scheduler.max_num_seqs, round(batch)))
        load = StepLoad(decode_seqs=seqs, decode_context_tokens=seqs * context)
        return _checked(timer.seconds(load))

    span_s = float(arrivals[-1] - arrivals[0])
    cap = scheduler.max_num_seqs
    if span_s <= 0:
        batch = float(min(cap, count))
    else:
        rate = (count - 1) / span_s
        batch = 1.0
        for _ in range(40):  # the fixed point of Little's law; step_s grows slowly with b
            batch = min(cap, 0.5 * batch + 0.5 * rate * (prefill_s + mean_output * step_s(batch)))
    if span_s <= 0 or batch >= cap * 0.999:
        # Saturated: the backlog drains at full batches.
        decode_steps = count * mean_output / max(1.0, min(batch, count))
        return max(floor, round(decode_steps + count * (chunks - 1)))
    busy_fraction = 1.0 - math.exp(-batch)
    drain_s = prefill_s + mean_output * step_s(batch)
    steps = (span_s + drain_s) * busy_fraction / step_s(batch)
    return max(floor, round(steps))


class UnchunkedPolicy(StrEnum):
    PREFILL_FIRST = "prefill_first"  # vLLM v0: prefill-only steps, running decodes stall
    MIXED = "mixed"  # vLLM v1 without chunking: decodes and whole prompts share a step


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The engine's scheduler knobs, named as vLLM names them (see the module docstring).

    `long_prefill_token_threshold` caps the prefill chunk one request gets per step (0: no cap,
    vLLM's default); it applies with chunked prefill only.
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    unchunked_policy: UnchunkedPolicy = UnchunkedPolicy.PREFILL_FIRST
    long_prefill_token_threshold: int = 0

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise SpecError(
                "scheduler.max_num_seqs", f"must be at least 1, got {self.max_num_seqs}"
            )
        if self.max_num_batched_tokens < 1:
            raise SpecError(
                "scheduler.max_num_batched_tokens",
                f"must be at least 1, got {self.max_num_batched_tokens}",
            )
        if self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM refuses this too: a full batch of decodes would leave no budget for prefill.
            raise SpecError(
                "scheduler.max_num_batched_tokens",
                f"{self.max_num_batched_tokens} is below max_num_seqs {self.max_num_seqs}; with "
                "chunked prefill every running decode takes one token of the budget",
            )
        if self.long_prefill_token_threshold < 0:
            raise SpecError("scheduler.long_prefill_token_threshold", "must not be negative")


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


def simulate(
    trace: Trace,
    timer: StepTimer,
    *,
    kv_capacity_tokens: int,
    block_tokens: int = 16,
    scheduler: SchedulerConfig | None = None,
    ttft_slo_ms: float | None = None,
    tpot_slo_ms: float | None = None,
    exact_step_times: bool = False,
    max_steps: int | None = None,
) -> SimulationResult:
    """Serve `trace` on one replica whose steps `timer` times, and measure it.

    `kv_capacity_tokens` is the KV cache of the replica in tokens (whole blocks of `block_tokens`
    count). Goodput counts requests whose TTFT is at most `ttft_slo_ms` and whose TPOT is at most
    `tpot_slo_ms` (a request of one token meets any TPOT SLO); None waives that SLO.

    `saturated` is True when the backlog grows without bound: over the second half of the arrival
    window (from the arrival of the middle admitted request to the last arrival), arrivals exceed
    completions by more than `SATURATION_GROWTH_FRACTION` of the arrivals and by more than
    `SATURATION_Z` Poisson standard deviations (`sqrt(arrivals)`). A stable queue returns to its
    typical length, so its backlog growth over the window is a few requests; an overloaded one
    grows at the arrival rate minus the service rate. The run itself always drains the trace, so
    latencies of a saturated run measure this trace's length, not a steady state.

    Steps with prefill work are timed by one `timer` call each. Decode-only steps, the bulk of
    a run, are interpolated in the context between memoised timer calls (see `_DecodeStepTable`:
    exact for a timer affine in the decode context, within its curvature over 1/64 of the mean
    context otherwise); `exact_step_times` calls the timer for every step instead (slower).

    `max_steps` (None: no limit) caps the forward steps: `SimulationTooLong` before the run when
    `minimum_steps` already exceeds it, or when the run reaches it.

    Deterministic: the same inputs give the same result. `SpecError` for an impossible setup,
    including a timer that returns a step time that is not positive.
    """
    config = scheduler if scheduler is not None else SchedulerConfig()
    if block_tokens < 1:
        raise SpecError("block_tokens", f"must be at least 1, got {block_tokens}")
    if kv_capacity_tokens < block_tokens:
        raise SpecError(
            "kv_capacity_tokens",
            f"{kv_capacity_tokens} tokens hold no whole block of {block_tokens} tokens",
        )
    for name, slo in (("ttft_slo_ms", ttft_slo_ms), ("tpot_slo_ms", tpot_slo_ms)):
        if slo is not None and not slo > 0:
            raise SpecError(name, f"must be positive, got {slo}")
    if max_steps is not None and max_steps < 1:
        raise SpecError("max_steps", f"must be at least 1, got {max_steps}")
    capacity_blocks = kv_capacity_tokens // block_tokens
    # Peak footprint: the last decode step writes the KV of token T-1 of T.
    peak_blocks = -(-(trace.prompt_tokens + trace.output_tokens - 1) // block_tokens)
    rejected = peak_blocks > capacity_blocks
    if rejected.all():
        raise SpecError(
            "kv_capacity_tokens",
            f"{kv_capacity_tokens} tokens of KV cache hold no request of the trace "
            f"(the smallest needs {int(peak_blocks.min()) * block_tokens})",
        )
    if max_steps is not None:
        needed = minimum_steps(trace, config, served=~rejected)
        if needed > max_steps:
            raise SimulationTooLong(
                max_steps,
                f"the trace needs at least {needed:,} steps, over the {max_steps:,} a run may take",
            )
    run = _Run(
        trace=trace,
        rejected=rejected,
        timer=timer,
        config=config,
        capacity_blocks=capacity_blocks,
        block_tokens=block_tokens,
        exact_step_times=exact_step_times,
        max_steps=max_steps,
    )
    run.execute()
    return _summarise(trace, run, ttft_slo_ms, tpot_slo_ms)


class _DecodeStepTable:
    """Decode-only step times by linear interpolation in the context, from memoised timer calls.

    For `seqs` decodes whose mean context is `m` tokens, the timer is called at mean contexts on
    a grid (every token below 128, then 64 points per doubling: spacing at most 1/64 of `m`) and
    interpolated between the two grid points around `m`. Exact, to rounding, for a timer
    affine in `decode_context_tokens` at fixed `seqs` (linear formulas; a memory-bound decode
    roofline); within the curvature over 1/64 of `m` otherwise. A run of 100,000 requests then
    calls the timer some ten thousand times for its decode steps instead of half a million.
    """

    __slots__ = ("_points", "_timer", "segments")

    def __init__(self, timer: StepTimer) -> None:
        self._timer = timer
        self._points: dict[tuple[int, int], float] = {}
        self.segments: dict[tuple[int, int], tuple[float, float]] = {}
        """(seqs, grid mean context) -> (seconds there, seconds per extra context token)."""

    @property
    def calls(self) -> int:
        """Timer calls made so far."""
        return len(self._points)

    def _point(self, seqs: int, mean_context: int) -> float:
        key = (seqs, mean_context)
        step_s = self._points.get(key)
        if step_s is None:
            load = StepLoad(decode_seqs=seqs, decode_context_tokens=seqs * mean_context)
            step_s = _checked(self._timer.seconds(load))
            self._points[key] = step_s
        return step_s

    def segment(self, seqs: int, low: int, spacing: int) -> tuple[float, float]:
        """Fill and return `segments[(seqs, low)]`."""
        low_s = self._point(seqs, low)
        high_s = self._point(seqs, low + spacing)
        segment = (low_s, (high_s - low_s) / (seqs * spacing))
        self.segments[(seqs, low)] = segment
        return segment


def _checked(step_s: float) -> float:
    if not step_s > 0:
        raise SpecError("timer", f"a step must take positive time, got {step_s} s")
    return step_s


class _Run:
    """The event loop's state and its outputs. Private: `simulate` is the interface."""

    def __init__(
        self,
        *,
        trace: Trace,
        rejected: NDArray[np.bool_],
        timer: StepTimer,
        config: SchedulerConfig,
        capacity_blocks: int,
        block_tokens: int,
        exact_step_times: bool,
        max_steps: int | None = None,
    ) -> None:
        self.trace = trace
        self.rejected_mask = rejected
        self.timer = timer
        self.config = config
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self.exact_step_times = exact_step_times
        self.max_steps = max_steps
        count = len(trace)
        self.first_token_s = [math.nan] * count
        self.finish_s = [math.nan] * count
        # Typed arrays: a run of millions of steps keeps one gap per step (8 bytes, not 32).
        self.itl_gap_s = array("d")
        self.itl_weight = array("q")
        self.queue_time_s: list[float] = []
        self.queue_waiting: list[int] = []
        self.queue_running: list[int] = []
        self.area_in_system = 0.0  # integral of (waiting + running) dt, request-seconds
        self.area_waiting = 0.0
        self.steps = 0
        self.timer_calls = 0
        self.preemptions = 0
        self.max_waiting = 0
        self.max_running = 0

    def execute(self) -> None:
        """Run every step until the trace drains."""
        # Locals, not attributes: this loop runs hundreds of thousands of times.
        arrival = self.trace.arrival_s.tolist()
        prompt = self.trace.prompt_tokens.tolist()
        output = self.trace.output_tokens.tolist()
        is_rejected = self.rejected_mask.tolist()
        count = len(arrival)
        seconds = self.timer.seconds
        table = _DecodeStepTable(self.timer)
        segments = table.segments
        exact = self.exact_step_times
        step_limit = self.max_steps if self.max_steps is not None else -1
        config = self.config
        chunked = config.enable_chunked_prefill
        prefill_first = not chunked and config.unchunked_policy is UnchunkedPolicy.PREFILL_FIRST
        max_seqs = config.max_num_seqs
        max_tokens = config.max_num_batched_tokens
        chunk_cap = config.long_prefill_token_threshold if chunked else 0
        block = self.block_tokens
        first_token_s = self.first_token_s
        finish_s = self.finish_s
        itl_gap = self.itl_gap_s
        itl_weight = self.itl_weight
        heappush, heappop = heapq.heappush, heapq.heappop

        # Per request: tokens generated before it last joined the decodes (or was preempted), the
        # decode step it joined at, its ticket in `finishing` (-1: not decoding), the blocks its
        # prefill reserved, and when its latest token came out.
        generated = [0] * count
        join_step = [0] * count
        ticket_of = [-1] * count
        prefill_blocks = [0] * count
        last_token_s = [0.0] * count

        waiting: deque[int] = deque()
        running: dict[int, None] = {}  # admitted, not finished; insertion order = admission order
        partial: list[list[int]] = []  # [request, tokens computed, tokens to compute]
        fresh: list[int] = []  # joined the decodes since the last decode step
        decode_seqs = 0
        decode_context = 0  # sum of the running decodes' contexts at the coming decode step
        # Decodes needing a new block at decode step k: those with phase k % block.
        new_blocks_by_phase = [0] * block
        finishing: list[tuple[int, int, int]] = []  # heap of (decode step, ticket, request)
        tickets = 0
        decode_step = 0  # decode steps run so far; the next one has this index
        free_blocks = self.capacity_blocks
        now = 0.0
        last_decode_end = 0.0
        next_arrival = 0
        steps = 0
        timer_calls = 0
        preemptions = 0
        area_in_system = 0.0
        area_waiting = 0.0
        max_waiting = max_running = 0
        no_completions: list[int] = []

        queue_time_s, queue_waiting, queue_running = (
            self.queue_time_s,
            self.queue_waiting,
            self.queue_running,
        )
        first_admitted = is_rejected.index(False)
        sample_every_s = max(arrival[-1] - arrival[first_admitted], 1e-9) / (QUEUE_SAMPLES / 2)
        next_sample_s = arrival[first_admitted]

        while True:
            # Arrivals up to now join the queue; the time they waited before this step counts.
            if next_arrival < count and arrival[next_arrival] <= now:
                while next_arrival < count and arrival[next_arrival] <= now:
                    if not is_rejected[next_arrival]:
                        waiting.append(next_arrival)
                        late_s = now - arrival[next_arrival]
                        area_in_system += late_s
                        area_waiting += late_s
                    next_arrival += 1
                if not running and not waiting:
                    continue  # only rejected requests arrived
            elif not running and not waiting:
                if next_arrival >= count:
                    break
                now = arrival[next_arrival]  # idle: jump to the next arrival
                continue

            run_decodes = decode_seqs > 0
            if prefill_first and waiting and run_decodes:
                head = waiting[0]
                if -(-(prompt[head] + generated[head]) // block) <= free_blocks and (
                    len(running) < max_seqs
                ):
                    run_decodes = False  # v0: a prefill step stalls every running decode

            preempted = False
            if run_decodes:
                needed = new_blocks_by_phase[decode_step % block]
                while needed > free_blocks:
                    # Recompute preemption of the most recently admitted running request.
                    victim = next(reversed(running))
                    preempted = True
                    preemptions += 1
                    del running[victim]
                    waiting.appendleft(victim)
                    if ticket_of[victim] < 0:  # a partial prefill: drop its progress
                        partial = [entry for entry in partial if entry[0] != victim]
                        free_blocks += prefill_blocks[victim]
                        continue
                    done = generated[victim] + decode_step - join_step[victim]
                    context = prompt[victim] + done
                    phase = (join_step[victim] + 1 - prompt[victim] - generated[victim]) % block
                    new_blocks_by_phase[phase] -= 1
                    if phase == decode_step % block:
                        needed -= 1
                    free_blocks += -(-(context - 1) // block)
                    decode_seqs -= 1
                    decode_context -= context
                    ticket_of[victim] = -1
                    generated[victim] = done
                    if victim in fresh:
                        fresh.remove(victim)  # its latest token is the one its prefill emitted
                    else:
                        last_token_s[victim] = last_decode_end
                free_blocks -= needed
                if preempted:
                    run_decodes = decode_seqs > 0
                    max_waiting = max(max_waiting, len(waiting))

            prefill_tokens = prefill_chunks = prefill_kv = attention_pairs = 0
            completing = no_completions
            if partial or waiting:
                completing = []
                budget = max_tokens - decode_seqs if run_decodes else max_tokens
                if partial and budget > 0:
                    for entry in partial:
                        done_tokens, total = entry[1], entry[2]
                        take = min(total - done_tokens, budget)
                        if 0 < chunk_cap < take:
                            take = chunk_cap
                        if take <= 0:
                            break
                        budget -= take
                        prefill_tokens += take
                        prefill_chunks += 1
                        # Causal chunk of q after c computed: q*c + q*(q+1)/2 query-key pairs.
                        attention_pairs += take * done_tokens + take * (take + 1) // 2
                        prefill_kv += done_tokens + take
                        entry[1] = done_tokens + take
                        if entry[1] == total:
                            completing.append(entry[0])
                    if completing:
                        partial = [entry for entry in partial if entry[1] < entry[2]]
                max_waiting = max(max_waiting, len(waiting))
                admit = waiting and not preempted and (not prefill_first or not run_decodes)
                while admit and waiting and len(running) < max_seqs:
                    head = waiting[0]
                    total = prompt[head] + generated[head]
                    if chunked:
                        if budget <= 0:
                            break
                        take = min(total, budget)
                        if 0 < chunk_cap < take:
                            take = chunk_cap
                    else:
                        # Whole prompts; one over the budget may run as the step's only one.
                        if total > budget and prefill_chunks > 0:
                            break
                        take = total
                    head_blocks = -(-total // block)
                    if head_blocks > free_blocks:
                        break  # FCFS: the head waits for blocks, and so does everyone behind it
                    waiting.popleft()
                    free_blocks -= head_blocks
                    prefill_blocks[head] = head_blocks
                    running[head] = None
                    budget -= take
                    prefill_tokens += take
                    prefill_chunks += 1
                    attention_pairs += take * (take + 1) // 2
                    prefill_kv += take
                    if take == total:
                        completing.append(head)
                    else:
                        partial.append([head, take, total])
                max_running = max(max_running, len(running))

            # Time the step.
            if prefill_chunks:
                timer_calls += 1
                step_s = _checked(
                    seconds(
                        StepLoad(
                            prefill_tokens=prefill_tokens,
                            prefill_chunks=prefill_chunks,
                            prefill_attention_pairs=float(attention_pairs),
                            prefill_kv_tokens=prefill_kv,
                            decode_seqs=decode_seqs if run_decodes else 0,
                            decode_context_tokens=decode_context if run_decodes else 0,
                        )
                    )
                )
            elif run_decodes:
                if exact:
                    timer_calls += 1
                    step_s = _checked(
                        seconds(
                            StepLoad(decode_seqs=decode_seqs, decode_context_tokens=decode_context)
                        )
                    )
                else:
                    mean_context = decode_context // decode_seqs
                    if mean_context < 128:
                        low, spacing = mean_context, 1
                    else:
                        spacing = 1 << (mean_context.bit_length() - 7)
                        low = mean_context - mean_context % spacing
                    segment = segments.get((decode_seqs, low))
                    if segment is None:
                        segment = table.segment(decode_seqs, low, spacing)
                    step_s = segment[0] + segment[1] * (decode_context - decode_seqs * low)
            else:
                continue  # preemption emptied the step; schedule again
            if steps == step_limit:  # a step beyond the cap: -1 (no cap) never matches
                raise SimulationTooLong(
                    step_limit,
                    f"the run reached the {step_limit:,} steps it may take before serving every "
                    "request",
                )
            steps += 1
            in_queue = len(waiting)
            in_system = in_queue + len(running)
            area_in_system += in_system * step_s
            if in_queue:
                area_waiting += in_queue * step_s
            if now >= next_sample_s:
                queue_time_s.append(now)
                queue_waiting.append(in_queue)
                queue_running.append(in_system - in_queue)
                if len(queue_time_s) == 2 * QUEUE_SAMPLES:  # a long drain: halve the density
                    del queue_time_s[1::2], queue_waiting[1::2], queue_running[1::2]
                    sample_every_s *= 2
                next_sample_s = now + sample_every_s
            now += step_s

            if run_decodes:
                # Every decode emits a token; those that joined since the last decode step
                # waited since their own latest token, the rest since the last decode step.
                itl_gap.append(now - last_decode_end)
                if fresh:
                    itl_weight.append(decode_seqs - len(fresh))
                    for request in fresh:
                        itl_gap.append(now - last_token_s[request])
                        itl_weight.append(1)
                    fresh.clear()
                else:
                    itl_weight.append(decode_seqs)
                last_decode_end = now
                while finishing and finishing[0][0] == decode_step:
                    _, ticket, request = heappop(finishing)
                    if ticket_of[request] != ticket:
                        continue  # preempted since it was scheduled to finish here
                    ticket_of[request] = -1
                    finish_s[request] = now
                    del running[request]
                    final_context = prompt[request] + output[request] - 1
                    free_blocks += -(-final_context // block)
                    decode_seqs -= 1
                    decode_context -= final_context
                    phase = (join_step[request] + 1 - prompt[request] - generated[request]) % block
                    new_blocks_by_phase[phase] -= 1
                decode_context += decode_seqs
                decode_step += 1

            for request in completing:
                # The prefill's last position yields the next token.
                tokens = generated[request] + 1
                if tokens == 1:
                    first_token_s[request] = now
                else:
                    itl_gap.append(now - last_token_s[request])  # resumed after preemption
                    itl_weight.append(1)
                if tokens == output[request]:
                    finish_s[request] = now
                    del running[request]
                    free_blocks += prefill_blocks[request]
                    continue
                generated[request] = tokens
                join_step[request] = decode_step
                last_token_s[request] = now
                tickets += 1
                ticket_of[request] = tickets
                heappush(finishing, (decode_step + output[request] - tokens - 1, tickets, request))
                decode_seqs += 1
                decode_context += prompt[request] + tokens
                # A new block when the context passes a multiple of the block size.
                new_blocks_by_phase[(decode_step + 1 - prompt[request] - tokens) % block] += 1
                fresh.append(request)

        self.steps = steps
        self.timer_calls = timer_calls + table.calls
        self.preemptions = preemptions
        self.area_in_system = area_in_system
        self.area_waiting = area_waiting
        self.max_waiting = max_waiting
        self.max_running = max_running


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


def _summarise(
    trace: Trace, run: _Run, ttft_slo_ms: float | None, tpot_slo_ms: float | None
) -> SimulationResult:
    times = RequestTimes(
        arrival_s=trace.arrival_s,
        first_token_s=np.array(run.first_token_s),
        finish_s=np.array(run.finish_s),
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
