"""`POST /v1/simulations`: one replica serving a workload, simulated step by step.
Times in ms unless the name says `_s`; rates per second."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.engine.simulation import PrefixCache
from app.engine.simulation.speculative import DraftMethod, SpeculativeDecoding
from app.errors import spec_errors
from app.simulations.service import (
    MAX_ARRIVAL_S,
    MAX_SIMULATED_STEPS,
    MIN_REQUESTS_PER_S,
    HistogramQuery,
    LengthsQuery,
    PercentilesQuery,
    PoissonQuery,
    SchedulerChoice,
    SimulationQuery,
)
from app.targets.schemas import TargetEcho, TargetRequest
from app.web.schemas import Input, Lax

__all__ = [
    "MAX_REQUESTS",
    "LatencyPercentiles",
    "LengthDistribution",
    "QueuePoint",
    "SchedulerSettings",
    "SimulationRequest",
    "SimulationResponse",
    "SimulationSlo",
    "TraceRow",
    "Workload",
]

MAX_REQUESTS = 200_000
"""Most requests one simulation serves (a trace's rows or `num_requests`)."""
_WORK_LIMIT = (
    f"A run may take at most {MAX_SIMULATED_STEPS:,} forward steps (seconds to tens of seconds "
    "of CPU); a workload that needs more is a 422, before it runs when its lengths already show "
    "it (decode tokens over max_num_seqs, all tokens over max_num_batched_tokens)."
)
_MAX_TOKENS = 2**24

TraceRow = Annotated[
    tuple[
        Annotated[float, Field(ge=0, le=MAX_ARRIVAL_S, allow_inf_nan=False)],
        Annotated[int, Field(ge=1, le=_MAX_TOKENS)],
        Annotated[int, Field(ge=1, le=_MAX_TOKENS)],
    ],
    Lax,
]
"""(arrival_s, prompt_tokens, output_tokens): a JSON array of three numbers. Arrivals at most
1e9 s (float64 still resolves them to 0.1 us); lengths within the model's context."""


class LengthDistribution(Input):
    """Token lengths: three percentiles (`p50`, `p90`, `p99`; a log-normal through p50 and p90,
    another through p90 and p99 above), or a histogram (`edges_tokens`, `weights`; uniform within
    each bin). Give one shape, not both."""

    p50: float | None = Field(
        default=None, ge=1, le=_MAX_TOKENS, description="Median length, tokens.", examples=[2048]
    )
    p90: float | None = Field(
        default=None, ge=1, le=_MAX_TOKENS, description="90th percentile, tokens; >= p50."
    )
    p99: float | None = Field(
        default=None,
        ge=1,
        le=_MAX_TOKENS,
        description="99th percentile, tokens; >= p90, and within the model's context (samples "
        "beyond it are clamped to it).",
    )
    edges_tokens: list[Annotated[int, Field(ge=1, le=_MAX_TOKENS)]] | None = Field(
        default=None,
        min_length=2,
        max_length=1001,
        description="Histogram bin edges, strictly increasing: bin i is [edge i, edge i+1). "
        "The last edge less one may not exceed the model's context.",
    )
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="Relative weight of each bin (one fewer than the edges).",
    )

    @field_validator("p90")
    @classmethod
    def _p90_not_below_p50(cls, value: float | None, info: ValidationInfo) -> float | None:
        p50 = info.data.get("p50")
        if value is not None and p50 is not None and value < p50:
            raise ValueError(f"p90 {value:g} is below p50 {p50:g}")
        return value

    @field_validator("p99")
    @classmethod
    def _p99_not_below_p90(cls, value: float | None, info: ValidationInfo) -> float | None:
        p90 = info.data.get("p90")
        if value is not None and p90 is not None and value < p90:
            raise ValueError(f"p99 {value:g} is below p90 {p90:g}")
        return value

    @model_validator(mode="after")
    def _one_shape(self) -> LengthDistribution:
        percentiles = (self.p50, self.p90, self.p99)
        histogram = (self.edges_tokens, self.weights)
        has_percentiles = any(v is not None for v in percentiles)
        has_histogram = any(v is not None for v in histogram)
        if has_percentiles and has_histogram:
            raise ValueError("give percentiles (p50, p90, p99) or a histogram, not both")
        if has_histogram and None in histogram:
            raise ValueError("a histogram needs edges_tokens and weights")
        if not has_histogram and None in percentiles:
            raise ValueError("give all of p50, p90 and p99 (or edges_tokens and weights)")
        return self

    def query(self) -> LengthsQuery:
        """The shape, typed: what `app.simulations.service.length_distribution` reads."""
        if self.edges_tokens is not None and self.weights is not None:
            return HistogramQuery(tuple(self.edges_tokens), tuple(self.weights))
        if self.p50 is None or self.p90 is None or self.p99 is None:  # refused in validation
            raise ValueError("give all of p50, p90 and p99")
        return PercentilesQuery(self.p50, self.p90, self.p99)


class Workload(Input):
    """Requests with lengths drawn from the two distributions, arriving as a Poisson process at
    `requests_per_s` (open loop) or sent by `concurrency` users, each sending its next request
    `think_time_s` after its last finished (closed loop, as genai-perf, AIPerf, GuideLLM and
    `vllm bench serve --max-concurrency` run). Give exactly one of the two."""

    requests_per_s: float | None = Field(
        default=None,
        ge=MIN_REQUESTS_PER_S,
        le=1e6,
        allow_inf_nan=False,
        description=f"Open loop: the arrival rate, at least {MIN_REQUESTS_PER_S:g}.",
        examples=[5.0],
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description=(
            "Closed loop: users sending requests back to back (the first all at once); the "
            "answer's `requests_per_s` is the throughput the loop reaches."
        ),
    )
    think_time_s: float = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="Closed loop: each user's pause between a finish and its next request.",
    )
    num_requests: int = Field(
        default=3000,
        ge=1,
        le=MAX_REQUESTS,
        description=f"How many requests to simulate. {_WORK_LIMIT}",
    )
    prompt_tokens: LengthDistribution = Field(description="Prompt lengths.")
    output_tokens: LengthDistribution = Field(
        description="Output lengths, the first token included."
    )

    @model_validator(mode="after")
    def _one_load(self) -> Workload:
        if (self.requests_per_s is None) == (self.concurrency is None):
            raise ValueError(
                "give requests_per_s (open loop) or concurrency (closed loop), one of the two"
            )
        if self.think_time_s and self.concurrency is None:
            raise ValueError("think_time_s applies to a closed loop (concurrency) only")
        return self

    def query(self) -> PoissonQuery:
        return PoissonQuery(
            requests_per_s=self.requests_per_s,
            concurrency=self.concurrency,
            think_time_s=self.think_time_s,
            num_requests=self.num_requests,
            prompt_tokens=self.prompt_tokens.query(),
            output_tokens=self.output_tokens.query(),
        )


_ENGINE_DEFAULT = (
    "Default: the engine's own for this GPU (vLLM V1, SGLang, TensorRT-LLM; see "
    "docs/model.md), or Ridgeline's ({}) with the roofline."
)


class SchedulerSettings(Input):
    """The serving engine's scheduler, named as vLLM names its flags. A setting left out is
    the timing engine's own default on this GPU."""

    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="Most sequences running at once. " + _ENGINE_DEFAULT.format(256),
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=1,
        le=_MAX_TOKENS,
        description=(
            "Token budget of one step: the prefill chunk size (at least max_num_seqs). "
            + _ENGINE_DEFAULT.format(2048)
        ),
    )
    enable_chunked_prefill: bool | None = Field(
        default=None,
        description=(
            "Split long prompts into chunks that share steps with decodes. "
            + _ENGINE_DEFAULT.format("on")
        ),
    )
    long_prefill_token_threshold: int = Field(
        default=0,
        ge=0,
        le=_MAX_TOKENS,
        description="Cap on one request's chunk per step (0: none), leaving budget for others.",
    )

    def config(self) -> SchedulerChoice:
        """The settings given, the rest left to the engine's defaults."""
        return SchedulerChoice(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            enable_chunked_prefill=self.enable_chunked_prefill,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
        )


class SchedulerUsed(BaseModel):
    """The scheduler a simulation ran."""

    max_num_seqs: int = Field(description="Most sequences running at once.")
    max_num_batched_tokens: int = Field(description="Token budget of one step.")
    enable_chunked_prefill: bool = Field(description="Chunked prefill on.")
    long_prefill_token_threshold: int = Field(description="Cap on one request's chunk.")


class SimulationSlo(Input):
    """Objectives for goodput: the requests meeting both, per second."""

    ttft_ms: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="Time to first token objective."
    )
    tpot_ms: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="Time per output token objective."
    )


class PrefixCacheSettings(Input):
    """Automatic prefix caching: a shared system prompt, or a hit rate (give one)."""

    shared_prefix_tokens: int = Field(
        default=0,
        ge=0,
        le=2**24,
        description=(
            "Every prompt starts with these tokens (a system prompt): computed by the first "
            "request, then found cached in whole blocks and held once."
        ),
    )
    hit_rate: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of each prompt found cached in whole blocks (multi-turn chat).",
    )

    def cache(self) -> PrefixCache:
        with spec_errors():
            return PrefixCache(self.shared_prefix_tokens, self.hit_rate)


class SpeculativeSettings(Input):
    """Speculative decoding: who drafts, how many tokens, how many are accepted."""

    method: Literal["mtp", "draft"] = Field(
        description=(
            "`mtp`: the model's own multi-token-prediction layers (DeepSeek-V3/R1); `draft`: "
            "a separate draft model from the catalog (`draft_model`)."
        )
    )
    num_draft_tokens: int = Field(ge=1, le=16, description="Tokens proposed per step, k.")
    mean_accepted_tokens: float = Field(
        ge=0,
        le=16,
        description=(
            "Draft tokens accepted per verify step on average (at most k); a step emits these "
            "and one of the target's own."
        ),
    )
    draft_model: str | None = Field(
        default=None, description="Catalog id of the draft model, for `draft`."
    )

    def spec(self) -> SpeculativeDecoding:
        with spec_errors():
            return SpeculativeDecoding(
                DraftMethod(self.method), self.num_draft_tokens, self.mean_accepted_tokens
            )


class SimulationRequest(TargetRequest):
    """A model on a GPU, its scheduler, and what it serves: a `workload` or a `trace`."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "llama-3-8b",
                    "gpu": "h100-sxm5-80gb",
                    "scheduler": {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
                    "workload": {
                        "requests_per_s": 8.0,
                        "num_requests": 2000,
                        "prompt_tokens": {"p50": 1024, "p90": 3000, "p99": 6000},
                        "output_tokens": {"p50": 200, "p90": 500, "p99": 1000},
                    },
                    "slo": {"ttft_ms": 1000, "tpot_ms": 50},
                }
            ]
        }
    )

    seed: int = Field(
        default=0, ge=0, le=2**63 - 1, description="Same seed, same requests, same result."
    )
    scheduler: SchedulerSettings = Field(
        default_factory=SchedulerSettings, description="Scheduler settings."
    )
    workload: Workload | None = Field(
        default=None, description="Poisson traffic; give this or `trace`."
    )
    trace: list[TraceRow] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REQUESTS,
        description="Requests as [arrival_s, prompt_tokens, output_tokens] rows, in any order. "
        f"{_WORK_LIMIT}",
        examples=[[[0.0, 2048, 256], [0.1, 512, 128]]],
    )
    slo: SimulationSlo | None = Field(default=None, description="Objectives for goodput.")
    prefix_cache: PrefixCacheSettings | None = Field(
        default=None,
        description="Automatic prefix caching (vLLM's --enable-prefix-caching); null: off.",
    )
    speculative: SpeculativeSettings | None = Field(
        default=None,
        description=(
            "Speculative decoding: a decode step verifies k drafted tokens per sequence and "
            "emits the accepted ones plus one; its KV pool loses the drafter's weights."
        ),
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Share of GPU memory the engine may use."
    )
    block_tokens: int = Field(default=16, ge=1, le=1024, description="KV-cache block size.")
    kv_capacity_tokens: int | None = Field(
        default=None,
        ge=1,
        le=2**40,
        description="KV cache of the replica in tokens, instead of the memory plan's.",
    )

    @model_validator(mode="after")
    def _workload_or_trace(self) -> SimulationRequest:
        if (self.workload is None) == (self.trace is None):
            raise ValueError("give exactly one of workload and trace")
        return self

    def query(self) -> SimulationQuery:
        """The request as `app.simulations.service.prepare_simulation` takes it."""
        slo = self.slo or SimulationSlo()
        return SimulationQuery(
            target=self.target_query(),
            scheduler=self.scheduler.config(),
            workload=self.workload.query() if self.workload else None,
            trace_rows=self.trace,
            seed=self.seed,
            prefix_cache=self.prefix_cache.cache() if self.prefix_cache else None,
            speculative=self.speculative.spec() if self.speculative else None,
            draft_model=self.speculative.draft_model if self.speculative else None,
            ttft_slo_ms=slo.ttft_ms,
            tpot_slo_ms=slo.tpot_ms,
            gpu_memory_utilization=self.gpu_memory_utilization,
            block_tokens=self.block_tokens,
            kv_capacity_override_tokens=self.kv_capacity_tokens,
        )


class LatencyPercentiles(BaseModel):
    """A latency over the requests (ITL: over every token gap), milliseconds."""

    p50: float = Field(description="Median.")
    p90: float = Field(description="90th percentile.")
    p99: float = Field(description="99th percentile.")
    mean: float = Field(description="Mean.")
    max: float = Field(description="Largest.")


class QueuePoint(BaseModel):
    """The replica's queue during the step running at `time_s`."""

    time_s: float = Field(description="Seconds since the first arrival.")
    waiting_requests: int = Field(description="Arrived, not yet admitted.")
    running_requests: int = Field(description="Admitted, not finished.")


class SimulationResponse(BaseModel):
    """What the simulated replica did. Rates are per second of makespan (first arrival to last
    token)."""

    target: TargetEcho = Field(description="What was simulated, resolved.")
    scheduler: SchedulerUsed = Field(
        description="The scheduler settings used: those given, the engine's defaults for the rest."
    )
    kv_capacity_tokens: int = Field(description="The replica's KV cache, tokens.")
    num_requests: int = Field(description="Requests in the workload or trace.")
    ttft_ms: LatencyPercentiles = Field(description="Time to first token.")
    tpot_ms: LatencyPercentiles = Field(
        description="Time per output token: (e2e - TTFT) / (T - 1), requests of T > 1 tokens."
    )
    itl_ms: LatencyPercentiles = Field(description="Inter-token latency, every gap.")
    e2e_ms: LatencyPercentiles = Field(description="Arrival to last token.")
    throughput_tokens_per_s: float = Field(description="Output tokens per second.")
    requests_per_s: float = Field(description="Completed requests per second.")
    goodput_requests_per_s: float = Field(
        description="Completed requests meeting both SLOs (all completed when none is given)."
    )
    saturated: bool = Field(description="The backlog grows without bound: arrivals outpace it.")
    backlog_growth_requests_per_s: float = Field(
        description="Arrivals minus completions per second over the second half of arrivals."
    )
    completed_requests: int = Field(description="Requests served.")
    rejected_requests: int = Field(description="Requests the KV cache could never hold.")
    preemptions: int = Field(description="Requests evicted for KV space and recomputed.")
    steps: int = Field(description="Forward steps run.")
    makespan_s: float = Field(description="First arrival to last token.")
    mean_requests_in_system: float = Field(description="Time average of waiting + running.")
    mean_waiting_requests: float = Field(description="Time average of waiting requests.")
    max_waiting_requests: int = Field(description="Longest queue.")
    max_running_requests: int = Field(description="Largest running batch.")
    queue: list[QueuePoint] = Field(description="The queue over the run, at most 200 samples.")
