"""`POST /v1/simulations`: one replica serving a workload, simulated step by step.
Times in ms unless the name says `_s`; rates per second."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.engine.datasets import Dataset
from app.engine.simulation import KvLink, PrefixCache, SchedulerConfig
from app.engine.simulation.disaggregated import NDR_PORT_BYTES_PER_S, NIXL_TRANSFER_LATENCY_S
from app.engine.simulation.speculative import DraftMethod, SpeculativeDecoding
from app.errors import spec_errors
from app.formats.specs import SpecSchema, derived_from
from app.simulations.service import (
    MAX_ARRIVAL_S,
    MAX_SIMULATED_STEPS,
    MIN_REQUESTS_PER_S,
    DatasetQuery,
    DisaggregatedQuery,
    HistogramQuery,
    LengthsQuery,
    PercentilesQuery,
    PoissonQuery,
    PoolQuery,
    SimulationQuery,
    SimulationRun,
)
from app.simulations.sweeps import CHOSEN_SPAN, MAX_SWEEP_POINTS, SweepAxis, SweepQuery, SweepRun
from app.targets.schemas import TargetEcho, TargetRequest
from app.targets.service import SIMULATED_METRICS, SIMULATED_RECORD_METRICS, simulated_regime
from app.validation.schemas import ErrorInterval, error_interval_models, error_intervals_field
from app.web.schemas import Input, Lax, Output

__all__ = [
    "MAX_REQUESTS",
    "DisaggregatedSettings",
    "DisaggregatedUsed",
    "KvLinkSettings",
    "LatencyPercentiles",
    "LengthDistribution",
    "PoolSettings",
    "PoolUsed",
    "QueuePoint",
    "SchedulerSettings",
    "SimulationRequest",
    "SimulationResponse",
    "SimulationSlo",
    "SweepPoint",
    "SweepRequest",
    "SweepResponse",
    "SweepWorkload",
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
    another through p90 and p99 above), a histogram (`edges_tokens`, `weights`; uniform within
    each bin), or a named `dataset` as `vllm bench serve --dataset-name` draws it (`sharegpt`,
    `sonnet`, `random`; `mean_tokens` and `range_ratio` for the synthetic ones). Give one shape.
    Output lengths are the tokens generated: a request that stops early (at its end-of-sequence
    token, before `max_tokens`) is a shorter output, as ShareGPT's published outputs are."""

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

    dataset: Annotated[Dataset, Lax] | None = Field(
        default=None,
        description="A named shape with published lengths: `sharegpt` (vLLM's filtered "
        "ShareGPT: prompts 4-1,024 tokens, mean 215; outputs as generated, mean 197), `sonnet` "
        "(prompts 550, outputs 150 tokens) or `random` (uniform around `mean_tokens`). The "
        "field says which side: prompt_tokens draws prompts, output_tokens outputs.",
    )
    mean_tokens: int | None = Field(
        default=None,
        ge=1,
        le=_MAX_TOKENS,
        description="`sonnet` and `random`: vLLM's --{dataset}-input-len (for prompt_tokens) or "
        "--{dataset}-output-len (for output_tokens); default vLLM's (sonnet 550/150, random "
        "1024/128).",
    )
    range_ratio: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="`random`: vLLM's --random-range-ratio r; lengths uniform over the whole "
        "numbers floor(n(1-r)) to ceil(n(1+r)). Default 0: every length n.",
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
        has_dataset = self.dataset is not None
        if has_percentiles + has_histogram + has_dataset > 1:
            raise ValueError(
                "give percentiles (p50, p90, p99), a histogram or a dataset, one of them"
            )
        if not has_dataset and (self.mean_tokens is not None or self.range_ratio is not None):
            raise ValueError("mean_tokens and range_ratio go with a dataset")
        if has_dataset:
            if self.dataset is Dataset.SHAREGPT and (
                self.mean_tokens is not None or self.range_ratio is not None
            ):
                raise ValueError("sharegpt's lengths are the data's: no mean_tokens or range_ratio")
            if self.dataset is Dataset.SONNET and self.range_ratio is not None:
                raise ValueError("range_ratio goes with the random dataset only")
            return self
        if has_histogram and None in histogram:
            raise ValueError("a histogram needs edges_tokens and weights")
        if not has_histogram and None in percentiles:
            raise ValueError(
                "give all of p50, p90 and p99 (or edges_tokens and weights, or a dataset)"
            )
        return self

    def query(self) -> LengthsQuery:
        """The shape, typed: what `app.simulations.service.length_distribution` reads."""
        if self.dataset is not None:
            return DatasetQuery(self.dataset, self.mean_tokens, self.range_ratio or 0.0)
        if self.edges_tokens is not None and self.weights is not None:
            return HistogramQuery(tuple(self.edges_tokens), tuple(self.weights))
        if self.p50 is None or self.p90 is None or self.p99 is None:  # refused in validation
            raise ValueError("give all of p50, p90 and p99")
        return PercentilesQuery(self.p50, self.p90, self.p99)


class RequestLengths(Input):
    """How many requests, and their lengths: two distributions or a named dataset."""

    num_requests: int = Field(
        default=3000,
        ge=1,
        le=MAX_REQUESTS,
        description=f"How many requests to simulate. {_WORK_LIMIT}",
    )
    dataset: Annotated[Dataset, Lax] | None = Field(
        default=None,
        description="Both lengths from a named dataset as `vllm bench serve --dataset-name` "
        "draws it, at vLLM's default lengths: `sharegpt`, `sonnet` or `random` (a "
        "prompt_tokens or output_tokens given beside it replaces that side).",
        examples=["sharegpt"],
    )
    prompt_tokens: LengthDistribution | None = Field(
        default=None, description="Prompt lengths (required without a dataset)."
    )
    output_tokens: LengthDistribution | None = Field(
        default=None,
        description="Output lengths as generated, the first token included; early stops "
        "(end-of-sequence before max_tokens) are shorter outputs (required without a dataset).",
    )

    @model_validator(mode="after")
    def _lengths(self) -> RequestLengths:
        if self.dataset is not None:
            self.prompt_tokens = self.prompt_tokens or LengthDistribution(dataset=self.dataset)
            self.output_tokens = self.output_tokens or LengthDistribution(dataset=self.dataset)
        if self.prompt_tokens is None or self.output_tokens is None:
            raise ValueError("give prompt_tokens and output_tokens, or a dataset")
        return self

    def lengths_query(self) -> tuple[LengthsQuery, LengthsQuery]:
        """(prompt, output) lengths, typed."""
        if self.prompt_tokens is None or self.output_tokens is None:  # refused in validation
            raise ValueError("give prompt_tokens and output_tokens, or a dataset")
        return self.prompt_tokens.query(), self.output_tokens.query()


_THINK_TIME = "Closed loop: each user's pause between a finish and its next request."


class Workload(RequestLengths):
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
    think_time_s: float = Field(default=0.0, ge=0, le=3600, description=_THINK_TIME)

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
        prompts, outputs = self.lengths_query()
        return PoissonQuery(
            requests_per_s=self.requests_per_s,
            concurrency=self.concurrency,
            think_time_s=self.think_time_s,
            num_requests=self.num_requests,
            prompt_tokens=prompts,
            output_tokens=outputs,
        )


@derived_from(SchedulerConfig, exclude=("unchunked_policy",), partial=True)
class SchedulerSettings(SpecSchema, Input):
    """The serving engine's scheduler, its settings named as vLLM names its flags. A setting
    left out (or null) is the engine's own default on this GPU (`target.engine`: vLLM, SGLang,
    TensorRT-LLM by version, see docs/model.md; Ridgeline's 256 sequences and 2,048-token chunks
    for the roofline); the answer's `scheduler` shows the settings run."""

    def given(self) -> dict[str, Any]:
        """The settings given, by `SchedulerConfig` field: what the engine's policy completes."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


@derived_from(SchedulerConfig, required=True, examples=False)
class SchedulerUsed(SpecSchema, Output):
    """The scheduler a run used: the settings given, the engine's defaults for the rest."""


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


class PoolSettings(Input):
    """One pool of a disaggregated deployment: its replicas, each as the request's replica
    (GPU, formats, pp, dp, ep, scheduler), at its own tp if given."""

    replicas: int = Field(
        default=1,
        ge=1,
        le=4096,
        description="Replicas behind the pool's balancer: each serves a k-th of the traffic.",
    )
    tp: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="The pool's tensor-parallel degree; default the request's `tp`.",
    )

    def query(self) -> PoolQuery:
        return PoolQuery(self.replicas, self.tp)


class KvLinkSettings(Input):
    """The link each request's KV crosses from its prefill replica to its decode replica: one
    transfer per request of `latency_s + bytes / bandwidth_bytes_per_s`, transfers not
    contending (each GPU sends its share of the KV over its own NIC)."""

    bandwidth_bytes_per_s: float = Field(
        default=NDR_PORT_BYTES_PER_S,
        gt=0,
        le=1e13,
        allow_inf_nan=False,
        description=(
            "Bytes per second one GPU of a prefill replica sends. Default "
            f"{NDR_PORT_BYTES_PER_S / 1e9:g} GB/s: one 400 Gb/s NDR InfiniBand port (NVIDIA "
            "ConnectX-7 datasheet), the NIC per GPU of an HGX H100/H200/B200 node, over which "
            "NIXL writes the KV with GPUDirect RDMA."
        ),
    )
    latency_s: float = Field(
        default=NIXL_TRANSFER_LATENCY_S,
        ge=0,
        le=60,
        allow_inf_nan=False,
        description=(
            f"Seconds each transfer takes beside its bytes. Default {NIXL_TRANSFER_LATENCY_S:g} "
            "s, an assumption, not a published figure: the RDMA write starts in microseconds, "
            "but a NIXL transfer also waits for the decode side's block allocation and a "
            "completion notice (vLLM's NixlConnector); set it from a measurement."
        ),
    )

    def link(self) -> KvLink:
        with spec_errors("disaggregated.link"):
            return KvLink(self.bandwidth_bytes_per_s, self.latency_s)


class DisaggregatedSettings(Input):
    """Separate prefill and decode pools (vLLM's --kv-transfer-config with NIXL, SGLang's and
    Dynamo's PD mode): the prefill pool computes each prompt and its first token, the prompt's
    KV crosses the link, the decode pool generates the rest."""

    prefill: PoolSettings = Field(
        default_factory=PoolSettings, description="The pool that computes prompts."
    )
    decode: PoolSettings = Field(
        default_factory=PoolSettings, description="The pool that generates the outputs."
    )
    link: KvLinkSettings = Field(
        default_factory=KvLinkSettings, description="The KV transfer between the pools."
    )

    def query(self) -> DisaggregatedQuery:
        return DisaggregatedQuery(self.prefill.query(), self.decode.query(), self.link.link())


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
        description="KV cache of the replica in tokens, instead of the memory plan's (with "
        "`disaggregated`: of each replica of both pools).",
    )
    disaggregated: DisaggregatedSettings | None = Field(
        default=None,
        description=(
            "Serve with separate prefill and decode pools instead of one replica: TTFT from "
            "the prefill pool, TPOT and ITL from the decode pool with the KV transfer in the "
            "gap before each request's second token. Open-loop traffic only; not with "
            "`prefix_cache` or `speculative`. null: one aggregated replica."
        ),
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
            scheduler=self.scheduler.given(),
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
            disaggregated=self.disaggregated.query() if self.disaggregated else None,
        )


class _Summary(BaseModel):
    """A quantity over the requests: its percentiles, mean and largest value."""

    p50: float = Field(description="Median.")
    p90: float = Field(description="90th percentile.")
    p99: float = Field(description="99th percentile.")
    mean: float = Field(description="Mean.")
    max: float = Field(description="Largest.")


class LatencyPercentiles(_Summary):
    """A latency over the requests (ITL: over every token gap), milliseconds."""


class QueuePoint(BaseModel):
    """The replica's queue during the step running at `time_s`."""

    time_s: float = Field(description="Seconds since the first arrival.")
    waiting_requests: int = Field(description="Arrived, not yet admitted.")
    running_requests: int = Field(description="Admitted, not finished.")


class BytePercentiles(_Summary):
    """A size over the requests, bytes."""


class PoolUsed(BaseModel):
    """One pool of a disaggregated run: how it was built, and what one of its replicas did at
    its share of the traffic (a k-th of the rate)."""

    replicas: int = Field(description="Replicas in the pool.")
    tp: int = Field(description="Tensor-parallel degree of each replica.")
    gpus_per_replica: int = Field(description="tp x dp x pp.")
    kv_capacity_tokens: int = Field(description="KV cache of each replica, tokens.")
    requests_per_s: float = Field(description="Requests one replica completed per second.")
    saturated: bool = Field(description="One replica's backlog grows without bound.")
    backlog_growth_requests_per_s: float = Field(
        description="Arrivals minus completions per second at one replica, over the second "
        "half of its arrivals."
    )
    steps: int = Field(description="Forward steps one replica ran.")
    preemptions: int = Field(description="Times a running request was evicted for KV blocks.")
    makespan_s: float = Field(description="One replica's first arrival to its last token.")
    mean_requests_in_system: float = Field(description="Time average of waiting + running.")
    mean_waiting_requests: float = Field(description="Time average of waiting requests.")
    max_waiting_requests: int = Field(description="Longest queue.")
    max_running_requests: int = Field(description="Largest running batch.")


class KvLinkUsed(BaseModel):
    """The link the KV crossed."""

    bandwidth_bytes_per_s: float = Field(description="Bytes per second one GPU sends.")
    latency_s: float = Field(description="Seconds each transfer takes beside its bytes.")


class DisaggregatedUsed(BaseModel):
    """A disaggregated run's pools and KV transfers."""

    prefill: PoolUsed = Field(description="The prefill pool: its requests end at the first token.")
    decode: PoolUsed = Field(
        description="The decode pool: the same figures as the answer's own (one decode replica)."
    )
    gpus_total: int = Field(description="GPUs of both pools.")
    link: KvLinkUsed = Field(description="The link used.")
    kv_bytes_per_token: float = Field(
        description="KV bytes one prompt token takes on one GPU of a prefill replica, from the "
        "model's KV format (2 x layers x KV heads per GPU x head dim x bytes; MLA: its latent)."
    )
    transfer_bytes: BytePercentiles = Field(
        description="Bytes each request's KV takes on one GPU: prompt tokens x kv_bytes_per_token."
    )
    transfer_ms: LatencyPercentiles = Field(
        description="Each request's transfer: latency_s + transfer bytes / bandwidth."
    )


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
    preemptions: int = Field(
        description="Times a running request was evicted for KV blocks (the newest first, as "
        "vLLM V1 does) and later recomputed: its prompt plus the tokens it had generated."
    )
    steps: int = Field(description="Forward steps run.")
    makespan_s: float = Field(description="First arrival to last token.")
    mean_requests_in_system: float = Field(description="Time average of waiting + running.")
    mean_waiting_requests: float = Field(description="Time average of waiting requests.")
    max_waiting_requests: int = Field(description="Longest queue.")
    max_running_requests: int = Field(description="Largest running batch.")
    queue: list[QueuePoint] = Field(description="The queue over the run, at most 200 samples.")
    expected_error_pct: dict[str, float | None] = Field(
        description="By metric (`ttft`, `tpot`), the spread of this GPU's validation residuals "
        "of the phase it comes from (prefill, decode), never below the mean absolute error "
        "published runs of the model's family showed: how far to trust the figures. Null, "
        "with the reason in `warnings`, where none is known."
    )
    error_interval_pct: dict[str, ErrorInterval | None] = error_intervals_field(
        "metric (`ttft`, `tpot`)"
    )
    warnings: list[str] = Field(
        description="What to read the answer with (an engine whose steps the roofline timed)."
    )
    disaggregated: DisaggregatedUsed | None = Field(
        default=None,
        description=(
            "A disaggregated run's pools and transfers; null for one aggregated replica. With "
            "it, the latencies above are the requests' end to end (TTFT from the prefill pool, "
            "TPOT, ITL and E2E through the decode pool); `target`, `kv_capacity_tokens`, the "
            "rates, counts and queue are one decode replica's."
        ),
    )


class SweepWorkload(RequestLengths):
    """The requests every point of a sweep serves; the sweep gives the load."""

    num_requests: int = Field(
        default=3000,
        ge=1,
        le=MAX_REQUESTS,
        description="Requests per point (the same ones at every load; a few thousand show the "
        "knee, a few hundred mostly the warm-up). The steps of all points together are bounded "
        "as one simulation's are.",
    )
    think_time_s: float = Field(default=0.0, ge=0, le=3600, description=_THINK_TIME)


class SweepRequest(TargetRequest):
    """A replica simulated at several loads: the rates (open loop) or users (closed loop)
    given, or `points` of them chosen up to saturation."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "llama-3-8b",
                    "gpu": "h100-sxm5-80gb",
                    "workload": {"dataset": "sharegpt", "num_requests": 3000},
                    "slo": {"ttft_ms": 500, "tpot_ms": 50},
                    "points": 8,
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
    workload: SweepWorkload = Field(description="The requests each point serves.")
    requests_per_s: (
        list[Annotated[float, Field(ge=MIN_REQUESTS_PER_S, le=1e6, allow_inf_nan=False)]] | None
    ) = Field(
        default=None,
        min_length=1,
        max_length=MAX_SWEEP_POINTS,
        description="Open loop: the arrival rates to simulate.",
        examples=[[2.0, 4.0, 8.0, 16.0]],
    )
    concurrency: list[Annotated[int, Field(ge=1, le=65536)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SWEEP_POINTS,
        description="Closed loop: the numbers of users to simulate.",
    )
    axis: Annotated[SweepAxis, Lax] = Field(
        default=SweepAxis.REQUESTS_PER_S,
        description="What to vary when neither list is given: `requests_per_s` (rates from "
        f"{CHOSEN_SPAN[0]:g} to {CHOSEN_SPAN[1]:g} times the lowest rate that saturates, "
        "found by simulation) or `concurrency` (users from 1 to twice max_num_seqs, at most "
        "num_requests, evenly on a log scale).",
    )
    points: int = Field(
        default=8, ge=2, le=MAX_SWEEP_POINTS, description="How many loads to choose."
    )
    slo: SimulationSlo | None = Field(
        default=None, description="Objectives: drawn on the chart, and each point's goodput."
    )
    prefix_cache: PrefixCacheSettings | None = Field(
        default=None, description="Automatic prefix caching; null: off."
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
    def _one_axis(self) -> SweepRequest:
        if self.requests_per_s is not None and self.concurrency is not None:
            raise ValueError("give requests_per_s or concurrency, not both")
        if (
            self.workload.think_time_s
            and self.concurrency is None
            and (self.requests_per_s is not None or self.axis is SweepAxis.REQUESTS_PER_S)
        ):
            raise ValueError("think_time_s applies to a closed loop (concurrency) only")
        return self

    def query(self) -> SweepQuery:
        """The sweep as `app.simulations.sweeps.prepare_sweep` takes it."""
        slo = self.slo or SimulationSlo()
        prompts, outputs = self.workload.lengths_query()
        workload = PoissonQuery(
            requests_per_s=1.0,
            num_requests=self.workload.num_requests,
            prompt_tokens=prompts,
            output_tokens=outputs,
            think_time_s=self.workload.think_time_s,
        )
        base = SimulationQuery(
            target=self.target_query(),
            scheduler=self.scheduler.given(),
            workload=workload,
            trace_rows=None,
            seed=self.seed,
            prefix_cache=self.prefix_cache.cache() if self.prefix_cache else None,
            ttft_slo_ms=slo.ttft_ms,
            tpot_slo_ms=slo.tpot_ms,
            gpu_memory_utilization=self.gpu_memory_utilization,
            block_tokens=self.block_tokens,
            kv_capacity_override_tokens=self.kv_capacity_tokens,
        )
        if self.requests_per_s is not None:
            return SweepQuery(base, SweepAxis.REQUESTS_PER_S, 0, rates=tuple(self.requests_per_s))
        if self.concurrency is not None:
            return SweepQuery(base, SweepAxis.CONCURRENCY, 0, users=tuple(self.concurrency))
        return SweepQuery(base, self.axis, self.points)


class SweepPoint(BaseModel):
    """One load of a sweep and what the replica did under it."""

    requests_per_s_offered: float | None = Field(
        description="Open loop: the arrival rate simulated; null in a closed loop."
    )
    concurrency: int | None = Field(
        description="Closed loop: the users simulated; null in an open loop."
    )
    requests_per_s: float = Field(description="Completed requests per second.")
    ttft_ms: LatencyPercentiles = Field(description="Time to first token.")
    tpot_ms: LatencyPercentiles = Field(description="Time per output token.")
    e2e_ms: LatencyPercentiles = Field(description="Arrival to last token.")
    throughput_tokens_per_s: float = Field(description="Output tokens per second.")
    goodput_requests_per_s: float = Field(
        description="Completed requests meeting both SLOs (all completed when none is given)."
    )
    saturated: bool = Field(description="The backlog grows without bound at this load.")
    preemptions: int = Field(
        description="Times a running request was evicted for KV blocks (the newest first, as "
        "vLLM V1 does) and later recomputed: its prompt plus the tokens it had generated."
    )
    within_slo: bool | None = Field(
        description="p99 TTFT and p99 TPOT within the SLOs given, and not saturated; null "
        "without SLOs."
    )


class SweepResponse(BaseModel):
    """Latency against load, one point per load, in the order given (chosen: increasing)."""

    target: TargetEcho = Field(description="What was simulated, resolved.")
    scheduler: SchedulerUsed = Field(description="The scheduler settings used.")
    kv_capacity_tokens: int = Field(description="The replica's KV cache, tokens.")
    num_requests: int = Field(description="Requests served at each point.")
    axis: SweepAxis = Field(description="What the sweep varied.")
    saturation_requests_per_s: float | None = Field(
        description="The lowest arrival rate at which a search by simulation found the "
        "backlog growing: the chosen rates run up to it. Null when the loads were given or "
        "are users."
    )
    max_load_within_slo: float | None = Field(
        description="The largest load (rate or users) whose point is within the SLOs; null "
        "when none is, or no SLO was given."
    )
    points: list[SweepPoint] = Field(description="One per load.")
    expected_error_pct: dict[str, float | None] = Field(
        description="By metric (`ttft`, `tpot`), the spread of this GPU's validation residuals "
        "of the phase it comes from (prefill, decode), never below the mean absolute error "
        "published runs of the model's family showed: how far to trust the figures. Null, "
        "with the reason in `warnings`, where none is known."
    )
    error_interval_pct: dict[str, ErrorInterval | None] = error_intervals_field(
        "metric (`ttft`, `tpot`)"
    )
    warnings: list[str] = Field(
        description="What to read the answer with (an engine whose steps the roofline timed)."
    )

    @classmethod
    def of(cls, run: SweepRun, slo: SimulationSlo | None) -> SweepResponse:
        """The answer for `run`, judged against `slo`."""
        loads: list[tuple[float | None, int | None, SimulationRun]] = [
            (rate, None, simulated) for rate, simulated in run.runs
        ] + [(None, users, simulated) for users, simulated in run.user_runs]
        points = []
        for rate, users, simulated in loads:
            result = simulated.result
            within = None
            if slo is not None and (slo.ttft_ms is not None or slo.tpot_ms is not None):
                within = not result.saturated and all(
                    objective is None or value <= objective
                    for value, objective in (
                        (result.ttft_ms.p99, slo.ttft_ms),
                        (result.tpot_ms.p99, slo.tpot_ms),
                    )
                )
            points.append(
                SweepPoint(
                    requests_per_s_offered=rate,
                    concurrency=users,
                    requests_per_s=result.requests_per_s,
                    ttft_ms=LatencyPercentiles.model_validate(result.ttft_ms, from_attributes=True),
                    tpot_ms=LatencyPercentiles.model_validate(result.tpot_ms, from_attributes=True),
                    e2e_ms=LatencyPercentiles.model_validate(result.e2e_ms, from_attributes=True),
                    throughput_tokens_per_s=result.throughput_tokens_per_s,
                    goodput_requests_per_s=result.goodput_requests_per_s,
                    saturated=result.saturated,
                    preemptions=result.preemptions,
                    within_slo=within,
                )
            )
        passing: list[float] = [
            rate if rate is not None else float(users or 0)
            for (rate, users, _), point in zip(loads, points, strict=True)
            if point.within_slo
        ]
        errors, unknown = run.resolved.error_statement(SIMULATED_METRICS)
        saturated = any(simulated.result.saturated for _, _, simulated in loads)
        intervals, unbounded = run.resolved.error_intervals(
            SIMULATED_RECORD_METRICS, simulated_regime(saturated)
        )
        return cls(
            target=TargetEcho.model_validate(run.resolved.echo(), from_attributes=True),
            scheduler=SchedulerUsed.model_validate(run.scheduler, from_attributes=True),
            kv_capacity_tokens=run.kv_capacity_tokens,
            num_requests=run.num_requests,
            axis=run.axis,
            saturation_requests_per_s=run.saturation_requests_per_s,
            max_load_within_slo=max(passing) if passing else None,
            points=points,
            expected_error_pct=errors,
            error_interval_pct=error_interval_models(intervals),
            warnings=[*run.resolved.warnings, *unknown, *unbounded],
        )
