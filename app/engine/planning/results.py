"""What a capacity plan answers: every candidate deployment with its verdict, and optionally a
disaggregated (separate prefill and decode pools) alternative."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from app.engine.dtypes import DType
from app.engine.serving import ROOFLINE

__all__ = [
    "BucketLatency",
    "CandidatePlan",
    "CandidateStatus",
    "CapacityPlan",
    "ConfidentPlan",
    "DisaggregatedPlan",
    "PredictedLatency",
    "usd_per_million_output_tokens",
]

_SECONDS_PER_HOUR = 3600.0


def usd_per_million_output_tokens(
    cost_per_hour_usd: float, requests_per_s: float, mean_output_tokens: float
) -> float:
    """An hour's cost over the output tokens `requests_per_s` requests of `mean_output_tokens`
    produce in that hour, per million: cost / (rate x mean output x 3600) x 1e6."""
    return cost_per_hour_usd / (requests_per_s * mean_output_tokens * _SECONDS_PER_HOUR / 1e6)


class CandidateStatus(StrEnum):
    PLANNED = "planned"  # simulated: replicas, cost and latencies known
    PRUNED = "pruned"  # provably no cheaper than the plans returned; not fully searched
    INFEASIBLE = "infeasible"  # cannot serve the traffic within the SLOs at all


@dataclass(frozen=True, slots=True)
class BucketLatency:
    """The p99 TTFT of the prompts up to `max_prompt_tokens` (above the previous bucket's);
    None where the sample has none."""

    max_prompt_tokens: int
    ttft_p99_ms: float | None


@dataclass(frozen=True, slots=True)
class PredictedLatency:
    """The simulator's figures for one replica at its share of the traffic (no headroom)."""

    requests_per_s_per_replica: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    ttft_p99_ms_by_bucket: tuple[BucketLatency, ...]
    saturated: bool


@dataclass(frozen=True, slots=True)
class ConfidentPlan:
    """A planned candidate sized so its SLOs hold at a confidence: each replica sustains
    R(SLO / k) / k (`search.slowed_rate`), k the confidence's slowdown."""

    confidence: float
    slowdown: float
    max_requests_per_s_per_replica: float | None
    """None: no load meets the SLOs that slow."""
    replicas: int | None
    cost_per_hour_usd: float | None


@dataclass(frozen=True, slots=True)
class CandidatePlan:
    """One (GPU, tp, formats, scheduler) deployment and what it takes to carry the traffic.

    `max_num_seqs` and `chunk_tokens` are None for an infeasibility that holds whatever they are.
    Rates are per replica, requests per second.
    """

    gpu: str
    tp: int
    weight_dtype: DType
    kv_dtype: DType
    max_num_seqs: int | None
    chunk_tokens: int | None
    status: CandidateStatus
    price_per_gpu_hour_usd: float
    reasons: tuple[str, ...]
    kv_head_replication: float = 1.0
    pp: int = 1
    dp: int = 1
    ep: int = 1
    kv_capacity_tokens: int | None = None
    analytic_max_requests_per_s_per_replica: float | None = None
    """`capacity_bound`: no simulation sustains more."""
    cost_lower_bound_per_hour_usd: float | None = None
    """k_min * GPUs per replica * price; for a pruned candidate the best bound known when it
    was dropped (its cost, or the cost of one replica more than it was searched to), never below
    the cost of the `max_plans`-th plan returned."""
    replicas: int | None = None
    gpus_total: int | None = None
    cost_per_hour_usd: float | None = None
    cost_per_million_output_tokens_usd: float | None = None
    max_requests_per_s_per_replica: float | None = None
    """The highest rate a probe found to meet the SLOs."""
    failing_requests_per_s_per_replica: float | None = None
    """The lowest rate known to miss them (probed, or the analytic bound)."""
    predicted: PredictedLatency | None = None
    simulations: int = 0
    quantized_from: DType | None = None
    """The model's checkpoint format when `weight_dtype` is smaller: a quantisation, which
    changes output quality."""
    engine: str = ROOFLINE.label
    """The engine whose scheduler and CUDA graphs were simulated, `name@version`."""
    basis: Mapping[str, str] = field(default_factory=lambda: {"all": ROOFLINE.label})
    """What timed each op family (a profile, or the roofline)."""
    warnings: tuple[str, ...] = ()
    """What the candidate's answer should be read with (an engine the roofline timed)."""
    by_confidence: tuple[ConfidentPlan, ...] = ()
    """A planned candidate sized at each of its GPU's confidences (`GpuOffer.slowdowns`)."""

    def sized_at(self, confidence: float | None) -> ConfidentPlan | None:
        """Its sizing at `confidence`, where it has one."""
        return next((c for c in self.by_confidence if c.confidence == confidence), None)

    @property
    def feasible(self) -> bool:
        return self.status is CandidateStatus.PLANNED

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.dp * self.pp


@dataclass(frozen=True, slots=True)
class DisaggregatedPlan:
    """Separate prefill and decode pools on the GPU, tp and formats of the best aggregated plan.

    Both pools are sized with the simulator: the prefill pool on the same requests, each stopping
    at its first token, against the TTFT SLOs; the decode pool on the requests arriving after
    their prefill and their KV transfer, against the TPOT SLO, searched from the analytical bound
    below (`app.engine.planning.disaggregated`).
    """

    gpu: str
    tp: int
    weight_dtype: DType
    kv_dtype: DType
    chunk_tokens: int
    prefill_replicas: int | None
    prefill_max_requests_per_s_per_replica: float | None
    decode_replicas: int | None
    decode_batch_size: int
    """Largest decode batch whose step meets the TPOT SLO (and that the KV cache holds)."""
    decode_mean_batch: float
    """The analytical bound's mean batch, where the decode pool's simulated search starts: the
    largest whose batch + 2.33 standard deviations (a Poisson count's 99th percentile) stays
    within `decode_batch_size`."""
    decode_tpot_ms: float | None
    """The simulated TPOT p99 of the planned decode pool (the KV transfer included)."""
    decode_max_requests_per_s_per_replica: float | None
    gpus_total: int | None
    cost_per_hour_usd: float | None
    cost_per_million_output_tokens_usd: float | None
    aggregated_cost_per_hour_usd: float
    cheaper: str
    """`disaggregated`, `aggregated`, `equal`, or `aggregated` when a pool cannot be sized."""
    verdict: str
    method: str


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """Candidates: planned ones by cost, then pruned ones by their cost bound, then infeasible
    ones. Rates are requests per second; `demand_requests_per_s` includes the headroom."""

    candidates: tuple[CandidatePlan, ...]
    demand_requests_per_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    probe_requests: int
    simulations: int
    disaggregated: DisaggregatedPlan | None
    notes: tuple[str, ...]

    @property
    def best(self) -> CandidatePlan | None:
        first = self.candidates[0] if self.candidates else None
        return first if first is not None and first.feasible else None
