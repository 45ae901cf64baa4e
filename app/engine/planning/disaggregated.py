"""A disaggregated deployment beside the aggregated one: a prefill pool and a decode pool on the
same GPU, tp and formats, each sized for its own SLO.

Prefill pool: simulated. Its replicas serve the plan's sample with every request stopping at its
first token, so the simulator's TTFT includes queueing behind other prompts; the replica count is
searched exactly as for an aggregated plan, against the TTFT SLOs only.

Decode pool: analytical. A replica decodes at most B sequences, B the largest batch whose decode
step at the requests' mean decode context meets the TPOT SLO (and that the KV cache and
`max_num_seqs` allow). Its batch is a Poisson-like count around its mean L (Little's law:
L = rate * E[T - 1] * step time), so L is planned such that L + z*sqrt(L) <= B with z = 2.326,
the normal 99th percentile: sqrt(L) = (-z + sqrt(z^2 + 4B)) / 2. One replica then completes
L / (E[T - 1] * step(L)) requests per second. Moving KV caches between the pools is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from app.engine.planning.analysis import LoadStats, capacity_bound
from app.engine.planning.inputs import GpuOffer, Slo
from app.engine.planning.probes import ProbeRunner, ProbeSample, StepBudget
from app.engine.planning.results import DisaggregatedPlan, usd_per_million_output_tokens
from app.engine.planning.search import LOW_LOAD_FRACTION, search_replicas
from app.engine.simulation import SchedulerConfig, StepTimer
from app.engine.specs import Deployment
from app.engine.step_load import StepLoad
from app.engine.units import MS_PER_S

__all__ = ["DisaggregatedOutcome", "plan_disaggregated"]

_Z99 = NormalDist().inv_cdf(0.99)
METHOD = (
    "prefill pool: simulated with each request stopping at its first token, against the TTFT "
    "SLOs; decode pool: analytical, the largest decode batch whose step meets the TPOT SLO at "
    "the mean decode context, planned at a mean batch 2.33 standard deviations below it; KV "
    "transfer between the pools is not modelled"
)


@dataclass(frozen=True, slots=True)
class DisaggregatedOutcome:
    plan: DisaggregatedPlan
    simulations: int


def _decode_step_s(timer: StepTimer, batch: int, context: float) -> float:
    """A decode step of `batch` sequences whose contexts average `context` tokens."""
    return timer.seconds(
        StepLoad(decode_seqs=batch, decode_context_tokens=math.ceil(batch * context))
    )


def _largest_batch(timer: StepTimer, context: float, limit: int, tpot_s: float) -> int:
    """Largest batch in [1, limit] whose decode step meets `tpot_s` (0: none); a decode step
    grows with the batch, so bisect."""
    if limit < 1 or _decode_step_s(timer, 1, context) > tpot_s:
        return 0
    low, high = 1, limit + 1
    while high - low > 1:
        middle = (low + high) // 2
        if _decode_step_s(timer, middle, context) <= tpot_s:
            low = middle
        else:
            high = middle
    return low


def plan_disaggregated(
    sample: ProbeSample,
    timer: StepTimer,
    deployment: Deployment,
    offer: GpuOffer,
    scheduler: SchedulerConfig,
    *,
    kv_capacity_tokens: int,
    block_tokens: int,
    slo: Slo,
    traffic_rps: float,
    demand_rps: float,
    aggregated_cost_per_hour_usd: float,
    budget: StepBudget | None = None,
) -> DisaggregatedOutcome:
    """Size both pools for `demand_rps` (traffic with headroom); see the module docstring."""
    per_replica_usd = deployment.gpus * offer.price_per_gpu_hour_usd
    # Prefill pool.
    prompts = sample.prompt_only()
    capacity = capacity_bound(
        timer,
        LoadStats.of(prompts),
        chunk_tokens=scheduler.max_num_batched_tokens,
        max_num_seqs=scheduler.max_num_seqs,
        kv_capacity_tokens=kv_capacity_tokens,
    )
    k_min = max(1, math.ceil(demand_rps / capacity))
    runner = ProbeRunner(
        prompts,
        timer,
        kv_capacity_tokens=kv_capacity_tokens,
        block_tokens=block_tokens,
        scheduler=scheduler,
        slo=slo,
        check_tpot=False,
        budget=budget,
    )
    k_limit = max(k_min, math.ceil(demand_rps / (capacity * LOW_LOAD_FRACTION)))
    prefill = search_replicas(runner, demand_rps, k_min, k_limit).replicas

    # Decode pool.
    stats = LoadStats.of(sample)
    context = stats.mean_decode_context
    limit = min(scheduler.max_num_seqs, math.floor(kv_capacity_tokens / max(context, 1.0)))
    batch = _largest_batch(timer, context, limit, slo.tpot_p99_ms / MS_PER_S)
    mean_batch = ((-_Z99 + math.sqrt(_Z99**2 + 4 * batch)) / 2) ** 2 if batch else 0.0
    decode = decode_rate = tpot_ms = None
    if stats.decode_tokens <= 0:
        decode = 0  # every request ends at its first token: nothing to decode
    elif mean_batch > 0:
        step_s = _decode_step_s(timer, math.ceil(mean_batch), context)
        tpot_ms = step_s * MS_PER_S
        # Little's law: L sequences decoding E[T-1] steps each of step_s.
        decode_rate = mean_batch / (stats.decode_tokens * step_s)
        decode = math.ceil(demand_rps / decode_rate)

    gpus = cost = per_million = None
    if prefill is not None and decode is not None:
        gpus = (prefill + decode) * deployment.gpus
        cost = (prefill + decode) * per_replica_usd
        per_million = usd_per_million_output_tokens(cost, traffic_rps, sample.mean_output_tokens)
    if cost is None:
        cheaper = "aggregated"
        pool = "prefill" if prefill is None else "decode"
        verdict = (
            f"aggregated: the {pool} pool cannot meet the SLA on {offer.id} at tp "
            f"{deployment.tp}, so only the aggregated plan (${aggregated_cost_per_hour_usd:.2f}/h) "
            "serves the traffic"
        )
    else:
        if math.isclose(cost, aggregated_cost_per_hour_usd):
            cheaper = "equal"
        elif cost < aggregated_cost_per_hour_usd:
            cheaper = "disaggregated"
        else:
            cheaper = "aggregated"
        verdict = (
            f"{cheaper}: {prefill} prefill + {decode} decode replica(s) cost ${cost:.2f}/h "
            f"against ${aggregated_cost_per_hour_usd:.2f}/h aggregated"
        )
    plan = DisaggregatedPlan(
        gpu=offer.id,
        tp=deployment.tp,
        weight_dtype=deployment.weight_dtype,
        kv_dtype=deployment.kv_dtype,
        chunk_tokens=scheduler.max_num_batched_tokens,
        prefill_replicas=prefill,
        prefill_max_requests_per_s_per_replica=demand_rps / prefill if prefill else None,
        decode_replicas=decode,
        decode_batch_size=batch,
        decode_mean_batch=mean_batch,
        decode_tpot_ms=tpot_ms,
        decode_max_requests_per_s_per_replica=decode_rate,
        gpus_total=gpus,
        cost_per_hour_usd=cost,
        cost_per_million_output_tokens_usd=per_million,
        aggregated_cost_per_hour_usd=aggregated_cost_per_hour_usd,
        cheaper=cheaper,
        verdict=verdict,
        method=METHOD,
    )
    return DisaggregatedOutcome(plan, runner.simulations)
