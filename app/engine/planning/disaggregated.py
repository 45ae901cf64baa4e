"""A disaggregated deployment beside the aggregated one: a prefill pool and a decode pool on the
same GPU, tp and formats, each sized for its own SLO with the simulator.

Prefill pool: its replicas serve the plan's sample with every request stopping at its first
token, so the simulator's TTFT includes queueing behind other prompts; the replica count is
searched exactly as for an aggregated plan, against the TTFT SLOs only.

Decode pool: simulated (`simulate_disaggregated`): the sample at the demanded rate goes through
the prefill pool just sized, each request's KV crosses the link (`KvLink`: latency plus the
prompt's KV bytes over the bandwidth), and one decode replica of k serves a k-th of the
requests as they arrive with their KV. The pool is the fewest k whose run is not saturated, holds
every request, and meets the TPOT p99 SLO, the transfer counted in the gap before each request's
second token. The search starts at the analytical bound and gallops and bisects from there: a
replica decodes at most B sequences, B the largest batch whose decode step at the requests' mean
decode context meets the TPOT SLO (and that the KV cache and `max_num_seqs` allow); its batch
is a Poisson-like count around its mean L (Little's law), so L + z*sqrt(L) <= B with z = 2.326,
the normal 99th percentile: sqrt(L) = (-z + sqrt(z^2 + 4B)) / 2, and one replica completes
L / (E[T - 1] * step(L)) requests per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from app.engine.counting import kv_bytes_per_token as model_kv_bytes_per_token
from app.engine.planning.analysis import LoadStats, capacity_bound
from app.engine.planning.inputs import GpuOffer, Slo
from app.engine.planning.probes import ProbeRunner, ProbeSample, StepBudget
from app.engine.planning.results import DisaggregatedPlan, usd_per_million_output_tokens
from app.engine.planning.search import LOW_LOAD_FRACTION, search_replicas
from app.engine.simulation import (
    KvLink,
    Pool,
    SchedulerConfig,
    SimulationResult,
    SimulationTooLong,
    StepTimer,
    simulate_disaggregated,
)
from app.engine.simulation.speculative import SpeculativeTimer
from app.engine.specs import Deployment, SpecError
from app.engine.step_cost import StepCostModel
from app.engine.step_load import StepLoad
from app.engine.units import MS_PER_S

__all__ = ["DisaggregatedOutcome", "plan_disaggregated"]

_Z99 = NormalDist().inv_cdf(0.99)
METHOD = (
    "prefill pool: simulated with each request stopping at its first token, against the TTFT "
    "SLOs; decode pool: simulated with each request arriving after its prefill and its KV "
    "transfer (latency + prompt KV bytes / bandwidth), the fewest replicas meeting the TPOT "
    "SLO, searched from the analytical bound (the largest decode batch whose step meets the "
    "TPOT SLO, at a mean batch 2.33 standard deviations below it); not modelled: contention "
    "between KV transfers (each GPU's NIC is assumed free)"
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


class _DecodeProbes:
    """Simulates the two pools for a decode pool of k replicas (the prefill pool fixed), memoised
    by k, drawing on the plan's step budget; counts its simulations."""

    def __init__(
        self,
        sample: ProbeSample,
        demand_rps: float,
        prefill: Pool,
        timer: StepTimer,
        scheduler: SchedulerConfig,
        *,
        kv_capacity_tokens: int,
        block_tokens: int,
        kv_bytes_per_token: float,
        link: KvLink,
        slo: Slo,
        budget: StepBudget | None,
    ) -> None:
        self.trace = sample.trace(demand_rps)
        self.prefill = prefill
        self.timer = timer
        self.scheduler = scheduler
        self.kv_capacity_tokens = kv_capacity_tokens
        self.block_tokens = block_tokens
        self.kv_bytes_per_token = kv_bytes_per_token
        self.link = link
        self.slo = slo
        self.budget = budget
        self.simulations = 0
        self._prefill_run: SimulationResult | None = None
        self._runs: dict[int, SimulationResult] = {}

    def run(self, replicas: int) -> SimulationResult:
        """The requests end to end with `replicas` decode replicas."""
        known = self._runs.get(replicas)
        if known is not None:
            return known
        self.simulations += 1
        budget = self.budget
        if budget is not None and budget.left < 1:
            raise budget.exhausted("none is left for a decode pool probe")
        try:
            result = simulate_disaggregated(
                self.trace,
                self.prefill,
                Pool(self.timer, self.kv_capacity_tokens, self.scheduler, replicas),
                kv_bytes_per_token=self.kv_bytes_per_token,
                link=self.link,
                block_tokens=self.block_tokens,
                max_steps=budget.left if budget is not None else None,
                prefill_run=self._prefill_run,
            )
        except SimulationTooLong as error:
            if budget is None:
                raise
            detail = f"a decode pool of {replicas} replica(s): {error.message}"
            raise budget.exhausted(detail) from None
        if budget is not None:
            budget.left -= result.served.steps + (
                0 if self._prefill_run is not None else result.prefill.steps
            )
        self._prefill_run = result.prefill
        self._runs[replicas] = result.served
        return result.served

    def meets(self, replicas: int) -> bool:
        """Whether `replicas` decode replicas hold every request unsaturated within the TPOT
        SLO (p99 over the requests of more than one token)."""
        served = self.run(replicas)
        tpot_s = served.requests.tpot_s
        tpot_s = tpot_s[~np.isnan(tpot_s)]
        tpot_p99_ms = float(np.percentile(tpot_s, 99)) * MS_PER_S if len(tpot_s) else 0.0
        return (
            not served.saturated
            and served.rejected_requests == 0
            and tpot_p99_ms <= self.slo.tpot_p99_ms
        )

    def search(self, start: int, cap: int) -> int | None:
        """The fewest k in [1, cap] that meets, from a first probe at `start`: gallop down from a
        meet (start - 1, - 2, - 4, ...) or up from a miss (start + 1, + 3, + 7, ...), then
        bisect the last gap (the verdict is monotone in k: more replicas, less load each)."""
        start = min(max(start, 1), cap)
        if self.meets(start):
            low, high, step = 0, start, 1  # `low` misses (0: nothing below 1), `high` meets
            while high - low > 1:
                k = max(start - step, low + 1)
                step *= 2
                if not self.meets(k):
                    low = k
                    break
                high = k
        else:
            low, step = start, 1
            while True:
                if low >= cap:
                    return None
                k = min(start + 2 * step - 1, cap)
                step *= 2
                if self.meets(k):
                    high = k
                    break
                low = k
        while high - low > 1:
            middle = (low + high) // 2
            if self.meets(middle):
                high = middle
            else:
                low = middle
        return high


def _kv_bytes_per_token(timer: StepTimer, deployment: Deployment) -> float:
    """The KV one token takes on one GPU, from the model the timer times."""
    target = timer.target if isinstance(timer, SpeculativeTimer) else timer
    if not isinstance(target, StepCostModel):
        raise SpecError("timer", "a disaggregated plan needs the model's KV format")
    return model_kv_bytes_per_token(target.model, deployment)


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
    link: KvLink | None = None,
    kv_bytes_per_token: float | None = None,
) -> DisaggregatedOutcome:
    """Size both pools for `demand_rps` (traffic with headroom); see the module docstring.
    `link`: the KV transfer (default `KvLink()`); `kv_bytes_per_token`: the KV one token takes
    on one GPU (None: from the model `timer` times)."""
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

    # Decode pool: the analytical bound starts a simulated search.
    stats = LoadStats.of(sample)
    context = stats.mean_decode_context
    limit = min(scheduler.max_num_seqs, math.floor(kv_capacity_tokens / max(context, 1.0)))
    batch = _largest_batch(timer, context, limit, slo.tpot_p99_ms / MS_PER_S)
    mean_batch = ((-_Z99 + math.sqrt(_Z99**2 + 4 * batch)) / 2) ** 2 if batch else 0.0
    decode = decode_rate = tpot_ms = None
    simulations = runner.simulations
    if stats.decode_tokens <= 0:
        decode = 0  # every request ends at its first token: nothing to decode
    elif mean_batch > 0 and prefill is not None:
        step_s = _decode_step_s(timer, math.ceil(mean_batch), context)
        # Little's law: L sequences decoding E[T-1] steps each of step_s.
        analytic = math.ceil(demand_rps / (mean_batch / (stats.decode_tokens * step_s)))
        probes = _DecodeProbes(
            sample,
            demand_rps,
            Pool(timer, kv_capacity_tokens, scheduler, prefill),
            timer,
            scheduler,
            kv_capacity_tokens=kv_capacity_tokens,
            block_tokens=block_tokens,
            kv_bytes_per_token=(
                kv_bytes_per_token
                if kv_bytes_per_token is not None
                else _kv_bytes_per_token(timer, deployment)
            ),
            link=link if link is not None else KvLink(),
            slo=slo,
            budget=budget,
        )
        decode = probes.search(analytic, max(analytic, math.ceil(analytic / LOW_LOAD_FRACTION)))
        simulations += probes.simulations
        if decode is not None:
            served = probes.run(decode)
            tpot_ms = served.tpot_ms.p99
            decode_rate = demand_rps / decode

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
    return DisaggregatedOutcome(plan, simulations)
