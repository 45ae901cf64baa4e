"""`/v1/plans`: capacity plans, asked for and stored. Costs in USD, rates per second, ms."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.catalog.schemas import ModelArchitecture
from app.engine.dtypes import DType
from app.engine.planning import (
    DEFAULT_CONFIRM_REQUESTS,
    DEFAULT_MAX_SIMULATED_STEPS,
    DEFAULT_PROBE_REQUESTS,
    DEFAULT_TP_CANDIDATES,
    MAX_CANDIDATES,
)
from app.engine.serving import ENGINE_PATTERN
from app.plans.queries import MAX_TRAFFIC_REQUESTS_PER_S, PlanQuery
from app.plans.repository import PlanRow
from app.simulations.schemas import MAX_REQUESTS, KvLinkSettings, LengthDistribution, TraceRow
from app.simulations.service import MIN_REQUESTS_PER_S
from app.targets.schemas import ENGINE_DESCRIPTION, Format, engine_query, model_query
from app.targets.service import EfficiencyMode
from app.validation.schemas import ErrorInterval, error_intervals_field
from app.web.schemas import CATALOG_REF, ENTRY_ID, Input, Page

__all__ = [
    "BucketLatency",
    "CandidateRead",
    "DisaggregatedRead",
    "LayoutRead",
    "NotPlannedExample",
    "NotPlannedGroup",
    "PlanAnswer",
    "PlanList",
    "PlanProblem",
    "PlanRead",
    "PlanRequest",
    "PlanSummary",
    "PredictedRead",
    "Slo",
    "Traffic",
    "TtftBucketSlo",
]

UsdPerGpuHour = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
MIN_TRACE_ROWS = 100
"""A trace's p99 needs at least 100 requests to have one above it."""


class Traffic(Input):
    """The whole deployment's traffic: a rate with length distributions (Poisson arrivals), or a
    trace (its arrival pattern is replayed, time-scaled to `requests_per_s` when given)."""

    requests_per_s: float | None = Field(
        default=None,
        ge=MIN_REQUESTS_PER_S,
        le=MAX_TRAFFIC_REQUESTS_PER_S,
        allow_inf_nan=False,
        description="Requests per second, all replicas together; a trace's own rate if omitted "
        f"(which must then lie in [{MIN_REQUESTS_PER_S:g}, {MAX_TRAFFIC_REQUESTS_PER_S:g}] too).",
        examples=[10.0],
    )
    prompt_tokens: LengthDistribution | None = Field(default=None, description="Prompt lengths.")
    output_tokens: LengthDistribution | None = Field(
        default=None, description="Output lengths, the first token included."
    )
    trace: list[TraceRow] | None = Field(
        default=None,
        min_length=MIN_TRACE_ROWS,
        max_length=MAX_REQUESTS,
        description="Requests as [arrival_s, prompt_tokens, output_tokens] rows, instead of "
        f"distributions; at least {MIN_TRACE_ROWS}. Each probe replays the first "
        "probe_requests rows, time-scaled to the probed rate.",
    )

    @model_validator(mode="after")
    def _one_shape(self) -> Traffic:
        lengths = self.prompt_tokens is not None or self.output_tokens is not None
        if self.trace is not None and lengths:
            raise ValueError("give length distributions or a trace, not both")
        if self.trace is None:
            if self.prompt_tokens is None or self.output_tokens is None:
                raise ValueError("give prompt_tokens and output_tokens (or a trace)")
            if self.requests_per_s is None:
                raise ValueError("requests_per_s is required with length distributions")
        return self


class TtftBucketSlo(Input):
    """A TTFT objective for prompts longer than the previous bucket's bound, up to this one."""

    max_prompt_tokens: int = Field(ge=1, le=2**24, description="Upper bound of the bucket.")
    ttft_p99_ms: float = Field(
        gt=0, allow_inf_nan=False, description="99th-percentile TTFT objective of the bucket."
    )


class Slo(Input):
    """Latency objectives, at the 99th percentile over requests."""

    ttft_p99_ms: float = Field(
        gt=0, allow_inf_nan=False, description="Time to first token, all requests.", examples=[1000]
    )
    tpot_p99_ms: float = Field(
        gt=0, allow_inf_nan=False, description="Time per output token.", examples=[50]
    )
    ttft_p99_ms_by_prompt_tokens: list[TtftBucketSlo] = Field(
        default_factory=list,
        max_length=16,
        description="Extra TTFT objectives by prompt length, in increasing order of bounds.",
    )


class PlanRequest(Input):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "llama-3-8b",
                    "traffic": {
                        "requests_per_s": 10.0,
                        "prompt_tokens": {"p50": 2048, "p90": 2048, "p99": 2048},
                        "output_tokens": {"p50": 256, "p90": 256, "p99": 256},
                    },
                    "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 50},
                    "gpus": ["h100-sxm5-80gb", "a100-sxm4-80gb"],
                    "tp_candidates": [1, 2],
                }
            ]
        }
    )

    """What to plan: a model, its traffic and SLOs, and the candidates to consider. The work one
    plan may demand is bounded: in candidates (see `gpus`) and in simulated steps (see
    `probe_requests`)."""

    model: CATALOG_REF | ModelArchitecture = Field(
        description="A catalog model id, or an inline architecture.", examples=["llama-3-8b"]
    )
    traffic: Traffic = Field(description="The traffic to carry.")
    slo: Slo = Field(description="The latency objectives.")
    gpus: list[ENTRY_ID] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Candidate catalog GPU ids; default every catalog GPU with a price. A plan "
        f"screens at most {MAX_CANDIDATES:,} candidates (GPUs x tp_candidates x formats x "
        "max_num_seqs x chunk_tokens); more is a 422 naming `candidates`.",
    )
    price_overrides: dict[str, UsdPerGpuHour] = Field(
        default_factory=dict,
        max_length=64,
        description="USD per GPU-hour by GPU id, instead of (or where missing) the catalog's.",
    )
    tp_candidates: list[Annotated[int, Field(ge=1, le=256)]] = Field(
        default=list(DEFAULT_TP_CANDIDATES),
        min_length=1,
        max_length=8,
        description="Tensor-parallel degrees to consider (each at least 1).",
    )
    weight_dtypes: list[Format] | None = Field(
        default=None,
        min_length=1,
        max_length=6,
        description=(
            "Weight formats to consider; default the model's own (`checkpoint_dtype`). A "
            "smaller format than the checkpoint's (fp8 weights of a bf16 model) is a "
            "quantisation that changes output quality: such candidates say so."
        ),
    )
    kv_dtypes: list[Format] | None = Field(
        default=None,
        min_length=1,
        max_length=6,
        description="KV-cache formats to combine with every weight format; default: what each "
        "GPU's engine serves those weights with (`kv_dtype` of estimates: the checkpoint's "
        "declared KV format where the engine reads it, else the 16-bit compute dtype).",
    )
    max_num_seqs: list[Annotated[int, Field(ge=1, le=65536)]] | None = Field(
        default=None,
        min_length=1,
        max_length=4,
        description="max_num_seqs values to consider; default: each GPU's engine's own "
        "(`engine`: vLLM V1 1024 on GPUs of 70 GiB and more but the A100, else 256; SGLang up "
        "to 2048; TensorRT-LLM 2048; the roofline 256).",
    )
    chunk_tokens: list[Annotated[int, Field(ge=1, le=2**24)]] | None = Field(
        default=None,
        min_length=1,
        max_length=4,
        description="Prefill chunk sizes (max_num_batched_tokens) to consider; default: each "
        "GPU's engine's own budget and, where it chunks prompts, a quarter of it (at least "
        "512), which keeps TPOT lower under load. TensorRT-LLM does not chunk by default: its "
        "budget is the most prompt tokens a step takes whole.",
    )
    headroom: float = Field(
        default=0.2, ge=0, le=10, description="Spare capacity: replicas carry traffic x (1 + it)."
    )
    confidence: float | None = Field(
        default=None,
        ge=0.5,
        le=0.99,
        description=(
            "Also size each planned candidate so its SLOs hold with this confidence, and with "
            "50 and 90 % (`by_confidence`): each replica then sustains R(SLO / k) / k, k being "
            "how many times slower than timed published runs of such answers were at that "
            "quantile. Null: as timed only."
        ),
    )
    gpus_per_node: int = Field(
        default=8, ge=1, le=64, description="GPUs in one node: the largest tp considered."
    )
    efficiency: Literal["calibrated", "ideal"] = Field(
        default="calibrated", description="Time steps with the GPUs' calibrations, or ideally."
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Share of GPU memory the engine may use."
    )
    probe_requests: int = Field(
        default=DEFAULT_PROBE_REQUESTS,
        ge=500,
        le=20000,
        description="Requests per simulation probe; about 1 % of them lie above the p99. All "
        f"probes of a plan together may simulate {DEFAULT_MAX_SIMULATED_STEPS:,} forward steps "
        "(about a minute of CPU); a plan that needs more is a 422 naming this field.",
    )
    confirm_requests: int = Field(
        default=DEFAULT_CONFIRM_REQUESTS,
        ge=0,
        le=50000,
        description="Confirm each replica count found with probes of this many requests (the "
        "same ones and more), searching upward if they miss; 0, or no more than "
        "probe_requests: no confirmation. A 3,000-request probe is 0.3-3 % optimistic in "
        "sustainable rate near saturation; 10,000 requests remove that at about 2.5 times the "
        "planning time.",
    )
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="Seed of the simulated requests.")
    max_plans: int = Field(
        default=3, ge=1, le=50, description="Fully planned candidates to return, cheapest first."
    )
    exhaustive: bool = Field(
        default=False,
        description="Plan every candidate instead of pruning the dearer ones (many more "
        "simulations: the simulated-step limit of probe_requests applies).",
    )
    disaggregated: bool = Field(
        default=False, description="Also size separate prefill and decode pools, and compare."
    )
    disaggregated_link: KvLinkSettings | None = Field(
        default=None,
        description=(
            "With `disaggregated`: the link each request's KV crosses from the prefill pool to "
            "the decode pool (default: one 400 Gb/s port per GPU and 1 ms per transfer)."
        ),
    )
    layouts: bool = Field(
        default=True,
        description=(
            "Also search attention data parallelism and expert parallelism (MoE models) and, "
            "where the model does not fit one node at the widest tp, pipeline stages (and dp x "
            "ep across nodes for MoE); false: tp only."
        ),
    )
    engine: str | None = Field(
        default=None,
        pattern=ENGINE_PATTERN,
        description=ENGINE_DESCRIPTION.replace("the GPU", "each GPU"),
    )

    def query(self) -> PlanQuery:
        """The request as `app.plans.service.create_plan` takes it."""
        traffic, slo = self.traffic, self.slo
        return PlanQuery(
            model=model_query(self.model),
            ttft_p99_ms=slo.ttft_p99_ms,
            tpot_p99_ms=slo.tpot_p99_ms,
            requests_per_s=traffic.requests_per_s,
            prompt_tokens=traffic.prompt_tokens.query() if traffic.prompt_tokens else None,
            output_tokens=traffic.output_tokens.query() if traffic.output_tokens else None,
            trace_rows=traffic.trace,
            ttft_buckets=[
                (b.max_prompt_tokens, b.ttft_p99_ms) for b in slo.ttft_p99_ms_by_prompt_tokens
            ],
            gpus=self.gpus,
            price_overrides=self.price_overrides,
            tp_candidates=self.tp_candidates,
            weight_dtypes=(
                tuple(DType(d) for d in self.weight_dtypes) if self.weight_dtypes else None
            ),
            kv_dtypes=tuple(DType(d) for d in self.kv_dtypes) if self.kv_dtypes else None,
            max_num_seqs=self.max_num_seqs,
            chunk_tokens=self.chunk_tokens,
            headroom=self.headroom,
            confidence=self.confidence,
            gpus_per_node=self.gpus_per_node,
            efficiency=EfficiencyMode(self.efficiency),
            gpu_memory_utilization=self.gpu_memory_utilization,
            probe_requests=self.probe_requests,
            confirm_requests=self.confirm_requests,
            seed=self.seed,
            max_plans=self.max_plans,
            exhaustive=self.exhaustive,
            engine=engine_query(self.engine),
            disaggregated=self.disaggregated,
            kv_link=self.disaggregated_link.link() if self.disaggregated_link else None,
            layouts=self.layouts,
        )


class BucketLatency(BaseModel):
    """The predicted TTFT of one prompt-length bucket."""

    max_prompt_tokens: int = Field(description="Upper bound of the bucket.")
    ttft_p99_ms: float | None = Field(description="Its p99 TTFT; null if no prompt falls in it.")


class PredictedRead(BaseModel):
    """The simulator's latencies for one replica at its share of the traffic (no headroom)."""

    requests_per_s_per_replica: float = Field(description="traffic / replicas.")
    ttft_p50_ms: float = Field(description="Median time to first token.")
    ttft_p99_ms: float = Field(description="99th-percentile time to first token.")
    tpot_p50_ms: float = Field(description="Median time per output token.")
    tpot_p99_ms: float = Field(description="99th-percentile time per output token.")
    ttft_p99_ms_by_bucket: list[BucketLatency] = Field(description="Per SLO bucket.")
    saturated: bool = Field(description="Whether the replica's queue grows without bound.")


class LayoutRead(BaseModel):
    """A replica's GPU, layout and formats, as a plan's candidates (and what renders them) name
    them."""

    gpu: str = Field(description="Catalog GPU id.")
    tp: int = Field(description="Tensor-parallel degree.")
    pp: int = Field(description="Pipeline stages.")
    dp: int = Field(description="Attention data-parallel ranks (each of tp GPUs).")
    ep: int = Field(description="Expert-parallel degree (1: experts sliced by tensor).")
    gpus_per_replica: int = Field(description="tp x dp x pp.")
    weight_dtype: str = Field(description="Weight format.")
    kv_dtype: str = Field(description="KV-cache format.")


class ConfidentPlanRead(BaseModel):
    """A planned candidate sized so its SLOs hold at a confidence."""

    confidence: float = Field(description="The share of published runs of this kind covered.")
    slowdown: float = Field(
        description="Real step times over timed ones at that quantile of published runs."
    )
    max_requests_per_s_per_replica: float | None = Field(
        description="R(SLO / slowdown) / slowdown; null: no load meets the SLOs that slow."
    )
    replicas: int | None = Field(description="Replicas for the traffic with headroom.")
    cost_per_hour_usd: float | None = Field(description="Their cost per hour.")


class CandidateRead(LayoutRead):
    """One candidate deployment and its verdict. Rates are per replica."""

    max_num_seqs: int | None = Field(
        description="Scheduler's max_num_seqs, per data-parallel rank (null: any)."
    )
    chunk_tokens: int | None = Field(
        description="Prefill chunk, max_num_batched_tokens (null: any)."
    )
    status: Literal["planned", "pruned", "infeasible"] = Field(
        description="`planned`: simulated and sized; `pruned`: provably no cheaper than the "
        "plans returned; `infeasible`: cannot meet the SLAs."
    )
    feasible: bool = Field(description="Whether this candidate carries the traffic (planned).")
    replicas: int | None = Field(description="Replicas for the traffic with headroom.")
    gpus_total: int | None = Field(description="replicas x GPUs per replica.")
    price_per_gpu_hour_usd: float = Field(description="Price used for one GPU.")
    cost_per_hour_usd: float | None = Field(description="gpus_total x price.")
    cost_per_million_output_tokens_usd: float | None = Field(
        description="cost_per_hour / (traffic x mean output tokens x 3600) x 1e6."
    )
    max_requests_per_s_per_replica: float | None = Field(
        description="Highest rate a simulation probe found to meet the SLAs."
    )
    failing_requests_per_s_per_replica: float | None = Field(
        description="Lowest rate known to miss them (a probe, or the analytic bound)."
    )
    analytic_max_requests_per_s_per_replica: float | None = Field(
        description="Analytic capacity bound of one replica: no simulation sustains more."
    )
    cost_lower_bound_per_hour_usd: float | None = Field(
        description="Cost at the fewest replicas the analytic bound allows."
    )
    kv_capacity_tokens: int | None = Field(description="KV cache of one replica, tokens.")
    kv_head_replication: float = Field(description="tp / KV heads when tp exceeds them, else 1.")
    predicted: PredictedRead | None = Field(description="Latencies at the planned load.")
    simulations: int = Field(description="Simulation probes run for this candidate.")
    reasons: list[str] = Field(description="Why infeasible or pruned, and caveats.")
    quantized_from: str | None = Field(
        default=None,
        description=(
            "The model's checkpoint format when `weight_dtype` is smaller (a quantisation that "
            "changes output quality), else null."
        ),
    )
    engine: str | None = Field(
        default=None,
        description="The engine whose scheduler and CUDA graphs were simulated, "
        "`name@version` (`trtllm@1.3.0rc23`), or `roofline`; null in plans stored before "
        "answers named it.",
    )
    basis: dict[str, str] = Field(
        default_factory=dict,
        description="What timed each op family: a profile (`profile <id>`) or the roofline.",
    )
    expected_error_pct: dict[str, float | None] = Field(
        default_factory=dict,
        description="By metric (`ttft`, `tpot`), the spread of the validation residuals of the "
        "phase it comes from, never below the mean absolute error published runs of the "
        "model's family showed: how far to trust `predicted`. Null, with the reason in "
        "`warnings`, where none is known (empty in plans stored before answers stated it).",
    )
    error_interval_pct: dict[str, ErrorInterval | None] = error_intervals_field(
        "metric (`ttft`, `tpot`) of `predicted` (empty in plans stored before answers stated it)"
    )
    by_confidence: list[ConfidentPlanRead] = Field(
        default_factory=list,
        description=(
            "A planned candidate sized so its SLOs hold at 50 %, 90 % and the asked "
            "`confidence`; empty without one."
        ),
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="What to read the candidate with (an engine whose steps the roofline timed).",
    )


class DisaggregatedRead(BaseModel):
    """Separate prefill and decode pools on the best plan's GPU, tp and formats."""

    gpu: str = Field(description="Catalog GPU id.")
    tp: int = Field(description="Tensor-parallel degree of every replica.")
    weight_dtype: str = Field(description="Weight format.")
    kv_dtype: str = Field(description="KV-cache format.")
    chunk_tokens: int = Field(description="Prefill chunk of the prefill pool.")
    prefill_replicas: int | None = Field(description="Prefill replicas (null: SLA unreachable).")
    prefill_max_requests_per_s_per_replica: float | None = Field(
        description="Rate per prefill replica that met the TTFT SLOs."
    )
    decode_replicas: int | None = Field(description="Decode replicas (null: SLA unreachable).")
    decode_batch_size: int = Field(description="Largest decode batch meeting the TPOT SLO.")
    decode_mean_batch: float = Field(
        description="Mean decode batch of the analytical bound the simulated search starts from."
    )
    decode_tpot_ms: float | None = Field(description="Decode step at the mean batch.")
    decode_max_requests_per_s_per_replica: float | None = Field(
        description="Requests per second one decode replica completes."
    )
    gpus_total: int | None = Field(description="GPUs of both pools.")
    cost_per_hour_usd: float | None = Field(description="Cost of both pools.")
    cost_per_million_output_tokens_usd: float | None = Field(
        description="Cost per million output tokens."
    )
    aggregated_cost_per_hour_usd: float = Field(description="The best aggregated plan's cost.")
    cheaper: Literal["aggregated", "disaggregated", "equal"] = Field(description="Which is.")
    verdict: str = Field(description="The comparison in one line.")
    method: str = Field(description="How each pool was sized, and what is not modelled.")


class PlanRead(BaseModel):
    """A finished plan in full: the answer, the request, and the catalog versions it was
    computed from."""

    id: str = Field(description="Plan id.")
    created_at: datetime = Field(description="When it was asked for (UTC).")
    catalog_versions: dict[str, dict[str, int]] = Field(
        description="`gpus` and `models`: the version of every catalog entry used, by id."
    )
    request: dict[str, Any] = Field(description="The request as validated, defaults filled in.")
    plans: list[CandidateRead] = Field(
        description="Planned candidates by cost, then infeasible ones with their reasons."
    )
    pruned: list[CandidateRead] = Field(
        description="Candidates that cannot beat the plans returned (exhaustive: false)."
    )
    disaggregated: DisaggregatedRead | None = Field(
        description="Separate prefill and decode pools, when asked for."
    )
    demand_requests_per_s: float = Field(description="traffic x (1 + headroom).")
    mean_prompt_tokens: float = Field(description="Mean prompt length of the traffic.")
    mean_output_tokens: float = Field(description="Mean output length of the traffic.")
    probe_requests: int = Field(description="Requests in each simulation probe.")
    simulations: int = Field(description="Simulation probes run in all.")
    elapsed_ms: float = Field(description="Time the planning took.")
    notes: list[str] = Field(description="How the plan was computed.")

    @classmethod
    def of(cls, row: PlanRow) -> PlanRead:
        """`row`'s answer in full; `ValueError` when it has none (not done)."""
        if row.response is None:
            raise ValueError(f"plan {row.id} has no answer: it is {row.status}")
        return cls.model_validate(
            {
                "id": row.id,
                "created_at": row.created_at,
                "catalog_versions": row.catalog_versions,
                "request": row.request,
                **row.response,
            }
        )


PlanStatusName = Literal["queued", "running", "done", "failed", "cancelled"]
Detail = Literal["compact", "full"]
EXAMPLES_PER_REASON = 3
"""Candidates shown for each reason a compact answer groups."""


class PlanProblem(BaseModel):
    """Why a plan failed, as an RFC 9457 problem (what a synchronous answer would have been)."""

    type: str = Field(description="The problem type, `/problems/{slug}`.")
    title: str = Field(description="The problem type's title.")
    status: int = Field(description="The HTTP status the problem has.")
    detail: str = Field(description="What went wrong.")
    errors: list[dict[str, str]] = Field(
        default_factory=list, description="`field` and `message` of each refused field."
    )


class NotPlannedExample(BaseModel):
    """One candidate of a reason group, with its reason in full."""

    gpu: str = Field(description="Catalog GPU id.")
    tp: int = Field(description="Tensor-parallel degree.")
    pp: int = Field(description="Pipeline stages.")
    dp: int = Field(description="Attention data-parallel ranks.")
    ep: int = Field(description="Expert-parallel degree.")
    weight_dtype: str = Field(description="Weight format.")
    kv_dtype: str = Field(description="KV-cache format.")
    max_num_seqs: int | None = Field(description="Scheduler's max_num_seqs.")
    chunk_tokens: int | None = Field(description="Prefill chunk.")
    reason: str = Field(description="Why it was not planned, in full.")


class NotPlannedGroup(BaseModel):
    """Candidates not planned for one reason (numbers aside)."""

    status: Literal["pruned", "infeasible"] = Field(description="Their verdict.")
    reason: str = Field(description="The reason, its figures replaced by `…`.")
    count: int = Field(description="Candidates with it.")
    examples: list[NotPlannedExample] = Field(
        description=f"The first {EXAMPLES_PER_REASON} of them."
    )


_FIGURE = re.compile(r"(?<![\w.-])\$?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?%?(?!\w)")
"""A figure standing alone (`3`, `$2.89`, `0.5 %`, `4056-token`), not part of a name (`fp8`,
`a100-sxm4-40gb`)."""


def _reason_kind(reason: str) -> str:
    """A reason's head (what comes before its first `: `, its figures replaced): candidates
    refused for the same cause share it."""
    return _FIGURE.sub("…", reason.split(": ", 1)[0])


def not_planned_groups(candidates: list[dict[str, Any]]) -> list[NotPlannedGroup]:
    """The candidates not planned (stored documents), grouped by verdict and reason kind,
    largest group first; the verdict reason is a candidate's last."""
    groups: dict[tuple[str, str], NotPlannedGroup] = {}
    for c in candidates:
        if c["status"] == "planned":
            continue
        reason = c["reasons"][-1] if c["reasons"] else ""
        key = (c["status"], _reason_kind(reason))
        group = groups.get(key)
        if group is None:
            group = groups[key] = NotPlannedGroup(
                status=c["status"], reason=key[1], count=0, examples=[]
            )
        group.count += 1
        if len(group.examples) < EXAMPLES_PER_REASON:
            group.examples.append(NotPlannedExample.model_validate({**c, "reason": reason}))
    return sorted(groups.values(), key=lambda g: (-g.count, g.status, g.reason))


class PlanAnswer(BaseModel):
    """A plan asked for: its job's state and, when done, its answer. Compact (the default)
    gives the planned candidates and the others grouped by reason; `detail=full` also every
    candidate as `plans` and `pruned`."""

    id: str = Field(description="Plan id.")
    created_at: datetime = Field(description="When it was asked for (UTC).")
    status: PlanStatusName = Field(
        description="`queued` (no worker has it yet), `running`, `done`, `failed` (see "
        "`error`) or `cancelled` (DELETE stopped it)."
    )
    progress: float = Field(
        ge=0, le=1, description="Candidates with their verdict over candidates, 0-1."
    )
    error: PlanProblem | None = Field(description="Why it failed (when failed).")
    detail: Detail | None = Field(description="How much of the answer is shown (when done).")
    catalog_versions: dict[str, dict[str, int]] = Field(
        description="`gpus` and `models`: the version of every catalog entry used, by id."
    )
    request: dict[str, Any] = Field(description="The request as validated, defaults filled in.")
    plans: list[CandidateRead] | None = Field(
        description="Compact: the planned candidates by cost. Full: then the infeasible ones "
        "with their reasons. Null until done."
    )
    pruned: list[CandidateRead] | None = Field(
        description="Full only: candidates that cannot beat the plans returned."
    )
    not_planned: list[NotPlannedGroup] | None = Field(
        description="Infeasible and pruned candidates, grouped by reason (when done)."
    )
    disaggregated: DisaggregatedRead | None = Field(
        description="Separate prefill and decode pools, when asked for."
    )
    demand_requests_per_s: float | None = Field(description="traffic x (1 + headroom).")
    mean_prompt_tokens: float | None = Field(description="Mean prompt length of the traffic.")
    mean_output_tokens: float | None = Field(description="Mean output length of the traffic.")
    probe_requests: int | None = Field(description="Requests in each simulation probe.")
    simulations: int | None = Field(description="Simulation probes run in all.")
    elapsed_ms: float | None = Field(description="Time the planning took.")
    notes: list[str] | None = Field(description="How the plan was computed.")

    @classmethod
    def of(cls, row: PlanRow, detail: Detail = "compact") -> PlanAnswer:
        fields: dict[str, Any] = {
            "id": row.id,
            "created_at": row.created_at,
            "status": row.status,
            "progress": row.progress,
            "error": row.error,
            "detail": None,
            "catalog_versions": row.catalog_versions,
            "request": row.request,
        }
        answer = row.response
        if row.status == "done" and answer is not None:
            everything = [*answer["plans"], *answer["pruned"]]
            fields |= answer | {"detail": detail, "not_planned": not_planned_groups(everything)}
            if detail == "compact":
                fields["plans"] = [c for c in answer["plans"] if c["status"] == "planned"]
                fields["pruned"] = None
        else:
            fields |= dict.fromkeys(
                (
                    "plans",
                    "pruned",
                    "not_planned",
                    "disaggregated",
                    "demand_requests_per_s",
                    "mean_prompt_tokens",
                    "mean_output_tokens",
                    "probe_requests",
                    "simulations",
                    "elapsed_ms",
                    "notes",
                )
            )
        return cls.model_validate(fields)


class PlanSummary(BaseModel):
    """A plan in brief."""

    id: str = Field(description="Plan id.")
    created_at: datetime = Field(description="When it was asked for (UTC).")
    status: PlanStatusName = Field(description="Its job's state (see `PlanAnswer`).")
    progress: float = Field(ge=0, le=1, description="Candidates done over candidates, 0-1.")
    model: str = Field(description="Catalog model id, or `inline`.")
    requests_per_s: float = Field(description="The traffic planned for.")
    best: dict[str, Any] | None = Field(
        description="The cheapest plan when done: `feasible`, and when true `gpu`, `tp`, "
        "`weight_dtype`, `replicas`, `gpus_total`, `cost_per_hour_usd` (with a `confidence` "
        "asked, also `confidence`, `replicas_at_confidence`, `cost_per_hour_usd_at_confidence`: "
        "sized so its SLOs hold at it); else null."
    )

    @classmethod
    def of(cls, row: PlanRow) -> PlanSummary:
        return cls.model_validate(
            {
                "id": row.id,
                "created_at": row.created_at,
                "status": row.status,
                "progress": row.progress,
                "model": row.model_id,
                "requests_per_s": row.requests_per_s,
                "best": row.summary,
            }
        )


class PlanList(Page[PlanSummary]):
    """One page of plans, newest first."""
