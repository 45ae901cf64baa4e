"""The serving simulator against closed forms.

Every test times steps with `LinearTimer`, a constant plus linear terms in the step's tokens,
decode context and prefill attention pairs, so each expected number is a short sum written out in
the test. Exact results (a deterministic schedule) use a relative tolerance of 1e-9, i.e. float
rounding; statistical ones (Poisson queues) say how wide their tolerance is and why.
"""

import math
from dataclasses import dataclass, replace

import numpy as np
import pytest

from app.engine.memory import MemoryPlan
from app.engine.simulation import (
    QUEUE_SAMPLES,
    SchedulerConfig,
    SimulationResult,
    SimulationTooLong,
    UnchunkedPolicy,
    kv_capacity_tokens,
    minimum_steps,
    simulate,
)
from app.engine.simulation.stats import _itl_percentiles, _progressions
from app.engine.specs import SpecError
from app.engine.step_load import StepLoad
from app.engine.workload import PercentileLengths, PoissonWorkload, Trace

EXACT = 1e-9
BIG_KV = 10_000_000  # tokens: never the limit


@dataclass(frozen=True)
class LinearTimer:
    """base + per_token * tokens + per_context * decode context + per_pair * attention pairs."""

    base_s: float
    per_token_s: float = 0.0
    per_context_s: float = 0.0
    per_pair_s: float = 0.0

    def seconds(self, load: StepLoad) -> float:
        return (
            self.base_s
            + self.per_token_s * load.tokens
            + self.per_context_s * load.decode_context_tokens
            + self.per_pair_s * load.prefill_attention_pairs
        )


@dataclass(frozen=True)
class CurvedTimer:
    """A timer not affine in the decode context (a square root), to check interpolation."""

    def seconds(self, load: StepLoad) -> float:
        return (
            0.005
            + 1e-5 * load.tokens
            + 2e-6 * math.sqrt(load.decode_context_tokens * load.decode_seqs)
            + 1e-12 * load.prefill_attention_pairs
        )


def constant(tokens: int) -> PercentileLengths:
    return PercentileLengths(p50=tokens, p90=tokens, p99=tokens)


def evenly(count: int, every_s: float, prompt: int, output: int, start_s: float = 0.0) -> Trace:
    return Trace.from_rows([(start_s + i * every_s, prompt, output) for i in range(count)])


# -- One request at a time -----------------------------------------------------------------------


def test_alone_ttft_is_the_prefill_step_and_tpot_the_batch_one_decode_step() -> None:
    a, b, c = 0.004, 2e-5, 1e-8
    prompt, output = 1000, 100
    timer = LinearTimer(base_s=a, per_token_s=b, per_context_s=c)
    # One request every 10 s; each is done in about 0.4 s, so each runs alone.
    result = simulate(evenly(50, 10.0, prompt, output), timer, kv_capacity_tokens=BIG_KV)

    ttft_s = a + b * prompt  # one prefill step of the whole prompt, nothing else in it
    # Decode step i (i = 1..T-1) has one sequence of context prompt + i.
    tpot_s = a + b + c * (prompt + output / 2)  # mean of a + b + c*(prompt + i) over i
    for percentile in (result.ttft_ms.p50, result.ttft_ms.p99, result.ttft_ms.max):
        assert percentile == pytest.approx(ttft_s * 1e3, rel=EXACT)
    assert result.tpot_ms.p50 == pytest.approx(tpot_s * 1e3, rel=EXACT)
    assert result.tpot_ms.p99 == pytest.approx(tpot_s * 1e3, rel=EXACT)
    assert result.itl_ms.mean == pytest.approx(tpot_s * 1e3, rel=EXACT)
    assert result.itl_ms.max == pytest.approx((a + b + c * (prompt + output - 1)) * 1e3, rel=EXACT)
    e2e_s = ttft_s + (output - 1) * tpot_s
    assert result.e2e_ms.p50 == pytest.approx(e2e_s * 1e3, rel=EXACT)
    makespan_s = 49 * 10.0 + e2e_s
    assert result.makespan_s == pytest.approx(makespan_s, rel=EXACT)
    assert result.throughput_tokens_per_s == pytest.approx(50 * output / makespan_s, rel=EXACT)
    assert result.steps == 50 * output
    assert result.max_running_requests == 1
    assert not result.saturated


def test_poisson_at_a_very_low_rate_matches_the_single_request_times() -> None:
    a, b = 0.004, 2e-5
    workload = PoissonWorkload(0.05, 200, constant(1000), constant(100))
    result = simulate(
        workload.trace(seed=3), LinearTimer(base_s=a, per_token_s=b), kv_capacity_tokens=BIG_KV
    )
    # Each request takes 0.4 s and the mean gap is 20 s: overlaps are rare, the median is alone.
    assert result.ttft_ms.p50 == pytest.approx((a + b * 1000) * 1e3, rel=EXACT)
    assert result.tpot_ms.p50 == pytest.approx((a + b) * 1e3, rel=EXACT)


def test_goodput_counts_requests_within_both_slos() -> None:
    a, b = 0.004, 2e-5
    trace = evenly(10, 10.0, 1000, 100)
    timer = LinearTimer(base_s=a, per_token_s=b)
    ttft_ms, tpot_ms = (a + b * 1000) * 1e3, (a + b) * 1e3  # 24 ms and 4.02 ms
    meets = simulate(
        trace, timer, kv_capacity_tokens=BIG_KV, ttft_slo_ms=24.5, tpot_slo_ms=tpot_ms * 1.01
    )
    assert meets.goodput_requests_per_s == pytest.approx(10 / meets.makespan_s, rel=EXACT)
    assert meets.requests_per_s == pytest.approx(10 / meets.makespan_s, rel=EXACT)
    late = simulate(trace, timer, kv_capacity_tokens=BIG_KV, ttft_slo_ms=ttft_ms * 0.99)
    assert late.goodput_requests_per_s == 0.0
    slow = simulate(trace, timer, kv_capacity_tokens=BIG_KV, tpot_slo_ms=tpot_ms * 0.99)
    assert slow.goodput_requests_per_s == 0.0


# -- Queueing: one request per step --------------------------------------------------------------

STEP_S = 0.010  # every step 10 ms, whatever it does


def one_per_step(requests_per_s: float, count: int, seed: int = 11) -> SimulationResult:
    """One-token requests, one at a time: the replica serves exactly one request per 10 ms step,
    an M/D/1 queue with service time 10 ms when arrivals are Poisson."""
    workload = PoissonWorkload(requests_per_s, count, constant(100), constant(1))
    return simulate(
        workload.trace(seed=seed),
        LinearTimer(base_s=STEP_S),
        kv_capacity_tokens=BIG_KV,
        scheduler=SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=2048),
    )


def test_arrivals_faster_than_one_per_step_saturate_and_the_queue_grows() -> None:
    rate = 150.0  # capacity is 1 / 10 ms = 100 requests/s
    result = one_per_step(rate, 20_000)
    assert result.saturated
    # The backlog grows at arrival rate minus service rate, 50 requests/s; Poisson noise over
    # the 67 s window is about sqrt(10^4)/67 = 1.5/s, so 5 % is over one standard deviation.
    assert result.backlog_growth_requests_per_s == pytest.approx(rate - 100.0, rel=0.05)
    # At the last arrival (20,000 / 150 = 133 s) 13,333 have been served and 6,667 wait.
    assert result.max_waiting_requests == pytest.approx(20_000 * (1 - 100 / rate), rel=0.02)
    waiting = [sample.waiting_requests for sample in result.queue]
    times = [sample.time_s for sample in result.queue]
    assert len(result.queue) <= QUEUE_SAMPLES
    assert times == sorted(times)
    # Over the arrival window the queue rises steadily: the second quarter's samples sit below
    # the fourth quarter's by about (150 - 100) * 133 s / 2 = 3,333 requests.
    arrivals_end = 20_000 / rate
    half = [w for t, w in zip(times, waiting, strict=True) if t < arrivals_end / 2]
    full = [w for t, w in zip(times, waiting, strict=True) if t < arrivals_end]
    assert full[-1] - half[-1] == pytest.approx(50 * arrivals_end / 2, rel=0.1)


def test_arrivals_below_one_per_step_do_not_saturate() -> None:
    result = one_per_step(70.0, 20_000)
    assert not result.saturated
    assert abs(result.backlog_growth_requests_per_s) < 2.0  # noise: 1.5 requests/s (see above)
    # M/D/1 at rho = 0.7 keeps a short queue: L_q = rho^2 / (2 (1 - rho)) = 0.82 on average.
    assert result.mean_waiting_requests == pytest.approx(0.7**2 / (2 * 0.3), rel=0.1)


def test_arrivals_exactly_one_per_step_do_not_saturate() -> None:
    # D/D/1 at capacity: each request arrives as the previous one leaves; nobody ever waits.
    trace = evenly(1000, STEP_S, 100, 1)
    result = simulate(
        trace,
        LinearTimer(base_s=STEP_S),
        kv_capacity_tokens=BIG_KV,
        scheduler=SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=2048),
    )
    assert not result.saturated
    assert result.max_waiting_requests == 1  # the one arriving at the step boundary
    assert result.ttft_ms.max == pytest.approx(STEP_S * 1e3, rel=EXACT)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_queue_matches_pollaczek_khinchine_and_littles_law(rho: float) -> None:
    rate = rho / STEP_S
    result = one_per_step(rate, 50_000)
    # M/D/1 mean wait (Pollaczek-Khinchine): W_q = rho * S / (2 (1 - rho)); TTFT = W_q + S.
    # Over 50,000 requests the sample mean is within about 1 % (rho = 0.8 has the longer
    # correlation time); 3 % is the stated tolerance.
    wait_s = rho * STEP_S / (2 * (1 - rho))
    assert result.ttft_ms.mean == pytest.approx((wait_s + STEP_S) * 1e3, rel=0.03)
    # Little's law on the simulated queue: time-average number in system = arrival rate x mean
    # time in system. Exact (float rounding) with the run's own rate, since the queue integral
    # counts every request from its arrival to its last token...
    rate_seen = result.completed_requests / result.makespan_s
    assert result.mean_requests_in_system == pytest.approx(
        rate_seen * result.e2e_ms.mean / 1e3, rel=1e-9
    )
    # ...and 3 % from the closed form L = lambda (W_q + S).
    assert result.mean_requests_in_system == pytest.approx(rate * (wait_s + STEP_S), rel=0.03)
    assert result.mean_waiting_requests == pytest.approx(rate * wait_s, rel=0.05)


def test_littles_law_holds_through_batching_chunking_and_preemption() -> None:
    workload = PoissonWorkload(
        6.0,
        4000,
        PercentileLengths(p50=500, p90=2000, p99=6000, max_tokens=8000),
        PercentileLengths(p50=100, p90=300, p99=800, max_tokens=1000),
    )
    timer = LinearTimer(base_s=0.006, per_token_s=3e-5, per_context_s=2e-8, per_pair_s=1e-11)
    result = simulate(
        workload.trace(seed=5),
        timer,
        kv_capacity_tokens=12_000,  # tight: 168 preemptions
        scheduler=SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=1024),
    )
    assert result.preemptions > 0
    rate_seen = result.completed_requests / result.makespan_s
    assert result.mean_requests_in_system == pytest.approx(
        rate_seen * result.e2e_ms.mean / 1e3, rel=1e-9
    )
    # Every gap between consecutive tokens is counted once: the mean ITL is the total decode
    # time after first tokens over the total number of gaps.
    times = result.requests
    decode_s = np.sum(times.finish_s - times.first_token_s)
    gaps = np.sum(times.output_tokens - 1)
    assert result.itl_ms.mean == pytest.approx(decode_s / gaps * 1e3, rel=1e-9)


# -- Chunked prefill and a 32K prompt (article A) -------------------------------------------------

A, B, P = 0.010, 5e-5, 1e-9  # 10 ms per step, 50 us per token, 1 ns per attention pair
LONG = 32_768
SHORT = 32
LONG_PAIRS = LONG * (LONG + 1) // 2  # causal, in one piece or in chunks alike
LONG_STEP_S = A + B * LONG + P * LONG_PAIRS  # 2.18485 s: the whole prompt in one step
LONG_AT_S = 1.020  # between the shorts at 1.00 (done by 1.0125) and 1.05


def short_step_s(count: int) -> float:
    """A step prefilling `count` short prompts and nothing else."""
    return A + B * SHORT * count + P * (count * SHORT * (SHORT + 1) // 2)


def shorts_around_a_long_prompt() -> Trace:
    """100 short one-token requests every 50 ms and one 32K-token prompt at 1.02 s."""
    rows = [(i * 0.05, SHORT, 1) for i in range(100)]
    rows.append((LONG_AT_S, LONG, 1))
    return Trace.from_rows(sorted(rows))


def short_ttft_ms(result: SimulationResult) -> np.ndarray:
    ttft = result.requests.ttft_s * 1e3
    return np.asarray(ttft[result.requests.arrival_s != LONG_AT_S])


def p99_of_two_largest(largest_s: float, gap_s: float) -> float:
    """p99 of 100 values (linear interpolation) whose two largest are `largest_s` and
    `largest_s - gap_s`: 0.01 of the way from the second to the first."""
    return (largest_s - gap_s + 0.01 * gap_s) * 1e3


def test_a_long_prompt_without_chunking_delays_every_short_request_behind_it() -> None:
    result = simulate(
        shorts_around_a_long_prompt(),
        LinearTimer(base_s=A, per_token_s=B, per_pair_s=P),
        kv_capacity_tokens=BIG_KV,
        # vLLM needs max_num_batched_tokens >= max_model_len without chunking.
        scheduler=SchedulerConfig(max_num_batched_tokens=LONG, enable_chunked_prefill=False),
    )
    long_end_s = LONG_AT_S + LONG_STEP_S  # 3.20485 s
    # Shorts at 1.05, 1.10, ..., 3.20 (44 of them) wait, then prefill together in one step.
    batch_end_s = long_end_s + short_step_s(44)
    shorts = short_ttft_ms(result)
    assert shorts.max() == pytest.approx((batch_end_s - 1.05) * 1e3, rel=EXACT)  # 2,235.7 ms
    assert np.percentile(shorts, 99) == pytest.approx(
        p99_of_two_largest(batch_end_s - 1.05, 0.05), rel=EXACT
    )
    # The batch ends at 3.2853 s: the shorts of 1.05 .. 2.25 s (25) waited over a second.
    assert np.sum(shorts > 1000) == 25
    assert np.median(shorts) == pytest.approx(short_step_s(1) * 1e3, rel=EXACT)


def test_chunking_alone_does_not_let_later_short_requests_overtake_a_long_prefill() -> None:
    # vLLM v1 default: the partial prefill is scheduled before the queue and takes the budget.
    result = simulate(
        shorts_around_a_long_prompt(),
        LinearTimer(base_s=A, per_token_s=B, per_pair_s=P),
        kv_capacity_tokens=BIG_KV,
        scheduler=SchedulerConfig(max_num_batched_tokens=2048),
    )
    # 16 chunks of 2048: the same tokens and attention pairs as one step, plus 15 step overheads.
    long_end_s = LONG_AT_S + LONG_STEP_S + 15 * A  # 3.35485 s
    # Shorts at 1.05 .. 3.35 (47 of them, 1,504 tokens: one step) wait for the last chunk.
    batch_end_s = long_end_s + short_step_s(47)
    shorts = short_ttft_ms(result)
    assert shorts.max() == pytest.approx((batch_end_s - 1.05) * 1e3, rel=EXACT)
    p99 = np.percentile(shorts, 99)
    assert p99 == pytest.approx(p99_of_two_largest(batch_end_s - 1.05, 0.05), rel=EXACT)
    assert (
        p99 > 2300.0
    )  # worse than without chunking (2,186 ms): the source article's fix needs more


def test_capping_the_long_chunk_lets_short_requests_through_at_a_chunk_step() -> None:
    threshold = 512
    result = simulate(
        shorts_around_a_long_prompt(),
        LinearTimer(base_s=A, per_token_s=B, per_pair_s=P),
        kv_capacity_tokens=BIG_KV,
        scheduler=SchedulerConfig(
            max_num_batched_tokens=2048, long_prefill_token_threshold=threshold
        ),
    )
    # Each step carries at most 512 long tokens beside the shorts; the longest such step (the
    # last chunk, attending over 32,256 cached tokens) with two shorts in it takes
    pairs = threshold * (LONG - threshold) + threshold * (threshold + 1) // 2 + SHORT * (SHORT + 1)
    longest_step_s = A + B * (threshold + 2 * SHORT) + P * pairs  # 55.4 ms
    # A short waits at most for the step in flight and then its own step.
    shorts = short_ttft_ms(result)
    assert shorts.max() <= 2 * longest_step_s * 1e3  # 110.9 ms, against 2,235.7 ms unchunked
    assert np.percentile(shorts, 99) <= 2 * longest_step_s * 1e3
    # The price: the long prompt itself now takes 64 steps, at least 64 overheads plus its work.
    long_ttft_s = result.requests.ttft_s[result.requests.arrival_s == LONG_AT_S][0]
    assert long_ttft_s > 64 * A + B * LONG + P * LONG_PAIRS  # 2.815 s, against 2.185 s


DECODERS = 4  # requests already decoding when the long prompt arrives


def decoders_and_a_long_prompt() -> Trace:
    rows = [(0.0, SHORT, 400) for _ in range(DECODERS)]
    rows.append((1.0, LONG, 1))
    return Trace.from_rows(rows)


def test_a_long_prefill_stalls_running_decodes_unless_chunked() -> None:
    timer = LinearTimer(base_s=A, per_token_s=B, per_pair_s=P)
    stalled = simulate(
        decoders_and_a_long_prompt(),
        timer,
        kv_capacity_tokens=BIG_KV,
        scheduler=SchedulerConfig(max_num_batched_tokens=LONG, enable_chunked_prefill=False),
    )
    # vLLM v0: a prefill-only step of the whole prompt between two decode steps.
    decode_step_s = A + B * DECODERS
    assert stalled.itl_ms.max == pytest.approx((LONG_STEP_S + decode_step_s) * 1e3, rel=EXACT)

    mixed = simulate(
        decoders_and_a_long_prompt(),
        timer,
        kv_capacity_tokens=BIG_KV,
        scheduler=SchedulerConfig(
            max_num_batched_tokens=LONG,
            enable_chunked_prefill=False,
            unchunked_policy=UnchunkedPolicy.MIXED,
        ),
    )
    # vLLM v1 without chunking: the decodes ride in the long step, which is all one gap.
    assert mixed.itl_ms.max == pytest.approx((LONG_STEP_S + B * DECODERS) * 1e3, rel=EXACT)

    chunked = simulate(
        decoders_and_a_long_prompt(),
        timer,
        kv_capacity_tokens=BIG_KV,
        scheduler=SchedulerConfig(max_num_batched_tokens=2048),
    )
    # Each step: 4 decodes and a 2,044-token chunk. The longest is chunk 16 of 17, after
    # 15 * 2044 = 30,660 cached tokens.
    chunk = 2048 - DECODERS
    longest_step_s = A + B * 2048 + P * (chunk * 15 * chunk + chunk * (chunk + 1) // 2)
    assert chunked.itl_ms.max == pytest.approx(longest_step_s * 1e3, rel=EXACT)  # 177 ms
    assert chunked.itl_ms.max < stalled.itl_ms.max / 10


def test_multi_step_scheduling_makes_a_new_request_wait_for_the_step_group() -> None:
    # vLLM V0's --num-scheduler-steps 4: the scheduler decides before decode steps 0, 4, 8, ...
    # A (prompt 10, 10 tokens) prefills alone; B (prompt 10, 2 tokens) arrives during A's first
    # decode step (decode step 0). With one step per decision B is admitted at decode step 1;
    # with four it waits for decode step 4, three lone decode steps later.
    a, b = 0.010, 0.001
    t1 = a + 10 * b  # A's prefill
    trace = Trace.from_rows([(0.0, 10, 10), (t1 + 0.5 * (a + b), 10, 2)])
    timer = LinearTimer(a, b)
    every = simulate(trace, timer, kv_capacity_tokens=BIG_KV)
    grouped = simulate(
        trace, timer, kv_capacity_tokens=BIG_KV, scheduler=SchedulerConfig(num_scheduler_steps=4)
    )
    arrival_b = t1 + 0.5 * (a + b)
    for result, lone_steps in ((every, 1), (grouped, 4)):
        # Lone decodes of A, then a step with A's decode and B's 10-token prefill (B's first
        # token), then one of both decoding (B's last).
        first_b = t1 + lone_steps * (a + b) + (a + 11 * b)
        times = result.requests
        assert times.first_token_s[1] - arrival_b == pytest.approx(first_b - arrival_b, rel=EXACT)
        assert times.finish_s[1] == pytest.approx(first_b + a + 2 * b, rel=EXACT)
        # A: 9 decode steps, two of them shared with B (one with its prefill).
        assert times.finish_s[0] == pytest.approx(
            t1 + 7 * (a + b) + (a + 11 * b) + (a + 2 * b), rel=EXACT
        )
    assert grouped.ttft_ms.max - every.ttft_ms.max == pytest.approx(3 * (a + b) * 1e3, rel=1e-6)
    with pytest.raises(SpecError) as error:
        SchedulerConfig(num_scheduler_steps=0)
    assert error.value.field == "scheduler.num_scheduler_steps"


def test_a_receive_interval_makes_a_new_request_wait_for_the_next_look() -> None:
    # SGLang's --scheduler-recv-interval 4: after A's prefill the scheduler looks at once, then
    # after every 4 decode-only steps (at the ends of A's decode steps 4, 8, ...). B arrives
    # during A's sixth decode step: seen at the end of its eighth, where one look a step would
    # have seen it at the end of its sixth; then a step with A's decode and B's 10-token
    # prefill gives B's first token.
    a, b = 0.010, 0.001
    t1 = a + 10 * b  # A's prefill
    arrival_b = t1 + 5.5 * (a + b)
    trace = Trace.from_rows([(0.0, 10, 20), (arrival_b, 10, 2)])
    timer = LinearTimer(a, b)
    for interval, lone_steps in ((1, 6), (4, 8)):
        result = simulate(
            trace,
            timer,
            kv_capacity_tokens=BIG_KV,
            scheduler=SchedulerConfig(scheduler_recv_interval=interval),
        )
        first_b = t1 + lone_steps * (a + b) + (a + 11 * b)
        times = result.requests
        assert times.first_token_s[1] == pytest.approx(first_b, rel=EXACT)
        assert times.finish_s[1] == pytest.approx(first_b + a + 2 * b, rel=EXACT)
    # A request arriving while nothing runs is seen at once.
    lone = simulate(
        Trace.from_rows([(0.25, 10, 2)]),
        timer,
        kv_capacity_tokens=BIG_KV,
        scheduler=SchedulerConfig(scheduler_recv_interval=30),
    )
    assert lone.requests.first_token_s[0] == pytest.approx(0.25 + a + 10 * b, rel=EXACT)
    with pytest.raises(SpecError) as error:
        SchedulerConfig(scheduler_recv_interval=0)
    assert error.value.field == "scheduler.scheduler_recv_interval"


# -- KV cache ------------------------------------------------------------------------------------


def test_kv_capacity_for_two_requests_runs_two_at_a_time() -> None:
    a, b = 0.010, 0.001
    # Prompt 60 holds 4 blocks of 16 and so does its peak, 60 + 4 - 1 = 63 tokens.
    trace = Trace.from_rows([(0.0, 60, 4)] * 10)
    timer = LinearTimer(base_s=a, per_token_s=b)
    result = simulate(trace, timer, kv_capacity_tokens=8 * 16 + 15, block_tokens=16)
    assert result.max_running_requests == 2
    assert result.preemptions == 0
    # Pairs run back to back: a 120-token prefill step, then 3 decode steps of 2 sequences.
    pair_s = (a + 120 * b) + 3 * (a + 2 * b)
    assert result.makespan_s == pytest.approx(5 * pair_s, rel=EXACT)
    assert result.ttft_ms.max == pytest.approx((4 * pair_s + a + 120 * b) * 1e3, rel=EXACT)
    roomier = simulate(trace, timer, kv_capacity_tokens=12 * 16, block_tokens=16)
    assert roomier.max_running_requests == 3


def test_a_decode_without_a_free_block_preempts_the_newest_request() -> None:
    a, b = 0.010, 0.001
    # Two requests of prompt 16 and 40 output tokens; each peaks at 16 + 39 = 55 tokens, 4
    # blocks, but the cache holds 4 blocks in all.
    trace = Trace.from_rows([(0.0, 16, 40), (0.0, 16, 40)])
    timer = LinearTimer(base_s=a, per_token_s=b)
    result = simulate(trace, timer, kv_capacity_tokens=64, block_tokens=16)
    assert result.preemptions == 1
    # Both prefill (1 block each) and decode; at decode step 16 both reach context 33 and need
    # a third block with none free: the newer one is preempted after generating 17 tokens.
    first_token_s = a + 32 * b
    first_finish_s = first_token_s + 16 * (a + 2 * b) + 23 * (a + b)
    # It then recomputes 16 + 17 = 33 tokens, which yields token 18, and decodes 22 more.
    second_finish_s = first_finish_s + (a + 33 * b) + 22 * (a + b)
    assert result.requests.first_token_s.tolist() == pytest.approx([first_token_s] * 2, rel=EXACT)
    assert result.requests.finish_s.tolist() == pytest.approx(
        [first_finish_s, second_finish_s], rel=EXACT
    )
    # Its longest gap spans the preemption: from token 17 to the recompute's token 18.
    stall_s = 23 * (a + b) + a + 33 * b
    assert result.itl_ms.max == pytest.approx(stall_s * 1e3, rel=EXACT)
    roomy = simulate(trace, timer, kv_capacity_tokens=128, block_tokens=16)
    assert roomy.preemptions == 0


def test_a_prompt_is_admitted_by_its_first_chunk_blocks_not_its_whole_prompt() -> None:
    # vLLM V1 allocates a chunk's blocks as it is scheduled. Cache 4 blocks of 16; budget 16
    # tokens a step. A (prompt 16, 3 tokens) prefills alone; B (prompt 40, 1 token) is admitted
    # at step 2 with 1 block for its first 15 tokens, though its whole prompt's 3 blocks are
    # not free until A finishes.
    a, b = 0.010, 0.001
    trace = Trace.from_rows([(0.0, 16, 3), (0.0, 40, 1)])
    config = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=16)
    result = simulate(
        trace, LinearTimer(a, b), kv_capacity_tokens=64, block_tokens=16, scheduler=config
    )
    # Step 1: A's 16 tokens (1 block). Step 2: A decodes (writes position 16: a 2nd block) and
    # B prefills 15 (1 block). Step 3: A decodes its last token, B 15 more (a 2nd block: the
    # pool is full). Step 4: A has left; B's last 10 tokens take its 3rd block.
    steps_s = [a + 16 * b, a + 16 * b, a + 16 * b, a + 10 * b]
    assert result.requests.finish_s.tolist() == pytest.approx(
        [sum(steps_s[:3]), sum(steps_s)], rel=EXACT
    )
    assert result.preemptions == 0
    assert result.steps == 4


def test_preemption_recomputes_the_prompt_and_the_generated_tokens() -> None:
    # Cache 4 blocks of 16, budget 32. A (prompt 32, 20 tokens) peaks at 51 tokens, 4 blocks;
    # B (prompt 16, 3 tokens) at 18 tokens, 2 blocks. Worked by hand:
    # step 1: A's prompt, 32 tokens (2 blocks), its first token;
    # step 2: A's decode writes position 32 (a 3rd block) and B's 16 tokens take the last one;
    #         B's first token;
    # step 3: A needs no block, B's decode writes position 16 and needs one: none is free, so
    #         the newest running request, B, is preempted (its block freed, 1 token generated)
    #         and, as in vLLM V1, nothing is admitted in this step: A decodes alone;
    # then B's recompute, 16 + 1 = 17 tokens in 2 blocks, waits for blocks (1 free, then 0
    # once A's decode takes its 4th at position 48) until A finishes after 18 lone decodes;
    # B recomputes (17 tokens, which yields its 2nd token) and decodes its 3rd.
    a, b = 0.010, 0.001
    trace = Trace.from_rows([(0.0, 32, 20), (0.0, 16, 3)])
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32)
    result = simulate(
        trace, LinearTimer(a, b), kv_capacity_tokens=64, block_tokens=16, scheduler=config
    )
    assert result.preemptions == 1
    step1_s, step2_s = a + 32 * b, a + 17 * b
    a_finish_s = step1_s + step2_s + 18 * (a + b)
    b_finish_s = a_finish_s + (a + 17 * b) + (a + b)
    assert result.requests.first_token_s.tolist() == pytest.approx(
        [step1_s, step1_s + step2_s], rel=EXACT
    )
    assert result.requests.finish_s.tolist() == pytest.approx([a_finish_s, b_finish_s], rel=EXACT)
    assert result.steps == 2 + 18 + 2
    # B's longest gap: from its first token to the recompute's token.
    assert result.itl_ms.max == pytest.approx((a_finish_s + a + 17 * b - step1_s - step2_s) * 1e3)


def test_a_request_that_cannot_fit_the_cache_is_rejected_not_simulated() -> None:
    trace = Trace.from_rows([(0.0, 10, 5), (0.1, 100, 5), (0.2, 10, 5)])
    result = simulate(trace, LinearTimer(base_s=0.01), kv_capacity_tokens=64, block_tokens=16)
    assert result.rejected_requests == 1
    assert result.completed_requests == 2
    assert result.requests.rejected.tolist() == [False, True, False]
    with pytest.raises(SpecError) as error:
        simulate(
            Trace.from_rows([(0.0, 100, 5)]),
            LinearTimer(base_s=0.01),
            kv_capacity_tokens=64,
            block_tokens=16,
        )
    assert error.value.field == "kv_capacity_tokens"


# -- Determinism, interpolation, validation -------------------------------------------------------


def busy_workload() -> PoissonWorkload:
    return PoissonWorkload(
        8.0,
        2000,
        PercentileLengths(p50=1000, p90=3000, p99=8000, max_tokens=16_000),
        PercentileLengths(p50=200, p90=500, p99=1000, max_tokens=2000),
    )


def test_same_seed_same_result() -> None:
    timer = LinearTimer(base_s=0.005, per_token_s=2e-5, per_context_s=1e-8, per_pair_s=1e-12)
    runs = [
        simulate(busy_workload().trace(seed=seed), timer, kv_capacity_tokens=300_000)
        for seed in (9, 9, 10)
    ]
    first, again, other = runs
    assert np.array_equal(first.requests.finish_s, again.requests.finish_s)
    assert first.ttft_ms == again.ttft_ms
    assert first.itl_ms == again.itl_ms
    assert first.queue == again.queue
    assert first.steps == again.steps
    assert not np.array_equal(first.requests.finish_s, other.requests.finish_s)


def test_interpolated_decode_steps_match_calling_the_timer_every_step() -> None:
    trace = busy_workload().trace(seed=2)
    affine = LinearTimer(base_s=0.005, per_token_s=2e-5, per_context_s=1e-8)
    fast = simulate(trace, affine, kv_capacity_tokens=300_000)
    exact = simulate(trace, affine, kv_capacity_tokens=300_000, exact_step_times=True)
    # Affine in the context: the same schedule, equal times up to rounding.
    assert fast.requests.finish_s == pytest.approx(exact.requests.finish_s, rel=1e-12)
    assert fast.timer_calls < exact.timer_calls / 2
    assert exact.timer_calls == exact.steps
    # Curved in the context: step times agree to the curvature over 1/64 of the context.
    curved_fast = simulate(trace, CurvedTimer(), kv_capacity_tokens=300_000)
    curved = simulate(trace, CurvedTimer(), kv_capacity_tokens=300_000, exact_step_times=True)
    assert curved_fast.tpot_ms.p50 == pytest.approx(curved.tpot_ms.p50, rel=1e-4)
    assert curved_fast.e2e_ms.p50 == pytest.approx(curved.e2e_ms.p50, rel=1e-3)


def test_the_work_of_a_run_is_bounded() -> None:
    timer = LinearTimer(base_s=0.005, per_token_s=2e-5, per_context_s=1e-8)
    # 10 lone requests of 5 prompt and 100 output tokens, far apart: 10 x 100 steps exactly.
    lone = evenly(10, 100.0, 5, 100)
    assert minimum_steps(lone, SchedulerConfig()) == 100  # one request's own tokens
    assert simulate(lone, timer, kv_capacity_tokens=BIG_KV, max_steps=1000).steps == 1000
    with pytest.raises(SimulationTooLong) as stopped:
        simulate(lone, timer, kv_capacity_tokens=BIG_KV, max_steps=999)
    assert stopped.value.field == "max_steps" and "before serving every request" in str(
        stopped.value
    )
    # Refused before running when the lengths alone need more: 990 decode tokens over at most
    # 4 decodes a step need 248 steps; 1,040 tokens over a budget of 8 a step, 130.
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=8)
    assert minimum_steps(lone, config) == 248
    with pytest.raises(SimulationTooLong, match="needs at least 248 steps"):
        simulate(lone, timer, kv_capacity_tokens=BIG_KV, scheduler=config, max_steps=247)
    # Requests the KV cache rejects are not served, so they do not count.
    rejected = Trace.from_rows([(0.0, 10, 5), (0.5, 100_000, 100_000)])
    run = simulate(rejected, timer, kv_capacity_tokens=10_000, max_steps=5)
    assert run.steps == 5 and run.rejected_requests == 1
    # A lower bound: busy runs take at least that many steps.
    for scheduler in (
        SchedulerConfig(),
        SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=64),
    ):
        trace = busy_workload().trace(seed=3)
        run = simulate(trace, timer, kv_capacity_tokens=300_000, scheduler=scheduler)
        assert minimum_steps(trace, scheduler) <= run.steps


def test_kv_capacity_is_whole_blocks_of_the_pool() -> None:
    plan = MemoryPlan(
        memory_bytes=80 * 10**9,
        usable_bytes=72e9,
        weights_bytes=16e9,
        activation_reserve_bytes=1e9,
        kv_pool_bytes=1_000_000.0,
        kv_bytes_per_token=131072.0,
    )
    assert kv_capacity_tokens(plan, 1) == 7  # 1e6 / 131,072 = 7.6 tokens
    assert kv_capacity_tokens(plan, 4) == 4
    assert kv_capacity_tokens(plan, 16) == 0
    assert kv_capacity_tokens(replace(plan, kv_pool_bytes=-5e9), 16) == 0


def test_impossible_setups_name_their_field() -> None:
    trace = evenly(3, 1.0, 10, 2)
    timer = LinearTimer(base_s=0.01)
    with pytest.raises(SpecError) as error:
        SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=128)
    assert error.value.field == "scheduler.max_num_batched_tokens"
    # Without chunking the budget is per whole prompt, so it may be below max_num_seqs.
    SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=128, enable_chunked_prefill=False)
    with pytest.raises(SpecError) as error:
        simulate(trace, timer, kv_capacity_tokens=8, block_tokens=16)
    assert error.value.field == "kv_capacity_tokens"
    with pytest.raises(SpecError) as error:
        simulate(trace, timer, kv_capacity_tokens=BIG_KV, ttft_slo_ms=0.0)
    assert error.value.field == "ttft_slo_ms"
    with pytest.raises(SpecError) as error:
        simulate(trace, LinearTimer(base_s=0.0), kv_capacity_tokens=BIG_KV)
    assert error.value.field == "timer"
    with pytest.raises(SpecError) as error:
        simulate(trace, timer, kv_capacity_tokens=BIG_KV, max_steps=0)
    assert error.value.field == "max_steps"


def test_itl_percentiles_of_groups_equal_those_of_every_gap_written_out() -> None:
    """The ITL summary weighs whole pieces of decode-only groups per bin and writes out only
    the bins the percentiles fall in; against a sort of every gap written out, the
    percentiles and the max are the same values (tolerance 0) and the mean, summed in closed
    form, agrees to 1e-12."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        singles = np.round(rng.lognormal(-4, 0.5, 200), 5)
        single_weights = rng.integers(0, 4, 200)
        first = np.round(rng.lognormal(-4, 0.5, 300), 5)
        rise = rng.choice([0.0, 1e-9, -1e-9, 1e-6, 1e-4], 300)
        steps = rng.integers(0, 30, 300)
        weights = rng.integers(0, 5, 300)
        got = _itl_percentiles(singles, single_weights, (first, rise, steps, weights))
        gaps = np.concatenate([singles, _progressions(first, rise, steps)])
        counts = np.concatenate([single_weights, np.repeat(weights, steps)])
        gaps, counts = gaps[counts > 0], counts[counts > 0]
        order = np.argsort(gaps)
        cumulative = np.cumsum(counts[order])
        at = np.searchsorted(cumulative, np.array([0.5, 0.9, 0.99]) * cumulative[-1])
        assert [got.p50, got.p90, got.p99] == list(gaps[order][at] * 1e3)
        assert got.max == gaps.max() * 1e3
        assert got.mean == pytest.approx(np.dot(gaps, counts) / counts.sum() * 1e3, rel=1e-12)


def test_itl_percentiles_of_a_narrow_crowd_of_gaps_equal_a_sort() -> None:
    """Tens of thousands of gaps within 1 % of each other fall in one coarse bin, which is
    binned again finely before its sort (`_select`); the percentiles are still the values a
    sort of every gap gives (tolerance 0)."""
    rng = np.random.default_rng(11)
    singles = np.round(rng.normal(8e-3, 2e-5, 40_000), 7)
    single_weights = rng.integers(0, 9, 40_000)
    first = np.round(rng.normal(8e-3, 2e-5, 20_000), 7)
    rise = rng.choice([0.0, 1e-10, -1e-10], 20_000)
    steps = rng.integers(0, 20, 20_000)
    weights = rng.integers(1, 9, 20_000)
    got = _itl_percentiles(singles, single_weights, (first, rise, steps, weights))
    gaps = np.concatenate([singles, _progressions(first, rise, steps)])
    counts = np.concatenate([single_weights, np.repeat(weights, steps)])
    gaps, counts = gaps[counts > 0], counts[counts > 0]
    order = np.argsort(gaps)
    cumulative = np.cumsum(counts[order])
    at = np.searchsorted(cumulative, np.array([0.5, 0.9, 0.99]) * cumulative[-1])
    assert [got.p50, got.p90, got.p99] == list(gaps[order][at] * 1e3)
