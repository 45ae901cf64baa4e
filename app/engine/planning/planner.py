"""The capacity planner: for every candidate deployment, the fewest replicas that carry the traffic
within the SLOs, what they cost, and the latencies they give; ranked by cost.

Order of work, cheapest first (a simulation probe costs tens of milliseconds, a closed form
microseconds):

1. Closed forms per candidate (`screening`): does the model fit, does the KV cache hold the
   requests, does a lone request meet the SLOs (if not, no load will), and the analytic capacity
   bound r_max. r_max gives the fewest replicas any simulation could need,
   k_min = ceil(demand / r_max), hence a lower bound on cost, k_min * tp * price.
2. Branch and bound: candidates in order of that cost bound; a candidate whose bound is not below
   the `max_plans`-th best cost found so far cannot enter the answer and is pruned unsimulated,
   and a simulated one stops searching at the replica count that would cost as much.
3. The replica search (`search.search_replicas`) probes the per-replica rate demand / k.
4. For the plans returned: the sustainable rate of one replica, narrowed by bisection between a
   rate that met the SLOs and one that missed (`search.refine_rate`), and the predicted p50/p99
   latencies at the planned load traffic / replicas.

replicas = ceil(traffic * (1 + headroom) / sustainable rate), found as the smallest whole k whose
probe at traffic * (1 + headroom) / k meets the SLOs; gpus_total = replicas * tp;
cost_per_hour = gpus_total * price; cost per million output tokens =
cost_per_hour / (traffic * mean output tokens * 3600) * 1e6.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.engine.planning.disaggregated import plan_disaggregated
from app.engine.planning.inputs import GpuOffer, PlanOptions, Slo, Traffic
from app.engine.planning.probes import ProbeRunner, build_sample
from app.engine.planning.results import (
    CandidatePlan,
    CandidateStatus,
    CapacityPlan,
    PredictedLatency,
)
from app.engine.planning.screening import Candidate, finite, screen
from app.engine.planning.search import LOW_LOAD_FRACTION, refine_rate, search_replicas
from app.engine.specs import ModelSpec, SpecError

__all__ = ["plan_capacity"]

_SECONDS_PER_HOUR = 3600.0


def _kth_best(costs: list[float], k: int) -> float:
    return sorted(costs)[k - 1] if len(costs) >= k else math.inf


def _predicted(runner: ProbeRunner, requests_per_s: float) -> PredictedLatency:
    outcome = runner.run(requests_per_s)
    return PredictedLatency(
        requests_per_s_per_replica=requests_per_s,
        ttft_p50_ms=outcome.ttft_p50_ms,
        ttft_p99_ms=outcome.ttft_p99_ms,
        tpot_p50_ms=outcome.tpot_p50_ms,
        tpot_p99_ms=outcome.tpot_p99_ms,
        ttft_p99_ms_by_bucket=outcome.ttft_p99_ms_by_bucket,
        saturated=outcome.saturated,
    )


@dataclass(slots=True)
class _Found:
    candidate: Candidate
    runner: ProbeRunner
    replicas: int
    failing: int | None

    @property
    def cost(self) -> float:
        c = self.candidate
        return self.replicas * c.deployment.tp * c.offer.price_per_gpu_hour_usd


def plan_capacity(
    model: ModelSpec,
    offers: Sequence[GpuOffer],
    traffic: Traffic,
    slo: Slo,
    options: PlanOptions | None = None,
) -> CapacityPlan:
    """Plan `traffic` on `model` over every candidate of `offers` x `options` (module docstring).

    `SpecError` when there is nothing to plan (no GPU offered) or the traffic is impossible.
    """
    options = options or PlanOptions()
    if not offers:
        raise SpecError("gpus", "needs at least one GPU")
    sample = build_sample(traffic, options.probe_requests, options.seed)
    demand = traffic.requests_per_s * (1 + options.headroom)
    live, infeasible = screen(model, offers, sample, slo, options, demand=demand)
    live.sort(key=lambda c: (c.cost_bound, -c.capacity_rps, c.order))
    keep = options.max_plans

    found: list[_Found] = []
    pruned: list[CandidatePlan] = []
    simulations = 0
    for candidate in live:
        threshold = math.inf if options.exhaustive else _kth_best([f.cost for f in found], keep)
        if candidate.cost_bound >= threshold:
            pruned.append(
                candidate.result(
                    CandidateStatus.PRUNED,
                    [
                        f"not simulated: even {candidate.k_min} replica(s) at the analytic "
                        f"capacity cost ${candidate.cost_bound:.2f}/h, not below the "
                        f"${threshold:.2f}/h of the plans returned"
                    ],
                )
            )
            continue
        per_replica = candidate.deployment.tp * candidate.offer.price_per_gpu_hour_usd
        k_limit = max(
            candidate.k_min, math.ceil(demand / (candidate.capacity_rps * LOW_LOAD_FRACTION))
        )
        k_cap = k_limit
        if math.isfinite(threshold):
            k_cap = min(k_limit, math.ceil(threshold / per_replica) - 1)
        runner = ProbeRunner(
            sample,
            candidate.timer,
            kv_capacity_tokens=candidate.kv_capacity_tokens,
            block_tokens=options.block_tokens,
            scheduler=candidate.scheduler,
            slo=slo,
        )
        search = search_replicas(runner, demand, candidate.k_min, k_cap)
        simulations += runner.simulations
        if search.replicas is not None:
            found.append(_Found(candidate, runner, search.replicas, search.largest_failing))
            continue
        misses = "; ".join(search.outcome.misses) if search.outcome else ""
        rate = demand / k_cap
        if k_cap < k_limit:
            pruned.append(
                replace(
                    candidate.result(
                        CandidateStatus.PRUNED,
                        [
                            f"{k_cap} replica(s) ({rate:.2f} requests/s each) miss the SLA "
                            f"({misses}) and more would cost at least the ${threshold:.2f}/h "
                            "of the plans returned"
                        ],
                    ),
                    cost_lower_bound_per_hour_usd=(k_cap + 1) * per_replica,
                    simulations=runner.simulations,
                )
            )
        else:
            infeasible.append(
                replace(
                    candidate.result(
                        CandidateStatus.INFEASIBLE,
                        [
                            f"SLA unreachable even at low load: at {rate:.3g} requests/s per "
                            f"replica, {LOW_LOAD_FRACTION:.3g} of its analytic capacity: {misses}"
                        ],
                    ),
                    simulations=runner.simulations,
                )
            )

    found.sort(key=lambda f: (f.cost, -f.candidate.capacity_rps, f.candidate.order))
    planned: list[CandidatePlan] = []
    for rank, item in enumerate(found):
        c = item.candidate
        if rank >= keep:
            pruned.append(
                replace(
                    c.result(
                        CandidateStatus.PRUNED,
                        [
                            f"needs {item.replicas} replica(s), ${item.cost:.2f}/h: more than the "
                            f"{keep} plan(s) returned"
                        ],
                    ),
                    replicas=item.replicas,
                    cost_lower_bound_per_hour_usd=item.cost,
                    simulations=item.runner.simulations,
                )
            )
            continue
        before = item.runner.simulations
        failing_rps = demand / item.failing if item.failing is not None else c.capacity_rps
        meets_rps, failing_rps = refine_rate(
            item.runner,
            demand / item.replicas,
            failing_rps,
            first_guess_rps=None if item.failing is not None else c.capacity_rps / 1.05,
        )
        predicted = _predicted(item.runner, traffic.requests_per_s / item.replicas)
        simulations += item.runner.simulations - before
        gpus = item.replicas * c.deployment.tp
        # Output tokens per hour of the whole traffic, in millions.
        million_tokens_per_hour = (
            traffic.requests_per_s * sample.mean_output_tokens * _SECONDS_PER_HOUR / 1e6
        )
        planned.append(
            replace(
                c.result(CandidateStatus.PLANNED, []),
                replicas=item.replicas,
                gpus_total=gpus,
                cost_per_hour_usd=item.cost,
                cost_per_million_output_tokens_usd=item.cost / million_tokens_per_hour,
                max_requests_per_s_per_replica=meets_rps,
                failing_requests_per_s_per_replica=finite(failing_rps),
                predicted=predicted,
                simulations=item.runner.simulations,
            )
        )

    disaggregated = None
    if options.disaggregated and found:
        best = found[0]
        disaggregated = plan_disaggregated(
            sample,
            best.candidate.timer,
            best.candidate.deployment,
            best.candidate.offer,
            best.candidate.scheduler,
            kv_capacity_tokens=best.candidate.kv_capacity_tokens,
            block_tokens=options.block_tokens,
            slo=slo,
            traffic_rps=traffic.requests_per_s,
            demand_rps=demand,
            aggregated_cost_per_hour_usd=best.cost,
        )
        simulations += disaggregated.simulations
    pruned.sort(key=lambda p: p.cost_lower_bound_per_hour_usd or 0.0)
    notes = [
        f"each probe simulates {len(sample)} requests (seed {options.seed}); the p99 has "
        f"{len(sample) // 100} requests above it",
        "replicas: the fewest k whose probe at traffic x (1 + headroom) / k meets the SLAs; the "
        "sustainable rate per replica is narrowed to within 5 % or 3 more probes",
    ]
    if pruned:
        notes.append(
            f"{len(pruned)} candidate(s) pruned: they cannot beat the {keep} plan(s) returned "
            "(exhaustive plans them all)"
        )
    if options.disaggregated and not found:
        notes.append("no aggregated plan is feasible, so no disaggregated one was sized")
    return CapacityPlan(
        candidates=(*planned, *pruned, *infeasible),
        demand_requests_per_s=demand,
        mean_prompt_tokens=sample.mean_prompt_tokens,
        mean_output_tokens=sample.mean_output_tokens,
        probe_requests=len(sample),
        simulations=simulations,
        disaggregated=disaggregated.plan if disaggregated is not None else None,
        notes=tuple(notes),
    )
