"""What a capacity plan is asked: the traffic, the latency SLOs, the GPUs on offer, and the knobs
of the search. Frozen dataclasses that validate themselves (`SpecError` naming the field)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from app.engine.dtypes import DType
from app.engine.memory import DEFAULT_BLOCK_TOKENS, DEFAULT_GPU_MEMORY_UTILIZATION
from app.engine.profiles import Profile, uniform_basis
from app.engine.serving import ROOFLINE, ServingEngine
from app.engine.simulation import KvLink, SchedulerConfig, StepTimer
from app.engine.specs import Deployment, Efficiency, GpuSpec, ModelSpec, SpecError
from app.engine.step_cost import StepCostModel
from app.engine.workload import LengthDistribution, Trace

__all__ = [
    "DEFAULT_CONFIRM_REQUESTS",
    "DEFAULT_DTYPE_PAIRS",
    "DEFAULT_MAX_SIMULATED_STEPS",
    "DEFAULT_PROBE_REQUESTS",
    "DEFAULT_TP_CANDIDATES",
    "MAX_CANDIDATES",
    "GpuOffer",
    "PlanOptions",
    "Slo",
    "TimerFactory",
    "Traffic",
    "TtftBucket",
    "step_cost_timer",
]

DEFAULT_TP_CANDIDATES = (1, 2, 4, 8)
DEFAULT_DTYPE_PAIRS: tuple[tuple[DType, DType | None], ...] = (
    (DType.BF16, DType.BF16),
    (DType.FP8, DType.FP8),
)
"""(weight format, KV-cache format) pairs: bf16 throughout, and fp8 weights with an fp8 cache."""
DEFAULT_PROBE_REQUESTS = 3000
"""Requests per simulation probe. 30 of them lie above the p99: how many lie above the true p99
is binomial, mean 30 and standard deviation 5.4, so for independent requests a probe's p99 would
sit between the true 98.8th and 99.2nd percentiles about two times in three; with 300 requests it
would be the third-largest value, give or take. Queued requests are not independent (a burst
delays many at once), and a short stretch of traffic rarely holds the long busy periods that set
a loaded replica's p99. Measured on the issue's traffic (Llama-3-8B on MI300X, H100 SXM and
PCIe): the highest rate a 3,000-request probe meets is 0.3 to 2.9 % above what 30,000 requests
sustain, with a standard deviation of 0.5 to 1.9 % across seeds; 10,000 requests are within
noise of 30,000. The seed is fixed, so every probe of a plan serves the same requests."""
DEFAULT_CONFIRM_REQUESTS = 0
"""Off by default: confirming with 10,000 requests removes that optimism at some 2.5 times the
planning time (the issue's plan: 0.9 s to about 2.3 s)."""
DEFAULT_MAX_SIMULATED_STEPS = 15_000_000
"""Simulated forward steps one plan may spend over all its probes: about a minute of CPU. The
issue's plan (128 candidates) takes some 430,000 with pruning, 12.4 million exhaustively."""
MAX_CANDIDATES = 1024
"""Most candidates (GPU x tp x formats x max_num_seqs x chunk) one plan screens."""

TimerFactory = Callable[[ModelSpec, GpuSpec, Deployment, Efficiency], StepTimer]
"""Builds the step timer of one deployment; `SpecError` when the deployment is impossible."""


def step_cost_timer(
    model: ModelSpec, gpu: GpuSpec, deployment: Deployment, efficiency: Efficiency
) -> StepTimer:
    """The engine's own step timer, `StepCostModel` (the default `TimerFactory`)."""
    return StepCostModel(model, gpu, deployment, efficiency)


def _positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise SpecError(name, f"must be positive, got {value}")


@dataclass(frozen=True, slots=True)
class TtftBucket:
    """A TTFT SLO for the prompts longer than the previous bucket's bound, up to this one's."""

    max_prompt_tokens: int
    ttft_p99_ms: float


@dataclass(frozen=True, slots=True)
class Slo:
    """Latency objectives at the 99th percentile over requests. `ttft_p99_ms` holds for all
    requests; each bucket adds one for its prompt lengths (article A: separate SLAs by length)."""

    ttft_p99_ms: float
    tpot_p99_ms: float
    ttft_buckets: tuple[TtftBucket, ...] = ()

    def __post_init__(self) -> None:
        _positive("slo.ttft_p99_ms", self.ttft_p99_ms)
        _positive("slo.tpot_p99_ms", self.tpot_p99_ms)
        for i, bucket in enumerate(self.ttft_buckets):
            _positive(f"slo.ttft_p99_ms_by_prompt_tokens[{i}].ttft_p99_ms", bucket.ttft_p99_ms)
            _positive(
                f"slo.ttft_p99_ms_by_prompt_tokens[{i}].max_prompt_tokens",
                bucket.max_prompt_tokens,
            )
        for i, (low, high) in enumerate(itertools.pairwise(self.ttft_buckets)):
            if high.max_prompt_tokens <= low.max_prompt_tokens:
                raise SpecError(
                    f"slo.ttft_p99_ms_by_prompt_tokens[{i + 1}].max_prompt_tokens",
                    "buckets must be in increasing order of max_prompt_tokens",
                )

    def scaled(self, factor: float) -> Slo:
        """These objectives with every latency multiplied by `factor`."""
        return Slo(
            self.ttft_p99_ms * factor,
            self.tpot_p99_ms * factor,
            tuple(
                TtftBucket(b.max_prompt_tokens, b.ttft_p99_ms * factor) for b in self.ttft_buckets
            ),
        )


@dataclass(frozen=True, slots=True)
class Traffic:
    """The whole deployment's traffic: `requests_per_s` with length distributions (Poisson
    arrivals), or a `trace` whose arrival pattern is replayed, time-scaled to `requests_per_s`."""

    requests_per_s: float
    prompt_tokens: LengthDistribution | None = None
    output_tokens: LengthDistribution | None = None
    trace: Trace | None = None

    def __post_init__(self) -> None:
        _positive("traffic.requests_per_s", self.requests_per_s)
        has_lengths = self.prompt_tokens is not None and self.output_tokens is not None
        if self.trace is None and not has_lengths:
            raise SpecError("traffic", "give prompt_tokens and output_tokens, or a trace")
        if self.trace is not None and (
            self.prompt_tokens is not None or self.output_tokens is not None
        ):
            raise SpecError("traffic", "give length distributions or a trace, not both")
        if self.trace is not None and len(self.trace) < 2:
            raise SpecError("traffic.trace", "needs at least two requests to have a rate")


@dataclass(frozen=True, slots=True)
class GpuOffer:
    """A GPU one may deploy on, the price of one for an hour, and the efficiency it is timed
    with (by default its own calibration)."""

    gpu: GpuSpec
    price_per_gpu_hour_usd: float
    efficiency: Efficiency | None = None
    profile: Profile | None = None
    """The measured profile that times it (the roofline at `timing_efficiency` when None)."""
    engine: ServingEngine = ROOFLINE
    """The serving engine deployed on it, resolved: its scheduler is the base the candidates'
    batch caps and chunks go onto, its CUDA graphs pad the decode steps."""
    warnings: tuple[str, ...] = ()
    """What an answer planned on it says of the engine choice (an engine the roofline times)."""
    roofline_basis: str = ROOFLINE.label
    """What `basis` names where the roofline times the steps (`roofline`, or why it does)."""
    measured_on: GpuSpec | None = None
    """The GPU `profile` was measured on, when another: its tables scaled to this one."""
    slowdowns: tuple[tuple[float, float], ...] = ()
    """(confidence, k): real step times may be k times the timed ones that often (how far
    published runs landed from such answers, `app.validation`); each planned candidate on this
    GPU is also sized so its SLOs hold at each (`CandidatePlan.by_confidence`)."""

    def __post_init__(self) -> None:
        _positive(f"price_per_gpu_hour_usd[{self.gpu.id}]", self.price_per_gpu_hour_usd)

    @property
    def id(self) -> str:
        return self.gpu.id

    @property
    def timing_efficiency(self) -> Efficiency:
        return self.efficiency if self.efficiency is not None else self.gpu.efficiency

    def scheduler(self, model: ModelSpec, max_num_seqs: int, chunk_tokens: int) -> SchedulerConfig:
        """The engine's scheduler on this GPU with a candidate's batch cap and token budget."""
        defaults = self.default_scheduler(model)
        return replace(defaults, max_num_seqs=max_num_seqs, max_num_batched_tokens=chunk_tokens)

    def default_scheduler(self, model: ModelSpec) -> SchedulerConfig:
        """What the engine's scheduler runs on this GPU when nothing is set."""
        engine = self.engine
        return engine.policy.scheduler_defaults(engine.version, self.gpu, model.max_context_tokens)

    def plan_schedulers(self, model: ModelSpec) -> tuple[SchedulerConfig, ...]:
        """The schedulers a plan tries here when the request names none (the engine's)."""
        engine = self.engine
        return engine.policy.plan_schedulers(engine.version, self.gpu, model.max_context_tokens)

    def kv_dtype(self, model: ModelSpec, weights: DType) -> DType:
        """The KV-cache format the engine serves `weights` of `model` with by default."""
        return self.engine.policy.kv_dtype(self.engine.version, model, weights)

    def graph_sizes(self, tp: int) -> tuple[int, ...]:
        """The decode batches the engine captures CUDA graphs at, with `tp` GPUs a group."""
        return self.engine.policy.graph_sizes(self.engine.version, tp)

    def basis(self, timer: object) -> dict[str, str]:
        """What timed each op family of `timer` on this GPU: a profiled timer's own `basis`,
        else the roofline for all."""
        measured = getattr(timer, "basis", None)
        if measured is not None:
            return dict(measured)
        if isinstance(timer, StepCostModel):
            return uniform_basis(
                self.roofline_basis, moe=timer.has_moe, exchanges=timer.deployment.has_exchanges
            )
        return {"all": self.roofline_basis}  # a timer of the caller's own (timer_factory)


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """The candidate space and the search's knobs.

    Every (GPU, tp, (weight, KV) formats, max_num_seqs, chunk) combination is a candidate; a
    `max_num_seqs` above the chunk is lowered to it (a chunked step must hold every decode).
    Batch caps and chunks left None are each GPU's engine's (`GpuOffer.plan_schedulers`).
    `probe_requests` requests are simulated per probe, with `seed`; `max_plans` fully planned
    candidates are returned, the rest that cannot beat them are pruned unless `exhaustive`.
    A replica count found is confirmed with `confirm_requests` requests (0, or no more than
    `probe_requests`: not confirmed). All probes together may simulate at most
    `max_simulated_steps` forward steps.
    """

    tp_candidates: tuple[int, ...] = DEFAULT_TP_CANDIDATES
    dtype_pairs: tuple[tuple[DType, DType | None], ...] = DEFAULT_DTYPE_PAIRS
    """(weights, KV cache) formats; a KV format None is each GPU's engine's default for those
    weights (`GpuOffer.kv_dtype`)."""
    max_num_seqs_candidates: tuple[int, ...] | None = None
    chunk_tokens_candidates: tuple[int, ...] | None = None
    headroom: float = 0.2
    gpus_per_node: int = 8
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    probe_requests: int = DEFAULT_PROBE_REQUESTS
    confirm_requests: int = DEFAULT_CONFIRM_REQUESTS
    seed: int = 0
    max_plans: int = 3
    exhaustive: bool = False
    max_simulated_steps: int = DEFAULT_MAX_SIMULATED_STEPS
    disaggregated: bool = False
    kv_link: KvLink | None = None
    """The prefill-to-decode KV link of the disaggregated plan (None: `KvLink()`)."""
    layouts: bool = True
    """Search attention data parallelism and expert parallelism (MoE models), and pipeline
    stages where the model does not fit a node, beside the tp candidates."""
    timer_factory: TimerFactory = field(default=step_cost_timer, compare=False)

    def __post_init__(self) -> None:
        for name, values in (
            ("tp_candidates", self.tp_candidates),
            ("max_num_seqs_candidates", self.max_num_seqs_candidates),
            ("chunk_tokens_candidates", self.chunk_tokens_candidates),
        ):
            if values is None:
                continue
            if not values:
                raise SpecError(name, "needs at least one value")
            for i, value in enumerate(values):
                if value < 1:
                    raise SpecError(f"{name}[{i}]", f"must be at least 1, got {value}")
        if not self.dtype_pairs:
            raise SpecError("weight_dtypes", "needs at least one format")
        if not (self.headroom >= 0 and math.isfinite(self.headroom)):
            raise SpecError("headroom", f"must not be negative, got {self.headroom}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise SpecError("gpu_memory_utilization", "must be in (0, 1]")
        for name, value, least in (
            ("gpus_per_node", self.gpus_per_node, 1),
            ("block_tokens", self.block_tokens, 1),
            ("probe_requests", self.probe_requests, 100),
            ("confirm_requests", self.confirm_requests, 0),
            ("seed", self.seed, 0),
            ("max_plans", self.max_plans, 1),
            ("max_simulated_steps", self.max_simulated_steps, 1),
        ):
            if value < least:
                raise SpecError(name, f"must be at least {least}, got {value}")
