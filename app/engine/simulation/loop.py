"""The event loop of one replica: `simulate` and the run state it steps (the hot loop is one
function, `_Run.execute`, on purpose: every attribute read there is paid millions of times)."""

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
from app.engine.simulation.step_table import DecodeStepTable, checked
from app.engine.simulation.work import minimum_steps
from app.engine.specs import SpecError
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
    --max-concurrency` drive a server; `requests_per_s` is then the throughput the loop
    reaches, and the run's `requests.arrival_s` the times requests were sent.

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
    capacity_blocks, window_blocks = _windowed_blocks(
        getattr(timer, "kv_window", None), capacity_blocks, peak_blocks, block_tokens
    )
    cached = np.zeros_like(peak_blocks)
    if prefix_cache is not None:
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
        window_blocks=window_blocks.tolist(),
        cached_tokens=cached.tolist(),
        closed_loop=closed_loop,
        block_tokens=block_tokens,
        exact_step_times=exact_step_times,
        max_steps=max_steps,
    )
    run.execute()
    request_overhead_s = float(getattr(timer, "request_overhead_s", 0.0))
    if closed_loop is not None:
        # The arrivals are when the users sent them; a loop's backlog cannot grow.
        trace = Trace(
            arrival_s=np.array(run.arrival_s, dtype=np.float64),
            prompt_tokens=trace.prompt_tokens,
            output_tokens=trace.output_tokens,
        )
    return summarise(trace, run, ttft_slo_ms, tpot_slo_ms, request_overhead_s)


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
    ) -> None:
        self.trace = trace
        self.rejected_mask = rejected
        self.timer = timer
        self.config = config
        self.capacity_blocks = capacity_blocks
        self.window_blocks = window_blocks
        self.cached_tokens = cached_tokens or [0] * len(trace)
        self.closed_loop = closed_loop
        self.arrival_s: list[float] = []
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

    def execute(self) -> None:  # noqa: PLR0912, PLR0915 - one hot loop; calls cost here
        """Run every step until the trace drains."""
        # Locals, not attributes: this loop runs hundreds of thousands of times.
        arrival = self.trace.arrival_s.tolist()
        prompt = self.trace.prompt_tokens.tolist()
        output = self.trace.output_tokens.tolist()
        is_rejected = self.rejected_mask.tolist()
        count = len(arrival)
        # Closed loop: the first `users` requests at 0; each later one `think` after a finish.
        loop = self.closed_loop
        users = count if loop is None else min(loop.concurrency, count)
        think = 0.0 if loop is None else loop.think_time_s
        if loop is not None:
            arrival = [0.0] * users + [math.inf] * (count - users)
        issued = users
        self.arrival_s = arrival
        seconds = self.timer.seconds
        table = DecodeStepTable(self.timer)
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
        # Per request, blocks held beyond its context's: its windowed layers' (held throughout)
        # less its prompt's cached blocks (shared); and the prompt tokens it finds cached.
        window_blocks = self.window_blocks
        cached = self.cached_tokens
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
        if loop is None:
            sample_every_s = max(arrival[-1] - arrival[first_admitted], 1e-9) / (QUEUE_SAMPLES / 2)
            next_sample_s = arrival[first_admitted]
        else:  # the horizon is not known ahead: dense, thinned as the run goes on
            sample_every_s, next_sample_s = 1e-3, 0.0

        while True:
            # Arrivals up to now join the queue; the time they waited before this step counts.
            if next_arrival < count and arrival[next_arrival] <= now:
                while next_arrival < count and arrival[next_arrival] <= now:
                    if not is_rejected[next_arrival]:
                        waiting.append(next_arrival)
                        late_s = now - arrival[next_arrival]
                        area_in_system += late_s
                        area_waiting += late_s
                    elif issued < count:  # refused at once: the user sends the next one
                        arrival[issued] = arrival[next_arrival] + think
                        issued += 1
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
                blocks = -(-(prompt[head] + generated[head]) // block) + window_blocks[head]
                if blocks <= free_blocks and (len(running) < max_seqs):
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
                    free_blocks += -(-(context - 1) // block) + window_blocks[victim]
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
                    found = cached[head]  # computed tokens it starts from: its cached prefix
                    if chunked:
                        if budget <= 0:
                            break
                        take = min(total - found, budget)
                        if 0 < chunk_cap < take:
                            take = chunk_cap
                    else:
                        # Whole prompts; one over the budget may run as the step's only one.
                        if total - found > budget and prefill_chunks > 0:
                            break
                        take = total - found
                    head_blocks = -(-total // block) + window_blocks[head]
                    if head_blocks > free_blocks:
                        break  # FCFS: the head waits for blocks, and so does everyone behind it
                    waiting.popleft()
                    free_blocks -= head_blocks
                    prefill_blocks[head] = head_blocks
                    running[head] = None
                    budget -= take
                    prefill_tokens += take
                    prefill_chunks += 1
                    attention_pairs += take * found + take * (take + 1) // 2
                    prefill_kv += found + take
                    if found + take == total:
                        completing.append(head)
                    else:
                        partial.append([head, found + take, total])
                max_running = max(max_running, len(running))

            # Time the step.
            if prefill_chunks:
                timer_calls += 1
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
                    if issued < count:
                        arrival[issued] = now + think
                        issued += 1
                    del running[request]
                    final_context = prompt[request] + output[request] - 1
                    free_blocks += -(-final_context // block) + window_blocks[request]
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
                    if issued < count:
                        arrival[issued] = now + think
                        issued += 1
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
