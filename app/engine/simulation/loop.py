"""The event loop of one replica: `simulate` and the run state it steps (the hot loop is one
function, `_Run.execute`, on purpose: every attribute read there is paid millions of times).

setup.py compiles this module with mypyc (about twice as fast): keep it plain, annotated Python
that runs the same either way (tests/engine/test_compiled.py compares the two, float
for float), and annotate the loop's lists where their items are numbers."""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque

import numpy as np
from numpy.typing import NDArray

from app.engine.simulation.config import (
    ClosedLoop,
    PrefixCache,
    SchedulerConfig,
    SimulationTooLong,
    StepTimer,
    UnchunkedPolicy,
)
from app.engine.simulation.results import SimulationResult
from app.engine.simulation.stats import QUEUE_SAMPLES, summarise
from app.engine.simulation.step_table import DecodeStepTable, checked, grid_low
from app.engine.simulation.work import minimum_steps
from app.engine.specs import SpecError
from app.engine.step_cost import StepCostModel
from app.engine.step_load import StepLoad
from app.engine.workload import Trace

__all__ = ["simulate"]


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
    closed_loop: ClosedLoop | None = None,
    prefix_cache: PrefixCache | None = None,
) -> SimulationResult:
    """Serve `trace` on one replica whose steps `timer` times, and measure it.

    With `closed_loop`, the trace's arrival times are ignored: `concurrency` users each send
    the next request of the trace `think_time_s` after their last one finished (the first
    `concurrency` at time 0), as genai-perf, AIPerf, GuideLLM and `vllm bench serve
    --max-concurrency` drive a server; requests sent together reach the engine one at a time,
    `spacing_s` apart (`ClosedLoop`); `requests_per_s` is then the throughput the loop
    reaches, and the run's `requests.arrival_s` the times requests reached the engine.

    With `prefix_cache`, each request finds whole blocks of its prompt already cached
    (`PrefixCache.cached_tokens`): its prefill computes only the rest, attending over the
    cached tokens, and its KV holds only the rest (the cached blocks are shared: a shared
    prefix is held once, for the whole run).

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
    a run, are interpolated in the context between memoised timer calls (see `DecodeStepTable`:
    exact for a timer affine in the decode context, within its curvature over 1/64 of the mean
    context otherwise), and stretches of them that nothing can change run as one group summed
    in closed form (`_Run.execute`); `exact_step_times` calls the timer for every step, one step
    at a time, instead (slower; tests/engine/test_simulator_fast_path.py compares the two).

    `max_steps` (None: no limit) caps the forward steps: `SimulationTooLong` before the run when
    `minimum_steps` already exceeds it, or when the run reaches it.

    Deterministic: the same inputs give the same result. `SpecError` for an impossible setup,
    including a timer that returns a step time that is not positive.
    """
    run = _run(
        trace,
        timer,
        kv_capacity_tokens=kv_capacity_tokens,
        block_tokens=block_tokens,
        scheduler=scheduler,
        ttft_slo_ms=ttft_slo_ms,
        tpot_slo_ms=tpot_slo_ms,
        exact_step_times=exact_step_times,
        max_steps=max_steps,
        closed_loop=closed_loop,
        prefix_cache=prefix_cache,
    )
    request_overhead_s = float(getattr(timer, "request_overhead_s", 0.0))
    if closed_loop is not None:
        # The arrivals are when the users sent them; a loop's backlog cannot grow.
        trace = Trace(
            arrival_s=np.array(run.arrival_s, dtype=np.float64),
            prompt_tokens=trace.prompt_tokens,
            output_tokens=trace.output_tokens,
        )
    return summarise(trace, run, ttft_slo_ms, tpot_slo_ms, request_overhead_s)


class _Sent:
    """Which requests have been sent. Open loop: all of them, at their arrival times. Closed
    loop: the first `users` at 0, then each next one `think` seconds after a user is free (its
    request finished, or was refused at its arrival): the one rule of the loop's users."""

    def __init__(
        self, arrival: list[float], users: int, count: int, think: float, spacing: float
    ) -> None:
        self.arrival = arrival
        self.sent = users
        self.count = count
        self.think = think
        self.spacing = spacing
        self.last = arrival[users - 1] if 0 < users <= len(arrival) else 0.0

    def user_free(self, at: float) -> None:
        """A user is free at `at`: its next request goes out `think` later, if one is left,
        and reaches the engine `spacing` after the one before it at the earliest."""
        if self.sent < self.count:
            when = at + self.think
            if when < self.last + self.spacing:  # noqa: PLR1730 - cheaper than max
                when = self.last + self.spacing
            self.arrival[self.sent] = when
            self.last = when
            self.sent += 1


def _run(
    trace: Trace,
    timer: StepTimer,
    *,
    kv_capacity_tokens: int,
    block_tokens: int,
    scheduler: SchedulerConfig | None,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    exact_step_times: bool,
    max_steps: int | None,
    closed_loop: ClosedLoop | None,
    prefix_cache: PrefixCache | None,
    prefilled_s: NDArray[np.float64] | None = None,
    shortcuts: bool = True,
) -> _Run:
    """Validate `simulate`'s arguments and run the trace (see `simulate`).

    `prefilled_s` makes it a disaggregated decode pool's run: request i arrives (at its
    `arrival_s`, once its KV has come over) with its prompt's KV present and its first token
    emitted at `prefilled_s[i]` by the prefill pool. Admission takes its prompt's blocks and its
    first step computes that one token (its KV, and the second token); a request of one token
    is done at `prefilled_s[i]` and never enters the pool.

    `shortcuts=False` runs without `_Run.execute`'s two shortcuts (a lone waiting request
    admitted inline; a group following a group at a finish without a pass of the loop): the
    same run, step for step (tests/engine/test_simulator_shortcuts.py compares the two)."""
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
    capacity_blocks, window_blocks = _windowed_blocks(
        getattr(timer, "kv_window", None), capacity_blocks, peak_blocks, block_tokens
    )
    cached = np.zeros_like(peak_blocks)
    if prefilled_s is not None:
        if prefix_cache is not None or closed_loop is not None:
            raise SpecError("prefilled_s", "a decode pool's run takes no prefix cache or loop")
        if len(prefilled_s) != len(trace):
            raise SpecError("prefilled_s", f"needs {len(trace)} times, got {len(prefilled_s)}")
    elif prefix_cache is not None:
        cached = prefix_cache.cached_tokens(trace.prompt_tokens, block_tokens)
        # A shared prefix stays in the cache, held once.
        capacity_blocks -= -(-prefix_cache.shared_prefix_tokens // block_tokens)
    window_blocks = window_blocks - cached // block_tokens  # blocks a request holds beyond its
    peak_blocks = peak_blocks + window_blocks
    rejected = peak_blocks > capacity_blocks
    if rejected.all():
        raise SpecError(
            "kv_capacity_tokens",
            f"{kv_capacity_tokens} tokens of KV cache hold no request of the trace "
            f"(the smallest needs {int(peak_blocks.min()) * block_tokens})",
        )
    if max_steps is not None and prefilled_s is None:
        # (A decode pool prefills nothing: the bound's prompt steps are not its; the run's own
        # step cap still applies.)
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
        window_blocks=window_blocks.tolist(),
        cached_tokens=cached.tolist(),
        closed_loop=closed_loop,
        block_tokens=block_tokens,
        exact_step_times=exact_step_times,
        max_steps=max_steps,
        prefilled_s=None if prefilled_s is None else prefilled_s.tolist(),
        shortcuts=shortcuts,
    )
    run.execute()
    return run


def _windowed_blocks(
    window: tuple[float, int] | None,
    capacity_blocks: int,
    peak_blocks: NDArray[np.int64],
    block_tokens: int,
) -> tuple[int, NDArray[np.int64]]:
    """The pool and each request's fixed reservation when a share `s` of the layers attends
    within a window of W tokens (`timer.kv_window`, (s, W)).

    A sequence of n blocks holds n blocks on the full layers and at most min(n, ceil(W/b) + 1) on
    the windowed ones. Counting in blocks of the full layers (capacity / (1 - s)), it grows
    like any sequence and reserves, at admission, its windowed layers' peak,
    ceil(min(n_peak, ceil(W/b) + 1) * s / (1 - s)): exact at the peak, an upper bound before.
    With every layer windowed (s = 1) the pool is counted as if none were: an upper bound."""
    zero = np.zeros_like(peak_blocks)
    if window is None:
        return capacity_blocks, zero
    share, tokens = window
    if not 0 < share < 1:
        return capacity_blocks, zero
    most = -(-tokens // block_tokens) + 1
    ratio = share / (1.0 - share)
    extra = np.ceil(np.minimum(peak_blocks, most) * ratio - 1e-9).astype(np.int64)
    return int(capacity_blocks / (1.0 - share)), extra


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
        window_blocks: list[int],
        block_tokens: int,
        exact_step_times: bool,
        max_steps: int | None = None,
        closed_loop: ClosedLoop | None = None,
        cached_tokens: list[int] | None = None,
        prefilled_s: list[float] | None = None,
        shortcuts: bool = True,
    ) -> None:
        self.trace = trace
        self.rejected_mask = rejected
        self.timer = timer
        self.config = config
        self.capacity_blocks = capacity_blocks
        self.window_blocks = window_blocks
        self.cached_tokens = cached_tokens or [0] * len(trace)
        self.prefilled_s = prefilled_s
        self.shortcuts = shortcuts
        self.closed_loop = closed_loop
        self.arrival_s: list[float] = []
        self.block_tokens = block_tokens
        self.exact_step_times = exact_step_times
        self.max_steps = max_steps
        count = len(trace)
        # Typed arrays, not lists: `summarise` reads them as numpy arrays without visiting a
        # float object per request (those lie scattered over the heap a run churns through:
        # converting a list of them is bound by cache misses).
        self.first_token_s = array("d", [math.nan]) * count
        self.finish_s = array("d", [math.nan]) * count
        # Typed arrays: a run of millions of steps keeps 8 bytes a number, not 32. The loop
        # appends to plain lists (one `+=` of a tuple costs less than one array append) and
        # moves them here once they hold `_FLUSH` numbers, so a list never holds many more.
        self.itl_pairs = array("d")
        """(gap s, tokens it stands for) of single steps, flat; the counts are exact in a double."""
        self.group_pieces = array("d")
        """(first gap s, its rise per step, steps, weight) of each piece of a group of
        decode-only steps, flat."""
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

    def execute(self) -> None:  # noqa: PLR0912, PLR0915 - one hot loop; calls cost here
        """Run every step until the trace drains."""
        # Locals, not attributes: this loop runs hundreds of thousands of times.
        # (Typed: compiled, the loop keeps them as native values.)
        arrival: list[float] = self.trace.arrival_s.tolist()
        prompt: list[int] = self.trace.prompt_tokens.tolist()
        output: list[int] = self.trace.output_tokens.tolist()
        is_rejected: list[bool] = self.rejected_mask.tolist()
        count = len(arrival)
        # Closed loop: the first `users` requests from 0, one `spacing` apart; each later one
        # `think` after a finish, never closer than `spacing` to the one before.
        loop = self.closed_loop
        users = count if loop is None else min(loop.concurrency, count)
        think = 0.0 if loop is None else loop.think_time_s
        spacing = 0.0 if loop is None else loop.spacing_s
        if loop is not None:
            arrival = [i * spacing for i in range(users)] + [math.inf] * (count - users)
        sent = _Sent(arrival, users, count, think, spacing)
        self.arrival_s = arrival
        seconds = self.timer.seconds
        # A step cost model's positional entry point skips building a StepLoad (compiled
        # together with this loop, a direct call).
        cost: StepCostModel | None = None
        if isinstance(self.timer, StepCostModel) and (
            type(self.timer).seconds is StepCostModel.seconds
        ):
            cost = self.timer
        table = DecodeStepTable(self.timer, None if cost is None else cost.step_seconds)
        segments = table.segments
        exact = self.exact_step_times
        shortcuts = self.shortcuts
        step_limit = self.max_steps if self.max_steps is not None else -1
        config = self.config
        chunked = config.enable_chunked_prefill
        prefill_first = not chunked and config.unchunked_policy is UnchunkedPolicy.PREFILL_FIRST
        max_seqs = config.max_num_seqs
        max_tokens = config.max_num_batched_tokens
        multi = config.num_scheduler_steps
        every_step = multi == 1
        # SGLang's --scheduler-recv-interval: the scheduler looks for arrivals once every
        # `recv` decode-only steps, at once after a step with prefill work, and whenever
        # nothing runs (an idle loop spins); an arrival between looks waits for the next.
        recv = config.scheduler_recv_interval
        since_recv = recv  # decode-only steps since the last look; `recv`: a look is due
        chunk_cap = config.long_prefill_token_threshold if chunked else 0
        block = self.block_tokens
        # Per request, blocks held beyond its context's: its windowed layers' (held throughout)
        # less its prompt's cached blocks (shared); and the prompt tokens it finds cached.
        window_blocks = self.window_blocks
        # Per request, at its last decode step: its context, and the blocks it then frees.
        final = self.trace.prompt_tokens + self.trace.output_tokens - 1
        final_context: list[int] = final.tolist()
        final_blocks: list[int] = (
            -(-final // block) + np.array(window_blocks, dtype=np.int64)
        ).tolist()
        cached = self.cached_tokens
        first_token_s = self.first_token_s
        finish_s = self.finish_s
        itl_pairs, group_pieces = self.itl_pairs, self.group_pieces
        itl: list[float] = []  # flushed into itl_pairs
        flush = _FLUSH
        pieces: list[float] = []  # flushed into group_pieces
        heappush, heappop = heapq.heappush, heapq.heappop
        inf = math.inf

        # Per request: tokens generated before it last joined the decodes (or was preempted), the
        # decode step it joined at and its phase (it takes a new block at decode steps of that
        # phase mod `block`), its ticket in `finishing` (-1: not decoding), the blocks it holds
        # while prefilling, and when its latest token came out.
        generated = [0] * count
        join_step = [0] * count
        phase_of = [0] * count
        ticket_of = [-1] * count
        held_blocks = [0] * count
        last_token_s = [0.0] * count
        if self.prefilled_s is not None:
            # A decode pool: each request's prompt is in its KV and its first token is out.
            prefilled = self.prefilled_s
            generated = [1] * count
            cached = list(prompt)  # its own copy: a preempted request loses its prompt's KV
            last_token_s = list(prefilled)
            first_token_s[:] = array("d", prefilled)
            is_rejected = list(is_rejected)
            for request in range(count):
                if output[request] == 1 and not is_rejected[request]:
                    finish_s[request] = prefilled[request]
                    is_rejected[request] = True  # done: it never enters the pool

        # Its lists and settings are bound as defaults: captured, they would turn the loop's
        # locals into slower closure cells.
        def first_chunk_blocks(
            head: int,
            budget: int,
            *,
            prompt: list[int] = prompt,
            generated: list[int] = generated,
            cached: list[int] = cached,
            window_blocks: list[int] = window_blocks,
            chunked: bool = chunked,
            chunk_cap: int = chunk_cap,
            block: int = block,
        ) -> int:
            """Blocks the waiting `head`'s first chunk takes within `budget` tokens (more than
            any pool when the budget is spent)."""
            total = prompt[head] + generated[head]
            found = cached[head]
            take = total - found
            if chunked:
                if budget <= 0:
                    return 1 << 62
                take = min(take, budget)
                if 0 < chunk_cap < take:
                    take = chunk_cap
            return int(-(-(found + take) // block) + window_blocks[head])

        # With this many blocks free any request's first chunk fits (a cheap test first).
        most_tokens = max(cached) + max_tokens if chunked else max(prompt) + max(output)
        any_first_chunk_blocks = -(-most_tokens // block) + max(window_blocks)

        waiting: deque[int] = deque()
        running: dict[int, None] = {}  # admitted, not finished; insertion order = admission order
        partial: list[list[int]] = []  # [request, tokens computed, tokens to compute]
        fresh: list[int] = []  # joined the decodes since the last decode step
        fresh_since_s = 0.0  # when the first of them joined
        decode_seqs = 0
        decode_context = 0  # sum of the running decodes' contexts at the coming decode step
        # Decodes needing a new block at decode step k: those with phase k % block.
        new_blocks_by_phase = [0] * block
        # Heap of decode step << 32 | ticket (ints compare faster than tuples); a ticket's
        # request is ticket_request[ticket]. Tickets count joins, far below 2**32. It holds a
        # sentinel after every finish, so it is never empty.
        finishing: list[int] = [_NEVER]
        ticket_request = [-1]
        tickets = 0
        decode_step = 0  # decode steps run so far; the next one has this index
        free_blocks = self.capacity_blocks
        now = 0.0
        last_decode_end = -1.0
        next_arrival = 0
        steps = 0
        timer_calls = 0
        preemptions = 0
        area_in_system = 0.0
        area_waiting = 0.0
        max_waiting = max_running = 0
        no_completions: list[int] = []
        no_chunks: list[int] = []

        queue_time_s, queue_waiting, queue_running = (
            self.queue_time_s,
            self.queue_waiting,
            self.queue_running,
        )
        first_admitted = is_rejected.index(False) if False in is_rejected else count - 1
        if loop is None:
            sample_every_s = max(arrival[-1] - arrival[first_admitted], 1e-9) / (QUEUE_SAMPLES / 2)
            next_sample_s = arrival[first_admitted]
        else:  # the horizon is not known ahead: dense, thinned as the run goes on
            sample_every_s, next_sample_s = 1e-3, 0.0
        # A sentinel past the last arrival, never due: `arrival[next_arrival]` needs no bound
        # check (dropped when the run ends).
        arrival.append(inf)

        while True:
            # Arrivals up to now join the queue; the time they waited before this step counts.
            # With a receive interval, only when the scheduler looks (a running batch decodes
            # on meanwhile: the arrivals stay unseen).
            looks = since_recv >= recv or not running
            if looks and recv > 1:
                since_recv = 0
            if arrival[next_arrival] <= now and looks:
                while arrival[next_arrival] <= now:
                    if not is_rejected[next_arrival]:
                        waiting.append(next_arrival)
                        late_s = now - arrival[next_arrival]
                        area_in_system += late_s
                        area_waiting += late_s
                    else:  # refused at once: its user is free at its arrival
                        sent.user_free(arrival[next_arrival])
                    next_arrival += 1
                if not running and not waiting:
                    continue  # only rejected requests arrived
            elif not running and not waiting:
                if next_arrival >= count:
                    break
                now = arrival[next_arrival]  # idle: jump to the next arrival
                continue

            # Multi-step scheduling: between decisions, every `multi` decode steps, the running
            # decodes step on and nothing is scheduled.
            deciding = every_step or not decode_seqs or decode_step % multi == 0
            if (
                decode_seqs
                and not exact
                and (last_decode_end == now or (len(fresh) == decode_seqs and fresh_since_s == now))
                and (
                    not deciding
                    or (
                        not partial
                        and (
                            not waiting
                            or len(running) >= max_seqs
                            or (
                                free_blocks < any_first_chunk_blocks
                                and first_chunk_blocks(waiting[0], max_tokens - decode_seqs)
                                > free_blocks
                            )
                        )
                    )
                )
                and step_limit != steps
            ):
                # Decode-only steps with nothing to admit, every decode's latest token out at
                # `now`: the batch cannot change before its next finish, arrival or queue
                # sample, nor preempt while every decode's next blocks fit. They run as one
                # group timed in closed form: within a segment of the decode step table a step
                # is affine in the context, which grows by `decode_seqs` a step, so the steps
                # (and the token gaps, one step each) form an arithmetic progression. When a
                # group ends at a finish with nobody waiting, before the horizon, the next
                # group (of the smaller batch) follows here, as the loop would have started it.
                most = (finishing[0] >> 32) - decode_step + 1  # through the next finish
                if free_blocks < decode_seqs * (most // block + 1):
                    # Each decode takes one block every `block` steps.
                    most = min(most, free_blocks // decode_seqs * block)
                if 0 <= step_limit - steps < most:
                    most = step_limit - steps
                if multi > 1 and (partial or waiting):
                    # Up to the next decision, where they may be scheduled.
                    most = min(most, multi - decode_step % multi)
                unseen = arrival[next_arrival] <= now  # arrived; the scheduler looks later
                if unseen:
                    most = min(most, recv - since_recv)
                if most >= 1:
                    if now >= next_sample_s:
                        queue_time_s.append(now)
                        queue_waiting.append(len(waiting))
                        queue_running.append(len(running))
                        if len(queue_time_s) == 2 * QUEUE_SAMPLES:
                            del queue_time_s[1::2], queue_waiting[1::2], queue_running[1::2]
                            sample_every_s *= 2
                        next_sample_s = now + sample_every_s
                    horizon = inf if unseen else arrival[next_arrival]
                    if next_sample_s < horizon:  # noqa: PLR1730 - a branch is cheaper than min
                        horizon = next_sample_s
                    if fresh:
                        fresh.clear()
                    while True:  # one group per batch
                        start_s = now
                        # The context is decode_seqs * mean_context + offset; the mean grows by
                        # one a step. Each piece runs to the end of its line of the table (a run
                        # of segments; where the next begins) or of the group.
                        start_context, offset = divmod(decode_context, decode_seqs)
                        mean_context = start_context
                        if mean_context < 128:  # grid_low(mean_context), inline
                            low = mean_context
                        else:
                            low = mean_context - mean_context % (
                                1 << (mean_context.bit_length() - 7)
                            )
                        left = most
                        while True:
                            segment = segments.get(low << 32 | decode_seqs)
                            if segment is None:
                                segment = table.segment(decode_seqs, low)
                            base_s, slope, rise_s, run_end, base = segment
                            end = run_end[0]
                            # (decode_context - decode_seqs * base, as single steps have it.)
                            first_s = base_s + slope * (
                                decode_seqs * (mean_context - base) + offset
                            )
                            piece = end - mean_context
                            if piece > left:  # noqa: PLR1730 - a branch is cheaper than min
                                piece = left
                            # The piece's steps sum to piece * first + rise * piece * (piece-1)/2.
                            piece_s = piece * first_s + rise_s * piece * (piece - 1) * 0.5
                            if now + piece_s >= horizon:
                                # Stop at the step that reaches the horizon, as single steps do.
                                gap_s = horizon - now
                                if rise_s >= 0:
                                    # Steps of at least first_s: ceil(gap / first_s) reach it;
                                    # step back while one fewer still does.
                                    reach = int(-(-gap_s // first_s))
                                    if reach < piece:  # noqa: PLR1730 - cheaper than min
                                        piece = reach
                                    while (
                                        piece > 1
                                        and (piece - 1) * first_s
                                        + rise_s * (piece - 1) * (piece - 2) * 0.5
                                        >= gap_s
                                    ):
                                        piece -= 1
                                else:
                                    piece = _steps_to_reach(gap_s, first_s, rise_s, piece)
                                piece_s = piece * first_s + rise_s * piece * (piece - 1) * 0.5
                                left = piece  # the group ends with this piece
                            pieces += (first_s, rise_s, piece, decode_seqs)
                            now += piece_s
                            mean_context += piece
                            left -= piece
                            if not left:
                                break
                            low = end  # the piece ran to the line's end: the next begins
                        group = mean_context - start_context
                        decode_context = decode_seqs * mean_context + offset
                        phase = decode_step % block
                        rest = group % block
                        needed = group // block * decode_seqs
                        if rest:
                            end = phase + rest
                            needed += sum(new_blocks_by_phase[phase:end])
                            if end > block:
                                needed += sum(new_blocks_by_phase[: end - block])
                        free_blocks -= needed
                        steps += group
                        since_recv += group
                        if since_recv > recv:  # it looked every `recv` steps on the way
                            since_recv = (since_recv - 1) % recv + 1
                        step_s = now - start_s
                        area_in_system += (len(waiting) + len(running)) * step_s
                        if waiting:
                            area_waiting += len(waiting) * step_s
                            if len(waiting) > max_waiting:  # noqa: PLR1730 - cheaper than max
                                max_waiting = len(waiting)
                        last_decode_end = now
                        decode_step += group
                        # Requests finishing at the group's last step leave.
                        limit = decode_step << 32
                        if finishing[0] >= limit:
                            break  # it stopped short of the finish: an arrival, sample or cap
                        while finishing[0] < limit:
                            ticket = heappop(finishing) & 0xFFFFFFFF
                            request = ticket_request[ticket]
                            if ticket_of[request] != ticket:
                                continue  # preempted since it was scheduled to finish here
                            ticket_of[request] = -1
                            finish_s[request] = now
                            sent.user_free(now)
                            del running[request]
                            free_blocks += final_blocks[request]
                            decode_seqs -= 1
                            decode_context -= final_context[request] + 1
                            new_blocks_by_phase[phase_of[request]] -= 1
                        # The next group here only when the loop would start it at once: the
                        # batch decodes on, nothing waits, and no arrival (a closed loop's
                        # users send on finishes) or sample is due.
                        if not shortcuts or waiting or partial or not decode_seqs:
                            break
                        if unseen:
                            if since_recv >= recv:
                                break  # the scheduler looks now
                        elif arrival[next_arrival] < horizon:
                            horizon = arrival[next_arrival]
                        if now >= horizon:
                            break
                        most = (finishing[0] >> 32) - decode_step + 1
                        if unseen and recv - since_recv < most:
                            most = recv - since_recv
                        if free_blocks < decode_seqs * (most // block + 1):
                            most = min(most, free_blocks // decode_seqs * block)
                        if 0 <= step_limit - steps < most:
                            most = step_limit - steps
                        if most < 1:
                            break
                    if len(pieces) >= flush:
                        group_pieces.fromlist(pieces)
                        pieces.clear()
                    continue

            run_decodes = decode_seqs > 0
            # The usual step at light load, inline: with chunked prefill, the one waiting request
            # is admitted whole (its prompt fits the budget, its blocks and the decodes' fit
            # the pool) while nothing is partial. The general path below takes the same steps.
            admitted = False
            if shortcuts and chunked and deciding and not partial and len(waiting) == 1:
                head = waiting[0]
                total = prompt[head] + generated[head]
                found = cached[head]  # computed tokens it starts from: its cached prefix
                take = total - found
                needed = new_blocks_by_phase[decode_step % block] if run_decodes else 0
                head_blocks = -(-total // block) + window_blocks[head]
                if (
                    take <= max_tokens - decode_seqs
                    and not 0 < chunk_cap < take
                    and needed + head_blocks <= free_blocks
                    and len(running) < max_seqs
                ):
                    admitted = True
                    waiting.popleft()
                    if not max_waiting:
                        max_waiting = 1
                    free_blocks -= needed + head_blocks
                    held_blocks[head] = head_blocks
                    running[head] = None
                    if len(running) > max_running:  # noqa: PLR1730 - cheaper than max
                        max_running = len(running)
                    prefill_tokens = take
                    prefill_chunks = 1
                    attention_pairs = take * found + take * (take + 1) // 2
                    prefill_kv = total
                    completing = [head]
            if not admitted:
                if prefill_first and waiting and run_decodes and deciding:
                    head = waiting[0]
                    blocks = -(-(prompt[head] + generated[head]) // block) + window_blocks[head]
                    if blocks <= free_blocks and (len(running) < max_seqs):
                        run_decodes = False  # v0: a prefill step stalls every running decode

                # KV blocks for the running requests' work this step: a block for each decode
                # whose token starts one, and the blocks of each partial prefill's next chunk
                # (planned within the token budget). When they do not fit, the most recently
                # admitted running request is preempted, again until they do (vLLM V1,
                # `Scheduler.schedule` in vllm/v1/core/sched/scheduler.py: a running request
                # whose `allocate_slots` fails preempts `self.running.pop()`, the newest; it frees
                # its blocks and goes back to the front of the waiting queue, and no waiting
                # request is admitted in that step).
                preempted = False
                budget = max_tokens - decode_seqs if run_decodes else max_tokens
                needed = new_blocks_by_phase[decode_step % block] if run_decodes else 0
                chunks = no_chunks
                if partial and deciding:
                    if len(partial) == 1:  # the usual case, inline: one chunk within the budget
                        _, done_tokens, total = partial[0]
                        take = total - done_tokens
                        if take > budget:  # noqa: PLR1730 - a branch is cheaper than min
                            take = budget
                        if 0 < chunk_cap < take:
                            take = chunk_cap
                        if take > 0:
                            chunks = [take]
                            needed += -(-(done_tokens + take) // block) - -(-done_tokens // block)
                    else:
                        chunks, chunk_blocks = _plan_chunks(partial, budget, chunk_cap, block)
                        needed += chunk_blocks
                while needed > free_blocks:
                    victim = next(reversed(running))
                    preempted = True
                    preemptions += 1
                    del running[victim]
                    waiting.appendleft(victim)
                    if ticket_of[victim] < 0:  # a partial prefill: drop its progress
                        partial = [entry for entry in partial if entry[0] != victim]
                        free_blocks += held_blocks[victim]
                    else:
                        done = generated[victim] + decode_step - join_step[victim]
                        context = prompt[victim] + done
                        new_blocks_by_phase[phase_of[victim]] -= 1
                        free_blocks += -(-(context - 1) // block) + window_blocks[victim]
                        decode_seqs -= 1
                        decode_context -= context
                        ticket_of[victim] = -1
                        generated[victim] = done
                        if self.prefilled_s is not None:
                            # Its prompt's blocks were freed with the rest: recomputed locally
                            # like the tokens it generated, nothing found cached.
                            cached[victim] = 0
                        if victim in fresh:
                            fresh.remove(victim)  # its latest token is the one its prefill emitted
                        else:
                            last_token_s[victim] = last_decode_end
                        if run_decodes:
                            budget += 1
                            run_decodes = decode_seqs > 0
                    needed = new_blocks_by_phase[decode_step % block] if run_decodes else 0
                    chunks = no_chunks
                    if partial and deciding:
                        chunks, chunk_blocks = _plan_chunks(partial, budget, chunk_cap, block)
                        needed += chunk_blocks
                free_blocks -= needed
                if preempted and len(waiting) > max_waiting:
                    max_waiting = len(waiting)

                prefill_tokens = prefill_chunks = prefill_kv = attention_pairs = 0
                completing = no_completions
                if chunks:
                    completing = []
                    for index, take in enumerate(chunks):  # the first len(chunks) partials
                        entry = partial[index]
                        request, done_tokens, total = entry
                        budget -= take
                        prefill_tokens += take
                        prefill_chunks += 1
                        # Causal chunk of q after c computed: q*c + q*(q+1)/2 query-key pairs.
                        attention_pairs += take * done_tokens + take * (take + 1) // 2
                        prefill_kv += done_tokens + take
                        held_blocks[request] += -(-(done_tokens + take) // block) - -(
                            -done_tokens // block
                        )
                        entry[1] = done_tokens + take
                        if entry[1] == total:
                            completing.append(request)
                    if completing:
                        partial = [entry for entry in partial if entry[1] < entry[2]]
                if waiting:
                    if len(waiting) > max_waiting:  # noqa: PLR1730 - cheaper than max
                        max_waiting = len(waiting)
                    if deciding and not preempted and (not prefill_first or not run_decodes):
                        while len(running) < max_seqs:
                            head = waiting[0]
                            total = prompt[head] + generated[head]
                            found = cached[
                                head
                            ]  # computed tokens it starts from: its cached prefix
                            take = total - found
                            if chunked:
                                if budget <= 0:
                                    break
                                if take > budget:  # noqa: PLR1730 - cheaper than min
                                    take = budget
                                if 0 < chunk_cap < take:
                                    take = chunk_cap
                            elif take > budget and prefill_chunks:
                                break  # whole prompts; one over the budget may run alone
                            # vLLM V1 allocates the blocks of the scheduled chunk only.
                            head_blocks = -(-(found + take) // block) + window_blocks[head]
                            if head_blocks > free_blocks:
                                # FCFS: the head waits for blocks, and so does everyone behind.
                                break
                            waiting.popleft()
                            free_blocks -= head_blocks
                            held_blocks[head] = head_blocks
                            running[head] = None
                            budget -= take
                            prefill_tokens += take
                            prefill_chunks += 1
                            attention_pairs += take * found + take * (take + 1) // 2
                            prefill_kv += found + take
                            if completing is no_completions:
                                completing = []
                            if found + take == total:
                                completing.append(head)
                            else:
                                partial.append([head, found + take, total])
                            if not waiting:
                                break
                        if len(running) > max_running:  # noqa: PLR1730 - cheaper than max
                            max_running = len(running)

            # Time the step.
            if prefill_chunks:
                timer_calls += 1
                if cost is not None:
                    step_s = cost.step_seconds(
                        prefill_tokens,
                        prefill_chunks,
                        attention_pairs,  # an int times a float is the float's product
                        prefill_kv,
                        decode_seqs if run_decodes else 0,
                        decode_context if run_decodes else 0,
                    )
                    if not step_s > 0:
                        checked(step_s)  # raises
                else:
                    step_s = checked(
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
                    step_s = checked(
                        seconds(
                            StepLoad(decode_seqs=decode_seqs, decode_context_tokens=decode_context)
                        )
                    )
                else:
                    low = grid_low(decode_context // decode_seqs)
                    segment = segments.get(low << 32 | decode_seqs)
                    if segment is None:
                        segment = table.segment(decode_seqs, low)
                    step_s = segment[0] + segment[1] * (decode_context - decode_seqs * segment[4])
            else:
                continue  # preemption emptied the step; schedule again
            if steps == step_limit:  # a step beyond the cap: -1 (no cap) never matches
                raise SimulationTooLong(
                    step_limit,
                    f"the run reached the {step_limit:,} steps it may take before serving every "
                    "request",
                )
            steps += 1
            since_recv = recv if prefill_chunks else since_recv + 1
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
                if fresh:
                    itl += (now - last_decode_end, decode_seqs - len(fresh))
                    for request in fresh:
                        itl += (now - last_token_s[request], 1)
                    fresh.clear()
                else:
                    itl += (now - last_decode_end, decode_seqs)
                if len(itl) >= flush:
                    itl_pairs.fromlist(itl)
                    itl.clear()
                last_decode_end = now
                limit = (decode_step + 1) << 32
                while finishing[0] < limit:
                    ticket = heappop(finishing) & 0xFFFFFFFF
                    request = ticket_request[ticket]
                    if ticket_of[request] != ticket:
                        continue  # preempted since it was scheduled to finish here
                    ticket_of[request] = -1
                    finish_s[request] = now
                    sent.user_free(now)
                    del running[request]
                    free_blocks += final_blocks[request]
                    decode_seqs -= 1
                    decode_context -= final_context[request]
                    new_blocks_by_phase[phase_of[request]] -= 1
                decode_context += decode_seqs
                decode_step += 1

            for request in completing:
                # The prefill's last position yields the next token.
                tokens = generated[request] + 1
                if tokens == 1:
                    first_token_s[request] = now
                else:
                    itl += (now - last_token_s[request], 1)  # resumed after preemption
                if tokens == output[request]:
                    finish_s[request] = now
                    sent.user_free(now)
                    del running[request]
                    free_blocks += held_blocks[request]
                    continue
                generated[request] = tokens
                join_step[request] = decode_step
                last_token_s[request] = now
                tickets += 1
                ticket_of[request] = tickets
                ticket_request.append(request)
                heappush(finishing, (decode_step + output[request] - tokens - 1) << 32 | tickets)
                decode_seqs += 1
                context = prompt[request] + tokens
                decode_context += context
                # A new block when the context passes a multiple of the block size.
                phase = (decode_step + 1 - context) % block
                phase_of[request] = phase
                new_blocks_by_phase[phase] += 1
                if not fresh:
                    fresh_since_s = now
                fresh.append(request)

        arrival.pop()
        itl_pairs.fromlist(itl)
        group_pieces.fromlist(pieces)
        self.steps = steps
        self.timer_calls = timer_calls + table.calls
        self.preemptions = preemptions
        self.area_in_system = area_in_system
        self.area_waiting = area_waiting
        self.max_waiting = max_waiting
        self.max_running = max_running

    def itl_singles(self) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """The single steps' token gaps and how many tokens each stands for (weights may be
        0)."""
        pairs = np.frombuffer(self.itl_pairs, dtype=np.float64).reshape(-1, 2).T
        return np.ascontiguousarray(pairs[0]), pairs[1].astype(np.int64)

    def itl_groups(
        self,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
        """The pieces of the groups of decode-only steps: gap k of a piece (0 <= k < steps) is
        `first + rise * k`, and stands for `weight` tokens. (first, rise, steps, weight)."""
        pieces = np.frombuffer(self.group_pieces, dtype=np.float64).reshape(-1, 4).T
        return (
            np.ascontiguousarray(pieces[0]),
            np.ascontiguousarray(pieces[1]),
            pieces[2].astype(np.int64),
            pieces[3].astype(np.int64),
        )


_FLUSH = 1 << 16
"""The loop moves its lists of token gaps into typed arrays once they hold this many numbers
(checked after each step or run of groups)."""

_NEVER = 1 << 80
"""A finishing key beyond any decode step << 32 | ticket."""


def _plan_chunks(
    partial: list[list[int]], budget: int, chunk_cap: int, block: int
) -> tuple[list[int], int]:
    """The next chunk of each partial prefill ([request, computed, to compute]), in admission
    order, within `budget` tokens (and `chunk_cap` each when set: vLLM's
    `long_prefill_token_threshold`), and the KV blocks of `block` tokens the chunks take beyond
    those their computed tokens hold."""
    chunks: list[int] = []
    blocks = 0
    for _, done, total in partial:
        take = min(total - done, budget)
        if 0 < chunk_cap < take:
            take = chunk_cap
        if take <= 0:
            break
        budget -= take
        blocks += -(-(done + take) // block) - -(-done // block)
        chunks.append(take)
    return chunks, blocks


def _steps_to_reach(gap_s: float, first_s: float, rise_s: float, most: int) -> int:
    """The fewest steps, at most `most`, of `first_s`, `first_s + rise_s`, ... that sum to at
    least `gap_s` (`most` when none fewer do): the root of the progression's quadratic sum,
    corrected for rounding."""

    def total(steps: int) -> float:
        return steps * first_s + rise_s * steps * (steps - 1) * 0.5

    if rise_s:
        # steps^2 * rise/2 + steps * (first - rise/2) = gap_s.
        linear = first_s - rise_s * 0.5
        root = (-linear + math.sqrt(max(0.0, linear * linear + 2.0 * rise_s * gap_s))) / rise_s
    else:
        root = gap_s / first_s
    steps = max(1, min(most, math.ceil(root)))
    while steps > 1 and total(steps - 1) >= gap_s:
        steps -= 1
    while steps < most and total(steps) < gap_s:
        steps += 1
    return steps
