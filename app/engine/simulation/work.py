"""How much work a run is, before it runs: a lower bound on its forward steps and an estimate
of them, for the bounds a service checks before it starts one."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from app.engine.counting import pairs_for_chunk
from app.engine.simulation.config import ClosedLoop, SchedulerConfig, StepTimer
from app.engine.simulation.step_table import checked
from app.engine.step_load import StepLoad
from app.engine.workload import Trace

__all__ = ["closed_loop_steps", "expected_steps", "minimum_steps"]


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
    prefill_s = chunks * checked(
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
        return checked(timer.seconds(load))

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


def closed_loop_steps(trace: Trace, config: SchedulerConfig, loop: ClosedLoop) -> int:
    """About how many forward steps a closed loop of `loop.concurrency` users takes to serve
    `trace`: rounds of min(concurrency, max_num_seqs) requests, each round its mean output's
    decode steps plus the chunks of its prompts (an upper bound when rounds overlap)."""
    batch = min(loop.concurrency, config.max_num_seqs)
    rounds = -(-len(trace) // batch)
    prompt_steps = -(-int(trace.prompt_tokens.sum()) // (config.max_num_batched_tokens * rounds))
    return rounds * (math.ceil(float(trace.output_tokens.mean())) + prompt_steps)
