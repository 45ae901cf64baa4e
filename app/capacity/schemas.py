"""`POST /v1/capacity`: what one replica of a deployment sustains within SLOs, and how many
replicas an observed rate needs. Rates per second (per replica unless said), latencies in ms."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.catalog.schemas import ModelArchitecture
from app.engine.serving import ENGINE_PATTERN
from app.plans.schemas import Slo
from app.simulations.schemas import LengthDistribution
from app.targets.schemas import ENGINE_DESCRIPTION, Format
from app.validation.schemas import ErrorInterval, error_intervals_field
from app.web.schemas import CATALOG_REF, Input

__all__ = ["CapacityPredicted", "CapacityRequest", "CapacityResponse"]

DEPLOYMENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$"


class CapacityRequest(Input):
    """A deployment (model, GPU, layout, formats, scheduler, engine), its SLOs and its request
    mix; optionally the rate it now receives."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "llama-3-8b",
                    "gpu": "h100-sxm5-80gb",
                    "tp": 1,
                    "max_num_seqs": 256,
                    "chunk_tokens": 2048,
                    "prompt_tokens": {"p50": 2048, "p90": 2048, "p99": 2048},
                    "output_tokens": {"p50": 256, "p90": 256, "p99": 256},
                    "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 50},
                    "observed_requests_per_s": 40,
                }
            ]
        }
    )

    name: str | None = Field(
        default=None,
        pattern=DEPLOYMENT_NAME,
        description="The deployment's name: the `deployment` label of the Prometheus answer "
        "(default: model, GPU and layout, `llama-3-8b.h100-sxm5-80gb.tp1`).",
    )
    model: CATALOG_REF | ModelArchitecture = Field(
        description="A catalog model id, or an inline architecture.", examples=["llama-3-8b"]
    )
    gpu: CATALOG_REF = Field(description="A catalog GPU id.", examples=["h100-sxm5-80gb"])
    tp: int = Field(default=1, ge=1, le=256, description="Tensor-parallel degree.")
    pp: int = Field(default=1, ge=1, le=64, description="Pipeline stages.")
    dp: int = Field(
        default=1, ge=1, le=256, description="Attention data-parallel ranks (MoE), each of tp."
    )
    ep: int = Field(
        default=1, ge=1, le=1024, description="Expert parallelism: 1, or tp x dp (MoE)."
    )
    weight_dtype: Format | None = Field(
        default=None, description="Weight format; default: the model's checkpoint's."
    )
    kv_dtype: Format | None = Field(
        default=None,
        description="KV-cache format; default: what the engine serves the weights with (as "
        "`kv_dtype` of estimates).",
    )
    engine: str | None = Field(
        default=None,
        pattern=ENGINE_PATTERN,
        description=ENGINE_DESCRIPTION,
    )
    efficiency: Literal["calibrated", "ideal"] = Field(
        default="calibrated", description="Time steps with the GPU's calibration, or ideally."
    )
    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="Running sequences per data-parallel rank (lowered to chunk_tokens); "
        "default: the engine's own on this GPU.",
    )
    chunk_tokens: int | None = Field(
        default=None,
        ge=1,
        le=2**24,
        description="Prefill chunk: tokens per step, max_num_batched_tokens; default: the "
        "engine's own on this GPU.",
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Share of GPU memory the engine may use."
    )
    gpus_per_node: int = Field(default=8, ge=1, le=64, description="GPUs in one node.")
    prompt_tokens: LengthDistribution = Field(description="Prompt lengths.")
    output_tokens: LengthDistribution = Field(description="Output lengths, the first included.")
    slo: Slo = Field(description="The latency objectives, at the 99th percentile.")
    observed_requests_per_s: float | None = Field(
        default=None,
        ge=0,
        le=1e7,
        allow_inf_nan=False,
        description="The rate the whole deployment receives now: the answer adds the replicas "
        "it needs.",
    )
    headroom: float = Field(
        default=0.2, ge=0, le=10, description="Spare capacity: replicas carry rate x (1 + it)."
    )
    probe_requests: int = Field(
        default=3000,
        ge=500,
        le=20000,
        description="Requests per simulation probe, as the planner's `probe_requests`.",
    )
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="Seed of the probes' requests.")
    confidence: float = Field(
        default=0.9,
        ge=0.5,
        le=0.99,
        description=(
            "How sure to be that the SLOs hold: the rate (and `replicas_at_confidence`) at which "
            "they hold if real step times are as much slower than predicted as published runs "
            "of this kind of answer were at this quantile (`by_confidence`)."
        ),
    )


class ConfidentCapacity(BaseModel):
    """What one replica sustains with the SLOs holding at a confidence."""

    confidence: float = Field(description="The share of published runs of this kind covered.")
    slowdown: float = Field(
        description=(
            "Real step times over predicted ones at that quantile of how far published runs "
            "landed from answers of this kind (the larger of TTFT's and TPOT's)."
        )
    )
    requests_per_s_per_replica: float | None = Field(
        description=(
            "R(SLO / slowdown) / slowdown: a replica whose steps all take `slowdown` times as "
            "long serves a rate as the predicted one serves `slowdown` times it. Null: no load "
            "meets the SLOs that slow."
        )
    )
    replicas: int | None = Field(
        description="Replicas the observed rate needs at that rate (null without either)."
    )


class CapacityPredicted(BaseModel):
    """The simulated latencies of one replica at `requests_per_s_per_replica`."""

    requests_per_s_per_replica: float = Field(description="The rate simulated.")
    ttft_p50_ms: float = Field(description="Median time to first token.")
    ttft_p99_ms: float = Field(description="99th-percentile time to first token.")
    tpot_p50_ms: float = Field(description="Median time per output token.")
    tpot_p99_ms: float = Field(description="99th-percentile time per output token.")
    saturated: bool = Field(description="Whether the queue grows without bound there.")


class CapacityResponse(BaseModel):
    """What one replica sustains within the SLOs, and the replicas an observed rate needs."""

    deployment: str = Field(description="The deployment's name (the metric's label).")
    requests_per_s_per_replica: float = Field(
        description="The highest rate one replica sustains with the SLOs met (simulated)."
    )
    failing_requests_per_s_per_replica: float = Field(
        description="The lowest rate known to miss them (within 1 % above)."
    )
    analytic_max_requests_per_s_per_replica: float = Field(
        description="The analytic capacity bound: no simulation sustains more."
    )
    predicted: CapacityPredicted = Field(description="Latencies at the sustained rate.")
    observed_requests_per_s: float | None = Field(description="The rate given, if any.")
    headroom: float = Field(description="Spare capacity the replica count includes.")
    replicas: int | None = Field(
        description="ceil(observed x (1 + headroom) / requests_per_s_per_replica), at least 1; "
        "null without an observed rate."
    )
    requests_per_s_per_replica_range: list[float | None] | None = Field(
        default=None,
        description=(
            "[low, high]: the rate one replica sustains with the SLOs holding at 90 % and at "
            "10 % confidence (`by_confidence`); null where no published run informs it."
        ),
    )
    confidence: float = Field(default=0.9, description="The confidence asked for.")
    requests_per_s_per_replica_at_confidence: float | None = Field(
        default=None, description="The rate at `confidence` (`by_confidence`)."
    )
    replicas_at_confidence: int | None = Field(
        default=None,
        description="Replicas the observed rate needs at `confidence`; null without one.",
    )
    by_confidence: list[ConfidentCapacity] = Field(
        default_factory=list,
        description="The rate and replicas at 10 %, 50 %, 90 % and the asked confidence.",
    )
    kv_capacity_tokens: int = Field(description="KV cache of one replica, tokens.")
    engine: str = Field(
        description=(
            "The engine whose behaviour was simulated, `name@version` (`vllm@0.24.0`), or "
            "`roofline`; `warnings` says when the roofline timed a named engine's steps."
        )
    )
    basis: dict[str, str] = Field(
        description="What timed each op family: a profile (`profile <id>`) or the roofline."
    )
    max_num_seqs: int = Field(description="The batch cap simulated, per data-parallel rank.")
    chunk_tokens: int = Field(description="The token budget simulated (max_num_batched_tokens).")
    expected_error_pct: dict[str, float | None] = Field(
        description="By metric (`ttft`, `tpot`), the spread of the validation residuals of the "
        "phase it comes from, never below the mean absolute error published runs of the "
        "model's family showed: how far to trust the figures. Null, with the reason in "
        "`warnings`, where none is known."
    )
    error_interval_pct: dict[str, ErrorInterval | None] = error_intervals_field(
        "metric (`ttft`, `tpot`) of `predicted`"
    )
    warnings: list[str] = Field(
        default_factory=list, description="What the answer should be read with."
    )
    probe_requests: int = Field(description="Requests in each simulation probe.")
    simulations: int = Field(description="Simulation probes the search ran.")
    cached: bool = Field(description="Answered from the cache (simulated earlier).")
    reasons: list[str] = Field(description="Caveats of the replica (a KV-limited batch, ...).")
    metric: str = Field(description="The Prometheus metric of the sustained rate.")
