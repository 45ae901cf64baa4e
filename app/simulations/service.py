"""Serving simulations: one replica of a model on a GPU serving a Poisson workload or a trace.

Resolves the target (catalog ids or inline specs), sizes the KV cache from the memory plan at the
scheduler's settings, builds the trace and runs `app.engine.simulation.simulate`. Stores nothing.
Also home of the request-to-engine mappings the planner shares: length distributions and traces.

A disaggregated request (`DisaggregatedQuery`) runs `simulate_disaggregated` instead: a prefill
pool and a decode pool, each of its replicas sized and timed as an aggregated replica of its tp
would be, the KV of each prompt crossing the link between them (`prompt_tokens` times the KV one
token takes on one GPU of the prefill replica). Open-loop traffic only; no prefix caching or
speculative decoding with it (the engine's pools take neither).

The work one simulation may demand is bounded: at most `MAX_SIMULATED_STEPS` forward steps
(refused up front when the workload provably needs more, stopped when a run reaches it), arrival
rates of at least `MIN_REQUESTS_PER_S` and arrival times below `MAX_ARRIVAL_S` (so that step
times are not lost in rounding), and lengths within the model's context.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Any

import numpy as np

from app.catalog.spec_cache import SpecCache
from app.engine.counting import kv_bytes_per_token as model_kv_bytes_per_token
from app.engine.datasets import Dataset, Side, dataset_lengths
from app.engine.dtypes import BYTES_PER_ELEMENT
from app.engine.memory import memory_plan, weight_bytes_per_gpu
from app.engine.params import count_params
from app.engine.simulation import (
    ClosedLoop,
    KvLink,
    Percentiles,
    Pool,
    PrefixCache,
    SchedulerConfig,
    SimulationResult,
    SimulationTooLong,
    StepTimer,
    closed_loop_steps,
    expected_steps,
    simulate,
    simulate_disaggregated,
)
from app.engine.simulation import (
    kv_capacity_tokens as pool_tokens,
)
from app.engine.simulation.speculative import DraftMethod, SpeculativeDecoding, SpeculativeTimer
from app.engine.specs import SpecError
from app.engine.workload import (
    ClosedLoopWorkload,
    HistogramLengths,
    LengthDistribution,
    PercentileLengths,
    PoissonWorkload,
    Trace,
)
from app.errors import InvalidInput, invalid_spec, spec_errors
from app.targets.service import (
    SIMULATED_METRICS,
    SIMULATED_RECORD_METRICS,
    Target,
    TargetEcho,
    TargetQuery,
    resolve_target,
    simulated_regime,
)
from app.validation.record import StatedInterval

__all__ = [
    "ANONYMOUS_BUDGET",
    "KEYED_BUDGET",
    "MAX_ARRIVAL_S",
    "MAX_SIMULATED_STEPS",
    "MIN_REQUESTS_PER_S",
    "DatasetQuery",
    "DisaggregatedQuery",
    "DisaggregatedRun",
    "HistogramQuery",
    "LengthsQuery",
    "PercentilesQuery",
    "PoissonQuery",
    "PoolQuery",
    "PoolRun",
    "SimulationJob",
    "SimulationQuery",
    "SimulationRun",
    "WorkBudget",
    "check_trace_lengths",
    "kv_capacity_tokens",
    "length_distribution",
    "prepare_simulation",
    "run_simulation_job",
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
    """A finished run and what it was of; the answer schema reads it by attribute (`target`
    as its echo, the result's figures as if they were its own)."""

    resolved: Target
    scheduler: SchedulerConfig
    kv_capacity_tokens: int
    num_requests: int
    result: SimulationResult
    disaggregated: DisaggregatedRun | None = None
    """A disaggregated run's pools and transfers; `result` is then its requests end to end
    (`DisaggregatedResult.served`) and `resolved` and `kv_capacity_tokens` the decode pool's."""

    @property
    def target(self) -> TargetEcho:
        return self.resolved.echo()

    @property
    def expected_error_pct(self) -> dict[str, float | None]:
        return self.resolved.error_statement(SIMULATED_METRICS)[0]

    @property
    def error_interval_pct(self) -> dict[str, StatedInterval | None]:
        return self._intervals()[0]

    def _intervals(self) -> tuple[dict[str, StatedInterval | None], tuple[str, ...]]:
        regime = simulated_regime(self.result.saturated)
        return self.resolved.error_intervals(SIMULATED_RECORD_METRICS, regime)

    @property
    def warnings(self) -> list[str]:
        unknown = self.resolved.error_statement(SIMULATED_METRICS)[1]
        return [*self.resolved.warnings, *unknown, *self._intervals()[1]]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)


@dataclass(frozen=True, slots=True)
class PoolRun:
    """One pool of a disaggregated run: how it was built, and one of its replicas' run (read by
    attribute as the answer's pool)."""

    replicas: int
    tp: int
    gpus_per_replica: int
    kv_capacity_tokens: int
    result: SimulationResult

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)


@dataclass(frozen=True, slots=True)
class DisaggregatedRun:
    """What a disaggregated run adds to the answer: its pools, its link, its transfers."""

    prefill: PoolRun
    decode: PoolRun
    link: KvLink
    kv_bytes_per_token: float
    """The KV one token takes on one GPU of the prefill replica: what each GPU sends."""
    transfer_bytes: Percentiles
    """Bytes each served request's KV takes on one GPU of the prefill replica."""
    transfer_ms: Percentiles

    @property
    def gpus_total(self) -> int:
        return (
            self.prefill.replicas * self.prefill.gpus_per_replica
            + self.decode.replicas * self.decode.gpus_per_replica
        )


@dataclass(frozen=True, slots=True)
class PercentilesQuery:
    """Token lengths by three percentiles (`app.engine.workload.PercentileLengths`)."""

    p50: float
    p90: float
    p99: float


@dataclass(frozen=True, slots=True)
class HistogramQuery:
    """Token lengths by histogram: bins [edge i, edge i+1) with weights."""

    edges_tokens: tuple[int, ...]
    weights: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class DatasetQuery:
    """Token lengths as `vllm bench serve --dataset-name` draws them
    (`app.engine.datasets.dataset_lengths`): the side (prompt or output) is the field's."""

    dataset: Dataset
    mean_tokens: int | None = None
    range_ratio: float = 0.0


LengthsQuery = PercentilesQuery | HistogramQuery | DatasetQuery


@dataclass(frozen=True, slots=True)
class PoissonQuery:
    """Lengths drawn from the two distributions; Poisson arrivals at `requests_per_s`, or a
    closed loop of `concurrency` users with `think_time_s` (exactly one of the two)."""

    requests_per_s: float | None
    num_requests: int
    prompt_tokens: LengthsQuery
    output_tokens: LengthsQuery
    concurrency: int | None = None
    think_time_s: float = 0.0

    @property
    def closed_loop(self) -> ClosedLoop | None:
        """The users of a closed loop (validated here, once), or None for an open one."""
        if self.concurrency is None:
            return None
        return ClosedLoop(self.concurrency, self.think_time_s)


def length_distribution(
    lengths: LengthsQuery, field: str, max_tokens: int | None = None
) -> LengthDistribution:
    """The engine's distribution of `lengths`; a 422 naming `field` and the offending key.
    `max_tokens` clamps sampled percentile lengths (a model's context); a p99, or a
    histogram's or a dataset's longest length, above it is refused. A dataset's side is the
    field's: outputs for a field ending in `output_tokens`, prompts otherwise."""
    try:
        if isinstance(lengths, DatasetQuery):
            side = Side.OUTPUT if field.endswith("output_tokens") else Side.PROMPT
            named = dataset_lengths(lengths.dataset, side, lengths.mean_tokens, lengths.range_ratio)
            longest = named.edges_tokens[-1] - 1
            if max_tokens is not None and longest > max_tokens:
                raise InvalidInput.at(
                    f"{field}.mean_tokens",
                    f"{lengths.dataset} lengths reach {longest} tokens, beyond the model's "
                    f"{max_tokens}-token context",
                )
            return named
        if isinstance(lengths, HistogramQuery):
            edges = lengths.edges_tokens
            if max_tokens is not None and edges[-1] - 1 > max_tokens:
                raise InvalidInput.at(
                    f"{field}.edges_tokens",
                    f"the last bin reaches {edges[-1] - 1} tokens, beyond the model's "
                    f"{max_tokens}-token context",
                )
            return HistogramLengths(edges_tokens=edges, weights=lengths.weights)
        return PercentileLengths(
            p50=lengths.p50, p90=lengths.p90, p99=lengths.p99, max_tokens=max_tokens
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
    extra_weights_bytes: float = 0.0,
) -> int:
    """The KV pool of one replica, in whole blocks of tokens; 422 when nothing is left.
    `extra_weights_bytes` per GPU beside the model's: a drafter's."""
    with spec_errors():
        plan = memory_plan(
            target.model,
            target.gpu,
            target.deployment,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=scheduler.max_num_batched_tokens,
            max_num_seqs=scheduler.max_num_seqs,
        )
    if extra_weights_bytes:
        plan = dc_replace(
            plan,
            weights_bytes=plan.weights_bytes + extra_weights_bytes,
            kv_pool_bytes=plan.kv_pool_bytes - extra_weights_bytes,
        )
    tokens = pool_tokens(plan, block_tokens)
    if tokens < block_tokens:
        raise InvalidInput.at(
            "gpu",
            f"weights ({plan.weights_bytes / 1e9:.1f} GB) and activations "
            f"({plan.activation_reserve_bytes / 1e9:.1f} GB) per GPU leave no KV cache in "
            f"{plan.usable_bytes / 1e9:.1f} GB usable: raise tp or quantise",
        )
    return tokens


@dataclass(frozen=True, slots=True)
class WorkBudget:
    """How much one request may ask the simulator to do."""

    max_requests: int
    max_steps: int
    """Checked before the run against `expected_steps`; the run itself stops at
    `STEP_LIMIT_FACTOR` times this (the estimate is within a factor of about 1.5)."""


STEP_LIMIT_FACTOR = 2
KEYED_BUDGET = WorkBudget(max_requests=200_000, max_steps=MAX_SIMULATED_STEPS)
"""With an API key."""
ANONYMOUS_BUDGET = WorkBudget(max_requests=20_000, max_steps=1_000_000)
"""Without one: a few seconds of one worker process at most."""


@dataclass(frozen=True, slots=True)
class PoolQuery:
    """One pool of a disaggregated deployment, as a request gave it."""

    replicas: int = 1
    tp: int | None = None
    """None: the request's tp."""


@dataclass(frozen=True, slots=True)
class DisaggregatedQuery:
    """Separate prefill and decode pools joined by `link`."""

    prefill: PoolQuery = field(default_factory=PoolQuery)
    decode: PoolQuery = field(default_factory=PoolQuery)
    link: KvLink = field(default_factory=KvLink)


@dataclass(frozen=True, slots=True)
class SimulationQuery:
    """A simulation request, as the service needs it (the API schema builds it)."""

    target: TargetQuery
    scheduler: Mapping[str, Any]
    """The scheduler settings the request gave, by `SchedulerConfig` field; the target's
    engine completes them (`Target.scheduler`)."""
    workload: PoissonQuery | None
    trace_rows: Sequence[Sequence[float]] | None
    seed: int
    ttft_slo_ms: float | None
    tpot_slo_ms: float | None
    gpu_memory_utilization: float
    block_tokens: int
    kv_capacity_override_tokens: int | None
    prefix_cache: PrefixCache | None = None
    speculative: SpeculativeDecoding | None = None
    draft_model: str | None = None
    """The draft model's catalog id when `speculative.method` is `draft`."""
    disaggregated: DisaggregatedQuery | None = None


@dataclass(frozen=True, slots=True)
class PoolJob:
    """One pool of a prepared disaggregated run: its target and the engine's pool."""

    target: Target
    pool: Pool


@dataclass(frozen=True, slots=True)
class DisaggregatedJob:
    """A disaggregated run, resolved and checked."""

    prefill: PoolJob
    decode: PoolJob
    link: KvLink
    kv_bytes_per_token: float


@dataclass(frozen=True, slots=True)
class SimulationJob:
    """Everything one run needs, resolved and checked: what a worker process executes."""

    target: Target
    trace: Trace
    scheduler: SchedulerConfig
    kv_capacity_tokens: int
    block_tokens: int
    ttft_slo_ms: float | None
    tpot_slo_ms: float | None
    max_steps: int
    work_field: str
    closed_loop: ClosedLoop | None = None
    prefix_cache: PrefixCache | None = None
    timer: StepTimer | None = None
    """What times the steps when it is not the target's own cost model (speculation)."""
    disaggregated: DisaggregatedJob | None = None


def _speculation(
    cache: SpecCache, query: SimulationQuery, target: Target
) -> tuple[StepTimer | None, float]:
    """The speculative timer and the drafter's weights per GPU (MTP layers or a draft model on
    the target's GPUs and layout), or (None, 0)."""
    spec = query.speculative
    if spec is None:
        return None, 0.0
    draft = None
    if spec.method is DraftMethod.DRAFT:
        if query.draft_model is None:
            raise InvalidInput.at("speculative.draft_model", "a draft model id is needed")
        draft_target = resolve_target(
            cache,
            dc_replace(
                query.target,
                model=query.draft_model,
                deployment=dc_replace(query.target.deployment, dp=1, ep=1, pp=1),
            ),
        )
        draft = draft_target.cost
        extra = weight_bytes_per_gpu(draft_target.model, draft_target.deployment)
    else:
        params = count_params(target.model)
        weight_b = BYTES_PER_ELEMENT[target.deployment.weight_dtype]
        extra = params.mtp / target.deployment.tp * weight_b
    with spec_errors():
        return SpeculativeTimer(target.cost, spec, draft), extra


def prepare_simulation(
    cache: SpecCache, query: SimulationQuery, budget: WorkBudget = KEYED_BUDGET
) -> SimulationJob:
    """Resolve the target, size the KV cache, build the trace and check the work against
    `budget` before anything runs: 422 naming the field when it asks for more."""
    target = resolve_target(cache, query.target)
    config = target.scheduler(query.scheduler)
    timer, drafter_bytes = _speculation(cache, query, target)
    kv_tokens = _kv_tokens(query, target, config, drafter_bytes)
    context = target.model.max_context_tokens
    workload = query.workload
    closed_loop = None
    if query.trace_rows is not None:
        work_field = "trace"
        _within(budget, len(query.trace_rows), work_field)
        trace = trace_from_rows(query.trace_rows)
        check_trace_lengths(trace, context, "trace")
    elif workload is not None:
        work_field = "workload.num_requests"
        _within(budget, workload.num_requests, work_field)
        prompts = length_distribution(workload.prompt_tokens, "workload.prompt_tokens", context)
        outputs = length_distribution(workload.output_tokens, "workload.output_tokens", context)
        with spec_errors("workload"):
            closed_loop = workload.closed_loop
            if workload.requests_per_s is not None:
                trace = PoissonWorkload(
                    workload.requests_per_s, workload.num_requests, prompts, outputs
                ).trace(query.seed)
            else:  # users send the requests as earlier ones finish: no arrival process
                trace = ClosedLoopWorkload(workload.num_requests, prompts, outputs).trace(
                    query.seed
                )
    else:
        raise InvalidInput.at("workload", "give a workload or a trace")
    disaggregated = None
    if query.disaggregated is not None:
        disaggregated = _disaggregated_job(cache, query, query.disaggregated, target, config)
        steps = _disaggregated_steps(trace, disaggregated)
    else:
        with spec_errors():
            steps = expected_steps(trace, target.cost, config)
            if closed_loop is not None:
                steps = closed_loop_steps(trace, config, closed_loop)
    if steps > budget.max_steps:
        raise InvalidInput.at(
            work_field,
            f"serving this takes about {steps:,} forward steps, over the {budget.max_steps:,} "
            f"one simulation may take{_KEY_HINT if budget is not KEYED_BUDGET else ''}: "
            "simulate fewer requests, shorter outputs or a higher rate (a few thousand "
            "requests give the percentiles at any load)",
        )
    return SimulationJob(
        target=target,
        trace=trace,
        scheduler=config,
        kv_capacity_tokens=kv_tokens,
        block_tokens=query.block_tokens,
        ttft_slo_ms=query.ttft_slo_ms,
        tpot_slo_ms=query.tpot_slo_ms,
        max_steps=budget.max_steps * STEP_LIMIT_FACTOR,
        work_field=work_field,
        closed_loop=closed_loop,
        prefix_cache=query.prefix_cache,
        timer=timer,
        disaggregated=disaggregated,
    )


def _refuse_with_disaggregation(query: SimulationQuery) -> None:
    """422 naming the setting a disaggregated run cannot take."""
    why = "a disaggregated simulation's pools take "
    if query.workload is not None and query.workload.concurrency is not None:
        raise InvalidInput.at(
            "workload.concurrency", why + "open-loop traffic only: give requests_per_s or a trace"
        )
    if query.prefix_cache is not None:
        raise InvalidInput.at("prefix_cache", why + "no prefix cache: leave it out")
    if query.speculative is not None:
        raise InvalidInput.at("speculative", why + "no speculative decoding: leave it out")


def _kv_tokens(
    query: SimulationQuery,
    target: Target,
    config: SchedulerConfig,
    extra_weights_bytes: float = 0.0,
) -> int:
    """The replica's KV cache: the request's override, else what `target`'s memory leaves
    (`kv_capacity_tokens`, a drafter's `extra_weights_bytes` beside the weights)."""
    if query.kv_capacity_override_tokens is not None:
        return query.kv_capacity_override_tokens
    return kv_capacity_tokens(
        target,
        config,
        gpu_memory_utilization=query.gpu_memory_utilization,
        block_tokens=query.block_tokens,
        extra_weights_bytes=extra_weights_bytes,
    )


@contextmanager
def _pool_tp_errors(field: str | None) -> Iterator[None]:
    """Within the block, a 422 about the layout (`tp`) or about the memory it leaves (`gpu`)
    names the pool's own `tp` field instead, when the pool has one (`field`)."""
    try:
        with spec_errors():
            yield
    except InvalidInput as error:
        if field is None or not {problem.field for problem in error.errors} & {"tp", "gpu"}:
            raise
        message = "; ".join(problem.message for problem in error.errors)
        raise InvalidInput.at(field, message) from None


def _pool_job(
    cache: SpecCache,
    query: SimulationQuery,
    *,
    name: str,
    pool: PoolQuery,
    target: Target,
    config: SchedulerConfig,
) -> PoolJob:
    """One pool: the request's target at the pool's tp, its KV cache, its replicas."""
    field = f"disaggregated.{name}.tp" if pool.tp is not None else None
    with _pool_tp_errors(field):
        if pool.tp is not None and pool.tp != target.deployment.tp:
            deployment = dc_replace(query.target.deployment, tp=pool.tp)
            target = resolve_target(cache, dc_replace(query.target, deployment=deployment))
        kv_tokens = _kv_tokens(query, target, config)
    with spec_errors(f"disaggregated.{name}"):
        engine_pool = Pool(
            target.cost,
            kv_tokens,
            config.for_ranks(target.deployment.scheduler_batches),
            pool.replicas,
        )
    return PoolJob(target, engine_pool)


def _disaggregated_job(
    cache: SpecCache,
    query: SimulationQuery,
    pools: DisaggregatedQuery,
    target: Target,
    config: SchedulerConfig,
) -> DisaggregatedJob:
    """Both pools of a disaggregated request, checked; the KV bytes each GPU of a prefill
    replica sends per prompt token."""
    _refuse_with_disaggregation(query)
    prefill = _pool_job(
        cache, query, name="prefill", pool=pools.prefill, target=target, config=config
    )
    decode = _pool_job(cache, query, name="decode", pool=pools.decode, target=target, config=config)
    with spec_errors():
        kv_bytes = model_kv_bytes_per_token(prefill.target.model, prefill.target.deployment)
    return DisaggregatedJob(prefill, decode, pools.link, kv_bytes)


def _disaggregated_steps(trace: Trace, job: DisaggregatedJob) -> int:
    """The forward steps of one prefill replica (every request ending at its first token, at
    its pool's share of the rate) and one decode replica (at its share)."""
    prefill, decode = job.prefill.pool, job.decode.pool
    prompts_only = Trace(
        trace.arrival_s * prefill.replicas,
        trace.prompt_tokens,
        np.ones_like(trace.output_tokens),
    )
    shared = Trace(trace.arrival_s * decode.replicas, trace.prompt_tokens, trace.output_tokens)
    with spec_errors():
        return expected_steps(prompts_only, prefill.timer, prefill.scheduler) + expected_steps(
            shared, decode.timer, decode.scheduler
        )


_KEY_HINT = " without an API key (an API key allows more)"


def _within(budget: WorkBudget, requests: int, field: str) -> None:
    if requests > budget.max_requests:
        hint = _KEY_HINT if budget is not KEYED_BUDGET else ""
        raise InvalidInput.at(
            field,
            f"{requests:,} requests exceed the {budget.max_requests:,} one simulation may "
            f"serve{hint}",
        )


def run_simulation_job(job: SimulationJob) -> SimulationRun:
    """Run a prepared simulation (in a heavy-work process; pure computation)."""
    if job.disaggregated is not None:
        return _run_disaggregated(job, job.disaggregated)
    with _run_errors(job):
        result = simulate(
            job.trace,
            job.timer or job.target.cost,
            kv_capacity_tokens=job.kv_capacity_tokens,
            block_tokens=job.block_tokens,
            scheduler=job.scheduler.for_ranks(job.target.deployment.scheduler_batches),
            ttft_slo_ms=job.ttft_slo_ms,
            tpot_slo_ms=job.tpot_slo_ms,
            max_steps=job.max_steps,
            closed_loop=job.closed_loop,
            prefix_cache=job.prefix_cache,
        )
    return SimulationRun(
        resolved=job.target,
        scheduler=job.scheduler,
        kv_capacity_tokens=job.kv_capacity_tokens,
        num_requests=len(job.trace),
        result=result,
    )


@contextmanager
def _run_errors(job: SimulationJob) -> Iterator[None]:
    """Within the block, a run past its step budget is a 422 naming the work's field, and an
    impossible spec a 422 naming its own."""
    try:
        yield
    except SimulationTooLong as error:
        raise InvalidInput.at(
            job.work_field,
            f"{error.message}: simulate fewer requests, shorter outputs or a larger "
            "max_num_batched_tokens (a few thousand requests give the percentiles at any load)",
        ) from None
    except SpecError as error:
        raise invalid_spec(error) from None


def _byte_percentiles(values: np.ndarray[Any, np.dtype[np.float64]]) -> Percentiles:
    if len(values) == 0:
        return Percentiles(p50=0.0, p90=0.0, p99=0.0, mean=0.0, max=0.0)
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return Percentiles(
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        mean=float(values.mean()),
        max=float(values.max()),
    )


def _pool_run(pool: PoolJob, result: SimulationResult) -> PoolRun:
    deployment = pool.target.deployment
    return PoolRun(
        replicas=pool.pool.replicas,
        tp=deployment.tp,
        gpus_per_replica=deployment.gpus,
        kv_capacity_tokens=pool.pool.kv_capacity_tokens,
        result=result,
    )


def _run_disaggregated(job: SimulationJob, pools: DisaggregatedJob) -> SimulationRun:
    with _run_errors(job):
        outcome = simulate_disaggregated(
            job.trace,
            pools.prefill.pool,
            pools.decode.pool,
            kv_bytes_per_token=pools.kv_bytes_per_token,
            link=pools.link,
            block_tokens=job.block_tokens,
            ttft_slo_ms=job.ttft_slo_ms,
            tpot_slo_ms=job.tpot_slo_ms,
            max_steps=job.max_steps,
        )
    served = ~np.isnan(outcome.prefill.requests.ttft_s)
    sent = job.trace.prompt_tokens[served] * pools.kv_bytes_per_token
    return SimulationRun(
        resolved=pools.decode.target,
        scheduler=job.scheduler,
        kv_capacity_tokens=pools.decode.pool.kv_capacity_tokens,
        num_requests=len(job.trace),
        result=outcome.served,
        disaggregated=DisaggregatedRun(
            prefill=_pool_run(pools.prefill, outcome.prefill),
            decode=_pool_run(pools.decode, outcome.served),
            link=pools.link,
            kv_bytes_per_token=pools.kv_bytes_per_token,
            transfer_bytes=_byte_percentiles(sent.astype(np.float64)),
            transfer_ms=outcome.transfer_ms,
        ),
    )
