"""Serving simulations: one replica of a model on a GPU serving a Poisson workload or a trace.

Resolves the target (catalog ids or inline specs), sizes the KV cache from the memory plan at the
scheduler's settings, builds the trace and runs `app.engine.simulator.simulate`. Stores nothing.
Also home of the request-to-engine mappings the planner shares: length distributions and traces.

The work one simulation may demand is bounded: at most `MAX_SIMULATED_STEPS` forward steps
(refused up front when the workload provably needs more, stopped when a run reaches it), arrival
rates of at least `MIN_REQUESTS_PER_S` and arrival times below `MAX_ARRIVAL_S` (so that step
times are not lost in rounding), and lengths within the model's context.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.memory import memory_plan
from app.engine.simulator import (
    SchedulerConfig,
    SimulationResult,
    SimulationTooLong,
    simulate,
)
from app.engine.simulator import (
    kv_capacity_tokens as pool_tokens,
)
from app.engine.specs import SpecError
from app.engine.workload import (
    HistogramLengths,
    LengthDistribution,
    PercentileLengths,
    PoissonWorkload,
    Trace,
)
from app.services.errors import InvalidInput
from app.services.spec_cache import SpecCache
from app.services.specs import invalid_spec
from app.services.targets import Target, resolve_target

__all__ = [
    "MAX_ARRIVAL_S",
    "MAX_SIMULATED_STEPS",
    "MIN_REQUESTS_PER_S",
    "SimulationRun",
    "check_trace_lengths",
    "kv_capacity_tokens",
    "length_distribution",
    "run_simulation",
    "trace_from_rows",
]


MAX_SIMULATED_STEPS = 10_000_000
"""Forward steps one simulation may take: some 5 to 40 seconds of CPU, depending on the share of
prefill steps (100,000 requests at 30 % load take 2.3 million)."""
MIN_REQUESTS_PER_S = 1e-3
"""Slowest arrival rate accepted: 200,000 requests then span 2e8 s, still resolved to 0.1 us."""
MAX_ARRIVAL_S = 1e9
"""Latest arrival time accepted, seconds: float64 resolves it to about 0.1 us."""


@dataclass(frozen=True, slots=True)
class SimulationRun:
    target: Target
    scheduler: SchedulerConfig
    kv_capacity_tokens: int
    num_requests: int
    result: SimulationResult


def length_distribution(
    fields: Mapping[str, Any], field: str, max_tokens: int | None = None
) -> LengthDistribution:
    """`{p50, p90, p99}` or `{edges_tokens, weights}` as the engine's distribution; a 422 naming
    `field` and the offending key. `max_tokens` clamps sampled percentile lengths (a model's
    context); a p99, or a histogram's last bin, above it is refused."""
    try:
        if fields.get("edges_tokens") is not None:
            edges = tuple(int(edge) for edge in fields["edges_tokens"])
            if max_tokens is not None and edges[-1] - 1 > max_tokens:
                raise InvalidInput.at(
                    f"{field}.edges_tokens",
                    f"the last bin reaches {edges[-1] - 1} tokens, beyond the model's "
                    f"{max_tokens}-token context",
                )
            return HistogramLengths(
                edges_tokens=edges, weights=tuple(float(weight) for weight in fields["weights"])
            )
        return PercentileLengths(
            p50=float(fields["p50"]),
            p90=float(fields["p90"]),
            p99=float(fields["p99"]),
            max_tokens=max_tokens,
        )
    except SpecError as error:
        if error.field == "max_tokens":
            raise InvalidInput.at(
                f"{field}.p99", f"exceeds the model's {max_tokens}-token context"
            ) from None
        raise invalid_spec(error, field) from None


def trace_from_rows(rows: Sequence[Sequence[float]], field: str = "trace") -> Trace:
    """(arrival_s, prompt_tokens, output_tokens) rows, in any order, as a trace in arrival order."""
    ordered = sorted(rows, key=lambda row: row[0])
    try:
        return Trace.from_rows((float(a), int(p), int(o)) for a, p, o in ordered)
    except SpecError as error:
        raise InvalidInput.at(field, error.message) from None


def check_trace_lengths(trace: Trace, max_tokens: int, field: str) -> None:
    """422 naming `field` when a prompt or an output of `trace` exceeds the model's context."""
    for column, lengths in (
        ("prompt_tokens", trace.prompt_tokens),
        ("output_tokens", trace.output_tokens),
    ):
        longest = int(lengths.max())
        if longest > max_tokens:
            row = int(lengths.argmax())
            raise InvalidInput.at(
                field,
                f"a request's {column} ({longest}, row {row} in arrival order) exceeds the "
                f"model's {max_tokens}-token context",
            )


def kv_capacity_tokens(
    target: Target,
    scheduler: SchedulerConfig,
    *,
    gpu_memory_utilization: float,
    block_tokens: int,
) -> int:
    """The KV pool of one replica, in whole blocks of tokens; 422 when nothing is left."""
    try:
        plan = memory_plan(
            target.model,
            target.gpu,
            target.deployment,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=scheduler.max_num_batched_tokens,
            max_num_seqs=scheduler.max_num_seqs,
        )
    except SpecError as error:
        raise invalid_spec(error) from None
    tokens = pool_tokens(plan, block_tokens)
    if tokens < block_tokens:
        raise InvalidInput.at(
            "gpu",
            f"weights ({plan.weights_bytes / 1e9:.1f} GB) and activations "
            f"({plan.activation_reserve_bytes / 1e9:.1f} GB) per GPU leave no KV cache in "
            f"{plan.usable_bytes / 1e9:.1f} GB usable: raise tp or quantise",
        )
    return tokens


def run_simulation(
    cache: SpecCache,
    target_args: Mapping[str, Any],
    *,
    scheduler: Mapping[str, Any],
    workload: Mapping[str, Any] | None,
    trace_rows: Sequence[Sequence[float]] | None,
    seed: int,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    gpu_memory_utilization: float,
    block_tokens: int,
    kv_capacity_override_tokens: int | None,
) -> SimulationRun:
    """Simulate one replica of the target serving the workload (or the trace)."""
    target = resolve_target(cache, **target_args)
    try:
        config = SchedulerConfig(**scheduler)
    except SpecError as error:
        raise invalid_spec(error) from None
    if kv_capacity_override_tokens is not None:
        kv_tokens = kv_capacity_override_tokens
    else:
        kv_tokens = kv_capacity_tokens(
            target,
            config,
            gpu_memory_utilization=gpu_memory_utilization,
            block_tokens=block_tokens,
        )
    context = target.model.max_context_tokens
    if trace_rows is not None:
        trace = trace_from_rows(trace_rows)
        check_trace_lengths(trace, context, "trace")
    elif workload is not None:
        try:
            trace = PoissonWorkload(
                requests_per_s=float(workload["requests_per_s"]),
                num_requests=int(workload["num_requests"]),
                prompt_tokens=length_distribution(
                    workload["prompt_tokens"], "workload.prompt_tokens", context
                ),
                output_tokens=length_distribution(
                    workload["output_tokens"], "workload.output_tokens", context
                ),
            ).trace(seed)
        except SpecError as error:
            raise invalid_spec(error, "workload") from None
    else:
        raise InvalidInput.at("workload", "give a workload or a trace")
    try:
        result = simulate(
            trace,
            target.cost,
            kv_capacity_tokens=kv_tokens,
            block_tokens=block_tokens,
            scheduler=config,
            ttft_slo_ms=ttft_slo_ms,
            tpot_slo_ms=tpot_slo_ms,
            max_steps=MAX_SIMULATED_STEPS,
        )
    except SimulationTooLong as error:
        raise InvalidInput.at(
            "trace" if trace_rows is not None else "workload",
            f"{error.message}: simulate fewer requests, shorter outputs or a larger "
            "max_num_batched_tokens (a few thousand requests give the percentiles at any load)",
        ) from None
    except SpecError as error:
        raise invalid_spec(error) from None
    return SimulationRun(
        target=target,
        scheduler=config,
        kv_capacity_tokens=kv_tokens,
        num_requests=len(trace),
        result=result,
    )
