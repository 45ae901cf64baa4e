"""The capacity planner: for every candidate deployment, the fewest replicas that carry the traffic
within the SLOs, what they cost, and the latencies they give; ranked by cost.

Order of work, cheapest first (a simulation probe costs tens of milliseconds, a closed form
microseconds):

1. Closed forms per candidate (`screening`): does the model fit, does the KV cache hold the
   requests, does a lone request meet the SLOs (if not, no load will), and the analytic capacity
   bound r_max. r_max gives the fewest replicas any simulation could need,
   k_min = ceil(demand / r_max), hence a lower bound on cost, k_min * tp * price.
2. Branch and bound: candidates rank by cost, then by the larger analytic capacity, then by
   screening order (`_rank`); one that cannot rank before the `max_plans`-th plan found so far
   even at k_min replicas is pruned unsimulated, and a simulated one stops searching at the
   replica count that would not rank before it. So the answer is the exhaustive one whatever the
   order, and the order is chosen to simulate little: cheapest first by an estimated cost
   (`screening.estimate_rps`, a heuristic), so that the plans found first prune the rest.
3. The replica search (`search.search_replicas`) probes the per-replica rate demand / k with
   `probe_requests` requests, from a first guess (what the candidate on the same GPU and layout
   with another scheduler needed, else demand / the estimate), clamped to that cap. With
   `confirm_requests` set, it then confirms the k it found with that many (the same requests and
   more), searching upward from k with those if it misses. A
   short probe sees a short stretch of traffic: near saturation its p99 rarely includes the long
   busy periods that set a replica's steady-state p99, so it is slightly optimistic (3,000
   requests: up to some 3 % in sustainable rate; `inputs.DEFAULT_PROBE_REQUESTS`), which can plan
   one replica too few at the margin. The confirmation comes before the candidate's cost can
   prune others, so pruning stays safe.
4. For the plans returned: the sustainable rate of one replica, narrowed by bisection between a
   rate that met the SLOs and one that missed (`search.refine_rate`), and the predicted p50/p99
   latencies at the planned load traffic / replicas, both with the confirming probes if any.

replicas = ceil(traffic * (1 + headroom) / sustainable rate), found as the smallest whole k whose
probe at traffic * (1 + headroom) / k meets the SLOs; gpus_total = replicas * tp;
cost_per_hour = gpus_total * price; cost per million output tokens =
cost_per_hour / (traffic * mean output tokens * 3600) * 1e6 (the traffic itself: headroom is
paid for, not served). Headroom is applied once, to the rate the replicas are sized for; the
predicted latencies are at the traffic without it, traffic / replicas per replica.

The search never probes fewer than k_min replicas, so it relies on the capacity bound being an
upper bound (`analysis.capacity_bound`; it is for `StepCostModel`, mixture-of-experts included).
A candidate still missing the SLOs at `LOW_LOAD_FRACTION` of that bound per replica is reported
infeasible rather than searched further: it would cost at least 1 / LOW_LOAD_FRACTION times its
cost bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from app.engine.counting import kv_bytes_per_token
from app.engine.dtypes import BYTES_PER_ELEMENT, DType
from app.engine.planning.disaggregated import plan_disaggregated
from app.engine.planning.inputs import GpuOffer, PlanOptions, Slo, Traffic
from app.engine.planning.probes import ProbeRunner, ProbeSample, StepBudget, build_sample
from app.engine.planning.progress import PlanProgress
from app.engine.planning.results import (
    BucketLatency,
    CandidatePlan,
    CandidateStatus,
    CapacityPlan,
    ConfidentPlan,
    PredictedLatency,
    usd_per_million_output_tokens,
)
from app.engine.planning.screening import Candidate, finite, screen
from app.engine.planning.search import (
    LOW_LOAD_FRACTION,
    refine_rate,
    search_replicas,
    slowed_rate,
)
from app.engine.simulation import expected_steps
from app.engine.specs import Deployment, ModelSpec, SpecError

__all__ = ["plan_capacity"]


_Rank = tuple[float, float, int]
"""How candidates rank: cost per hour, then the larger analytic capacity, then screening order."""


def _rank(candidate: Candidate, cost: float) -> _Rank:
    return (cost, -candidate.capacity_rps, candidate.order)


def _kth_rank(found: Sequence[_Found], k: int) -> _Rank | None:
    """The rank of the `k`-th best found so far (None: fewer found): a candidate must rank
    before it to enter the answer."""
    if len(found) < k:
        return None
    return sorted(_rank(f.candidate, f.cost) for f in found)[k - 1]


def _predicted(runner: ProbeRunner, requests_per_s: float) -> PredictedLatency:
    outcome = runner.run(requests_per_s)
    return PredictedLatency(
        requests_per_s_per_replica=requests_per_s,
        ttft_p50_ms=outcome.ttft_p50_ms,
        ttft_p99_ms=outcome.ttft_p99_ms,
        tpot_p50_ms=outcome.tpot_p50_ms,
        tpot_p99_ms=outcome.tpot_p99_ms,
        ttft_p99_ms_by_bucket=tuple(
            BucketLatency(bucket.max_prompt_tokens, ms)
            for bucket, ms in zip(
                runner.slo.ttft_buckets, outcome.ttft_p99_ms_by_bucket, strict=True
            )
        ),
        saturated=outcome.saturated,
    )


def _with_quantisation(candidate: CandidatePlan, checkpoint: DType) -> CandidatePlan:
    """`candidate`, saying so when its weights are smaller than the model's checkpoint."""
    smaller = BYTES_PER_ELEMENT[candidate.weight_dtype] < BYTES_PER_ELEMENT[checkpoint]
    return replace(candidate, quantized_from=checkpoint) if smaller else candidate


def _replicas_before(candidate: Candidate, kth: _Rank | None) -> int:
    """The most replicas with which `candidate` ranks before `kth` (None: no limit): those
    costing less, and at an equal cost, if its analytic capacity is larger (or equal and it was
    screened first). What an exhaustive plan would rank ahead, so pruning the rest keeps its
    answer."""
    if kth is None:
        return 2**62
    per_replica = candidate.deployment.gpus * candidate.offer.price_per_gpu_hour_usd
    k = max(0, math.floor(kth[0] / per_replica) + 1)
    while k > 0 and _rank(candidate, candidate.cost(k)) >= kth:  # the division may round
        k -= 1
    while _rank(candidate, candidate.cost(k + 1)) < kth:
        k += 1
    return k


def _notes(sample: ProbeSample, slo: Slo, seed: int) -> list[str]:
    notes = [
        f"each probe simulates {len(sample)} requests (seed {seed}); the p99 has "
        f"{len(sample) // 100} requests above it. They are one stretch of traffic, not "
        "independent draws: near saturation a 3,000-request probe meets the SLAs up to some 3 % "
        "above the rate long runs sustain (confirm_requests 10000 confirms the replica counts)",
        "replicas: the fewest k whose probe at traffic x (1 + headroom) / k meets the SLAs; the "
        "sustainable rate per replica is narrowed to within 5 % or 3 more probes",
    ]
    low = 0
    for bucket in slo.ttft_buckets:
        inside = int(
            np.count_nonzero(
                (sample.prompt_tokens > low) & (sample.prompt_tokens <= bucket.max_prompt_tokens)
            )
        )
        if inside < 100:
            notes.append(
                f"only {inside} probe request(s) have prompts in ({low}, "
                f"{bucket.max_prompt_tokens}] tokens: that bucket's p99 is about its largest "
                "TTFT"
            )
        low = bucket.max_prompt_tokens
    return notes


@dataclass(slots=True)
class _Found:
    candidate: Candidate
    runner: ProbeRunner
    """The runner the replica count was settled with (the confirming one, when there is one)."""
    replicas: int
    failing: int | None
    searched: int = 0
    """Simulations of the searching runner, when `runner` is the confirming one."""

    @property
    def simulations(self) -> int:
        return self.runner.simulations + self.searched

    @property
    def cost(self) -> float:
        return self.candidate.cost(self.replicas)


PROBES_PER_PLANNED_CANDIDATE = 5
"""A returned plan's probes at least: the replica search's first, up to three narrowing the
sustainable rate, one for the predicted latencies."""


def _check_budget(
    live: Sequence[Candidate],
    sample: ProbeSample,
    demand: float,
    keep: int,
    options: PlanOptions,
) -> None:
    """`SpecError` before any probe runs when the plan would need more simulated steps than its
    budget: the candidates that must be planned (the `keep` cheapest by their cost bound; every
    one when exhaustive) times `PROBES_PER_PLANNED_CANDIDATE` probes each, every probe at its
    `expected_steps` at the candidate's first rate (demand / k_min, the busiest and so the
    fewest steps of its probes). An estimate of the least the plan needs, so a plan refused
    here would have run out of budget anyway, after minutes."""
    planned = live if options.exhaustive else live[:keep]
    needed = 0
    for candidate in planned:
        trace = sample.trace(demand / candidate.k_min)
        needed += PROBES_PER_PLANNED_CANDIDATE * expected_steps(
            trace, candidate.timer, candidate.replica_scheduler
        )
    if needed > options.max_simulated_steps:
        raise StepBudget(options.max_simulated_steps).exhausted(
            f"about {needed:,} steps for the {len(planned)} candidate(s) it must plan, "
            "known before any ran"
        )


@dataclass(frozen=True, slots=True)
class _Context:
    """What every candidate's search shares."""

    sample: ProbeSample
    confirm_sample: ProbeSample | None
    traffic: Traffic
    slo: Slo
    options: PlanOptions
    demand: float
    budget: StepBudget


@dataclass(slots=True)
class _Outcomes:
    """The verdicts so far, and the simulations spent on them."""

    found: list[_Found] = field(default_factory=list)
    pruned: list[CandidatePlan] = field(default_factory=list)
    infeasible: list[CandidatePlan] = field(default_factory=list)
    simulations: int = 0
    needed: dict[tuple[str, Deployment], int] = field(default_factory=dict)
    """Replicas found per GPU and layout: a sibling's (another scheduler's) first guess."""


def _search_order(candidate: Candidate, demand: float) -> tuple[float, float, float, int]:
    """Candidates are searched cheapest first by their estimated cost (`estimate_rps`), so that
    the plans found early prune the rest; ties as they rank. Any order gives the same answer
    (pruning only drops what cannot rank before the `max_plans`-th plan found); a good one
    simulates less."""
    guess = candidate.cost(max(candidate.k_min, math.ceil(demand / candidate.estimate_rps)))
    return (guess, candidate.cost_bound, -candidate.capacity_rps, candidate.order)


def plan_capacity(
    model: ModelSpec,
    offers: Sequence[GpuOffer],
    traffic: Traffic,
    slo: Slo,
    options: PlanOptions | None = None,
    *,
    progress: PlanProgress | None = None,
) -> CapacityPlan:
    """Plan `traffic` on `model` over every candidate of `offers` x `options` (module docstring).

    `SpecError` when there is nothing to plan (no GPU offered), the traffic is impossible, there
    are more than `MAX_CANDIDATES` candidates, or the probes would simulate more than
    `options.max_simulated_steps` steps in all. `progress` hears candidates done of candidates
    (the screened-out ones done at once) before each search and after the last; what it raises
    (`PlanCancelled`) stops the plan between candidates.
    """
    options = options or PlanOptions()
    if not offers:
        raise SpecError("gpus", "needs at least one GPU")
    sample = build_sample(traffic, options.probe_requests, options.seed)
    confirm_sample = None
    if options.confirm_requests > options.probe_requests:
        longer = build_sample(traffic, options.confirm_requests, options.seed)
        confirm_sample = longer if len(longer) > len(sample) else None
    demand = traffic.requests_per_s * (1 + options.headroom)
    live, infeasible = screen(model, offers, sample, slo, options, demand=demand)
    live.sort(key=lambda c: (c.cost_bound, -c.capacity_rps, c.order))
    _check_budget(live, sample, demand, options.max_plans, options)
    budget = StepBudget(options.max_simulated_steps)
    context = _Context(sample, confirm_sample, traffic, slo, options, demand, budget)
    outcomes = _Outcomes(infeasible=infeasible)
    total = len(live) + len(infeasible)
    ordered = sorted(live, key=lambda c: _search_order(c, demand))
    for done, candidate in enumerate(ordered, start=len(infeasible)):
        if progress is not None:
            progress.update(done, total)
        _search(candidate, context, outcomes)
    if progress is not None:
        progress.update(total, total)
    outcomes.found.sort(key=lambda f: (f.cost, -f.candidate.capacity_rps, f.candidate.order))
    planned = _size(context, outcomes)
    disaggregated = None
    if options.disaggregated and outcomes.found:
        best = outcomes.found[0]
        disaggregated = plan_disaggregated(
            sample,
            best.candidate.timer,
            best.candidate.deployment,
            best.candidate.offer,
            best.candidate.replica_scheduler,
            kv_capacity_tokens=best.candidate.kv_capacity_tokens,
            block_tokens=options.block_tokens,
            slo=slo,
            traffic_rps=traffic.requests_per_s,
            demand_rps=demand,
            aggregated_cost_per_hour_usd=best.cost,
            budget=budget,
            kv_bytes_per_token=kv_bytes_per_token(model, best.candidate.deployment),
            link=options.kv_link,
        )
        outcomes.simulations += disaggregated.simulations
    outcomes.pruned.sort(key=lambda p: p.cost_lower_bound_per_hour_usd or 0.0)
    everything = (*planned, *outcomes.pruned, *outcomes.infeasible)
    return CapacityPlan(
        candidates=tuple(_with_quantisation(c, model.checkpoint_dtype) for c in everything),
        demand_requests_per_s=demand,
        mean_prompt_tokens=sample.mean_prompt_tokens,
        mean_output_tokens=sample.mean_output_tokens,
        probe_requests=len(sample),
        simulations=outcomes.simulations,
        disaggregated=disaggregated.plan if disaggregated is not None else None,
        notes=tuple(_plan_notes(context, outcomes)),
    )


def _search(candidate: Candidate, context: _Context, outcomes: _Outcomes) -> None:
    """Prune `candidate` by its cost bound, or search its replica count (confirming it with
    the longer sample when there is one) and record what was found, pruned or infeasible."""
    options, demand = context.options, context.demand
    kth = None if options.exhaustive else _kth_rank(outcomes.found, options.max_plans)
    threshold = math.inf if kth is None else kth[0]
    if kth is not None and _rank(candidate, candidate.cost_bound) >= kth:
        outcomes.pruned.append(
            candidate.result(
                CandidateStatus.PRUNED,
                [
                    f"not simulated: even {candidate.k_min} replica(s) at the analytic "
                    f"capacity cost ${candidate.cost_bound:.2f}/h, not below the "
                    f"${threshold:.2f}/h of the plans returned"
                ],
            )
        )
        return
    k_limit = max(candidate.k_min, math.ceil(demand / (candidate.capacity_rps * LOW_LOAD_FRACTION)))
    # k_min ranks before the threshold (not pruned above), so k_cap >= k_min.
    k_cap = max(candidate.k_min, min(k_limit, _replicas_before(candidate, kth)))
    runner = ProbeRunner(
        context.sample,
        candidate.timer,
        kv_capacity_tokens=candidate.kv_capacity_tokens,
        block_tokens=options.block_tokens,
        scheduler=candidate.replica_scheduler,
        slo=context.slo,
        budget=context.budget,
        # Faster than the estimate is expected to miss: such probes try a prefix first.
        prefix_above_rps=candidate.estimate_rps,
    )
    # First guess: what a sibling needed, else the estimate (the search clamps it to k_cap, so
    # a candidate that cannot rank among the plans found usually costs one probe).
    sibling = outcomes.needed.get((candidate.offer.id, candidate.deployment))
    guess = sibling or math.ceil(demand / candidate.estimate_rps)
    search = search_replicas(runner, demand, candidate.k_min, k_cap, first=guess)
    outcomes.simulations += runner.simulations
    searched = 0
    if search.replicas is not None and context.confirm_sample is not None:
        confirmer = runner.like(sample=context.confirm_sample)
        confirmed = search_replicas(confirmer, demand, search.replicas, k_cap)
        outcomes.simulations += confirmer.simulations
        searched, runner = runner.simulations, confirmer
        if confirmed.replicas is not None:
            # The largest k known to miss: the confirming search's, else the short one's
            # (a short probe is the optimistic one: what it misses, a longer one misses).
            failing = confirmed.largest_failing or search.largest_failing
            outcomes.found.append(
                _Found(candidate, confirmer, confirmed.replicas, failing, searched)
            )
            outcomes.needed[(candidate.offer.id, candidate.deployment)] = confirmed.replicas
            return
        search = confirmed
    elif search.replicas is not None:
        outcomes.found.append(_Found(candidate, runner, search.replicas, search.largest_failing))
        outcomes.needed[(candidate.offer.id, candidate.deployment)] = search.replicas
        return
    misses = "; ".join(search.outcome.misses) if search.outcome else ""
    rate = demand / k_cap
    if k_cap < k_limit:
        outcomes.pruned.append(
            replace(
                candidate.result(
                    CandidateStatus.PRUNED,
                    [
                        f"{k_cap} replica(s) ({rate:.2f} requests/s each) miss the SLA "
                        f"({misses}) and more would cost at least the ${threshold:.2f}/h "
                        "of the plans returned"
                    ],
                ),
                cost_lower_bound_per_hour_usd=candidate.cost(k_cap + 1),
                simulations=runner.simulations + searched,
            )
        )
        return
    outcomes.infeasible.append(
        replace(
            candidate.result(
                CandidateStatus.INFEASIBLE,
                [
                    f"SLA unreachable even at low load: at {rate:.3g} requests/s per "
                    f"replica, {LOW_LOAD_FRACTION:.3g} of its analytic capacity "
                    f"({k_cap} replica(s)): {misses}; more replicas were not searched"
                ],
            ),
            simulations=runner.simulations + searched,
        )
    )


def _size(context: _Context, outcomes: _Outcomes) -> list[CandidatePlan]:
    """The `max_plans` cheapest candidates found, planned: their sustainable rate narrowed and
    their latencies predicted at the traffic's share; the others found are pruned."""
    keep, demand, traffic = context.options.max_plans, context.demand, context.traffic
    planned: list[CandidatePlan] = []
    for rank, item in enumerate(outcomes.found):
        c = item.candidate
        if rank >= keep:
            outcomes.pruned.append(
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
                    simulations=item.simulations,
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
        confident = tuple(_confident(item, meets_rps, demand, k) for k in c.offer.slowdowns)
        outcomes.simulations += item.runner.simulations - before
        planned.append(
            replace(
                c.result(CandidateStatus.PLANNED, []),
                replicas=item.replicas,
                gpus_total=item.replicas * c.deployment.gpus,
                cost_per_hour_usd=item.cost,
                cost_per_million_output_tokens_usd=usd_per_million_output_tokens(
                    item.cost, traffic.requests_per_s, context.sample.mean_output_tokens
                ),
                max_requests_per_s_per_replica=meets_rps,
                failing_requests_per_s_per_replica=finite(failing_rps),
                predicted=predicted,
                simulations=item.simulations,
                by_confidence=confident,
            )
        )
    return planned


_CONFIDENT_TOLERANCE = 0.05
_CONFIDENT_PROBES = 6


def _confident(
    item: _Found, meets_rps: float, demand: float, slowdown: tuple[float, float]
) -> ConfidentPlan:
    """A planned candidate sized for one (confidence, k) of its GPU: each replica sustains
    R(SLO / k) / k (`slowed_rate`), searched from the rate it sustains as timed."""
    confidence, k = slowdown
    c = item.candidate
    rate = slowed_rate(
        item.runner,
        k,
        meets_rps,
        c.capacity_rps,
        relative_tolerance=_CONFIDENT_TOLERANCE,
        max_probes=_CONFIDENT_PROBES,
    )
    if rate is None or rate <= 0:
        return ConfidentPlan(confidence, k, None, None, None)
    replicas = max(1, math.ceil(demand / rate * (1 - 1e-9)))
    return ConfidentPlan(confidence, k, rate, replicas, c.cost(replicas))


def _plan_notes(context: _Context, outcomes: _Outcomes) -> list[str]:
    sample, options = context.sample, context.options
    notes = _notes(sample, context.slo, options.seed)
    if context.confirm_sample is not None:
        notes.insert(
            2,
            f"each replica count found is confirmed with {len(context.confirm_sample)} requests "
            f"(the same {len(sample)} and more), and searched upward if it misses there; the "
            "sustainable rate and the predicted latencies come from those longer probes",
        )
    if outcomes.pruned:
        notes.append(
            f"{len(outcomes.pruned)} candidate(s) pruned: they cannot beat the "
            f"{options.max_plans} plan(s) returned (exhaustive plans them all)"
        )
    if options.disaggregated and not outcomes.found:
        notes.append("no aggregated plan is feasible, so no disaggregated one was sized")
    return notes
