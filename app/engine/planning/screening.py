"""Closed-form screening of every candidate deployment, before any simulation: which cannot
work at all (and why), and for the rest the analytic capacity and the cost lower bound that order
and prune the search (see `app.engine.planning.planner`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from app.engine.counting import validate_layout
from app.engine.memory import memory_plan, weight_bytes_per_gpu
from app.engine.parallelism import beyond_a_node, layout_reasons, moe_layouts
from app.engine.planning.analysis import (
    LoadStats,
    capacity_bound,
    lone_decode_seconds,
    lone_prefill_seconds,
)
from app.engine.planning.inputs import (
    MAX_CANDIDATES,
    GpuOffer,
    PlanOptions,
    Slo,
    step_cost_timer,
)
from app.engine.planning.probes import ProbeSample
from app.engine.planning.results import CandidatePlan, CandidateStatus
from app.engine.planning.search import LOW_LOAD_FRACTION
from app.engine.profiles import ProfiledStepCost
from app.engine.simulation import SchedulerConfig, StepTimer, kv_capacity_tokens
from app.engine.specs import IDEAL_EFFICIENCY, Deployment, ModelSpec, SpecError
from app.engine.step_cost import StepCostModel
from app.engine.units import GB, MS_PER_S

__all__ = ["MAX_REJECTED_FRACTION", "Candidate", "estimate_rps", "finite", "screen"]

MAX_REJECTED_FRACTION = 0.01  # more requests than this beyond the KV cache: does not fit


def finite(value: float) -> float | None:
    """None for an unbounded rate (a timer that says some step takes no time)."""
    return value if math.isfinite(value) else None


@dataclass(slots=True)
class Candidate:
    """A candidate that passed the closed-form checks, with what the search needs."""

    order: int
    offer: GpuOffer
    deployment: Deployment
    scheduler: SchedulerConfig
    timer: StepTimer
    kv_capacity_tokens: int
    replication: float
    reasons: list[str]
    capacity_rps: float
    estimate_rps: float
    """A guess at the sustainable rate (`estimate_rps`): where the search looks first."""
    k_min: int
    cost_bound: float

    def cost(self, replicas: int) -> float:
        """USD per hour of `replicas` replicas (the one expression every comparison uses)."""
        return replicas * self.deployment.gpus * self.offer.price_per_gpu_hour_usd

    @property
    def replica_scheduler(self) -> SchedulerConfig:
        """What the simulator runs: every attention data-parallel rank's budget."""
        return self.scheduler.for_ranks(self.deployment.scheduler_batches)

    def result(self, status: CandidateStatus, reasons: Sequence[str]) -> CandidatePlan:
        return CandidatePlan(
            gpu=self.offer.id,
            tp=self.deployment.tp,
            pp=self.deployment.pp,
            dp=self.deployment.dp,
            ep=self.deployment.ep,
            weight_dtype=self.deployment.weight_dtype,
            kv_dtype=self.deployment.kv_dtype,
            max_num_seqs=self.scheduler.max_num_seqs,
            chunk_tokens=self.scheduler.max_num_batched_tokens,
            status=status,
            price_per_gpu_hour_usd=self.offer.price_per_gpu_hour_usd,
            reasons=(*self.reasons, *reasons),
            kv_head_replication=self.replication,
            kv_capacity_tokens=self.kv_capacity_tokens,
            analytic_max_requests_per_s_per_replica=finite(self.capacity_rps),
            cost_lower_bound_per_hour_usd=self.cost_bound,
            engine=self.offer.engine.label,
            basis=self.offer.basis(self.timer),
            warnings=self.offer.warnings,
        )


@dataclass(frozen=True, slots=True)
class _Lengths:
    """The sample percentiles the lone-request checks use."""

    prompt_p99: int
    bucket_prompt_p99: tuple[int | None, ...]
    mid_context_p99: int

    @classmethod
    def of(cls, sample: ProbeSample, slo: Slo) -> _Lengths:
        prompts = sample.prompt_tokens
        buckets: list[int | None] = []
        low = 0
        for bucket in slo.ttft_buckets:
            inside = prompts[(prompts > low) & (prompts <= bucket.max_prompt_tokens)]
            buckets.append(math.ceil(np.percentile(inside, 99)) if len(inside) else None)
            low = bucket.max_prompt_tokens
        # A lone request's TPOT is its decode step at mid-life context P + T/2.
        mid = prompts + sample.output_tokens / 2
        return cls(
            prompt_p99=math.ceil(np.percentile(prompts, 99)),
            bucket_prompt_p99=tuple(buckets),
            mid_context_p99=math.ceil(np.percentile(mid, 99)),
        )


def _infeasible(
    offer: GpuOffer,
    deployment: Deployment,
    reason: str,
    *,
    replication: float,
    scheduler: SchedulerConfig | None = None,
    timer: StepTimer | None = None,
) -> CandidatePlan:
    return CandidatePlan(
        gpu=offer.id,
        tp=deployment.tp,
        pp=deployment.pp,
        dp=deployment.dp,
        ep=deployment.ep,
        weight_dtype=deployment.weight_dtype,
        kv_dtype=deployment.kv_dtype,
        max_num_seqs=scheduler.max_num_seqs if scheduler else None,
        chunk_tokens=scheduler.max_num_batched_tokens if scheduler else None,
        status=CandidateStatus.INFEASIBLE,
        price_per_gpu_hour_usd=offer.price_per_gpu_hour_usd,
        reasons=(reason,),
        kv_head_replication=replication,
        engine=offer.engine.label,
        basis=offer.basis(timer),
        warnings=offer.warnings,
    )


def _schedulers(model: ModelSpec, offer: GpuOffer, options: PlanOptions) -> list[SchedulerConfig]:
    """The candidates' schedulers on `offer`: its engine's, with each batch cap and chunk asked
    for; where the options leave batch caps or chunks out, the engine's own
    (`GpuOffer.plan_schedulers`)."""
    given_seqs, given_chunks = options.max_num_seqs_candidates, options.chunk_tokens_candidates
    engines = offer.plan_schedulers(model)
    if given_seqs is None and given_chunks is None:
        return list(engines)
    all_seqs = given_seqs or tuple(dict.fromkeys(s.max_num_seqs for s in engines))
    chunks = given_chunks or tuple(dict.fromkeys(s.max_num_batched_tokens for s in engines))
    seen: dict[tuple[int, int], SchedulerConfig] = {}
    for seqs in all_seqs:
        for chunk in chunks:
            # A chunked step holds every running decode: max_num_seqs <= the chunk (vLLM).
            key = (min(seqs, chunk), chunk)
            if key not in seen:
                seen[key] = offer.scheduler(model, *key)
    return list(seen.values())


def _slo_miss_alone(
    timer: StepTimer, chunk: int, slo: Slo, lengths: _Lengths
) -> tuple[str | None, float]:
    """Why a lone request already misses an SLO (then no load meets it), or None; and the largest
    share of an objective a lone request already takes (its p99 TTFT over each TTFT objective,
    its TPOT over the TPOT objective)."""
    ttft_ms = lone_prefill_seconds(timer, lengths.prompt_p99, chunk) * MS_PER_S
    share = ttft_ms / slo.ttft_p99_ms
    if ttft_ms > slo.ttft_p99_ms:
        return (
            f"SLA unreachable even at low load: a lone {lengths.prompt_p99}-token prompt (the "
            f"p99) takes {ttft_ms:.0f} ms to prefill in {chunk}-token chunks, over the TTFT p99 "
            f"SLO of {slo.ttft_p99_ms:g} ms"
        ), share
    for bucket, prompt in zip(slo.ttft_buckets, lengths.bucket_prompt_p99, strict=True):
        if prompt is None:
            continue
        ttft_ms = lone_prefill_seconds(timer, prompt, chunk) * MS_PER_S
        share = max(share, ttft_ms / bucket.ttft_p99_ms)
        if ttft_ms > bucket.ttft_p99_ms:
            return (
                f"SLA unreachable even at low load: a lone {prompt}-token prompt (the p99 of "
                f"prompts up to {bucket.max_prompt_tokens} tokens) takes {ttft_ms:.0f} ms to "
                f"prefill, over that bucket's TTFT p99 SLO of {bucket.ttft_p99_ms:g} ms"
            ), share
    tpot_ms = lone_decode_seconds(timer, lengths.mid_context_p99) * MS_PER_S
    share = max(share, tpot_ms / slo.tpot_p99_ms)
    if tpot_ms > slo.tpot_p99_ms:
        return (
            f"SLA unreachable even at low load: one sequence alone decodes at {tpot_ms:.1f} ms "
            f"per token at {lengths.mid_context_p99} tokens of context, over the TPOT p99 SLO "
            f"of {slo.tpot_p99_ms:g} ms"
        ), share
    return None, share


def estimate_rps(capacity_rps: float, lone_share: float) -> float:
    """A guess at the rate one replica sustains within the SLOs, for ordering the search and
    placing its first probe only (never a bound: plans do not depend on it).

    The capacity bound less the share of the tightest objective a lone request already takes:
    queueing may only use the rest. Heuristic, fitted by eye to the planner's probes (Llama-3.1-70B
    on the catalog's GPUs: within some 15 % of the rate found, up to 50 % high where a lone
    request takes over half the TTFT objective); a floor of `LOW_LOAD_FRACTION` of the bound."""
    return capacity_rps * max(1.0 - lone_share, LOW_LOAD_FRACTION)


def _timer(
    model: ModelSpec, offer: GpuOffer, deployment: Deployment, options: PlanOptions
) -> StepTimer | str:
    """The deployment's step timer, or why the deployment is impossible whatever the scheduler."""
    if deployment.tp > options.gpus_per_node:
        return f"tp {deployment.tp} exceeds the {options.gpus_per_node} GPUs of a node"
    try:
        validate_layout(model, deployment)  # whatever the timer checks
        if options.timer_factory is not step_cost_timer:
            return options.timer_factory(model, offer.gpu, deployment, offer.timing_efficiency)
        if offer.profile is not None:
            return ProfiledStepCost(
                model, offer.gpu, deployment, offer.profile, measured_on=offer.measured_on
            )
        graphs = () if offer.efficiency is IDEAL_EFFICIENCY else offer.graph_sizes(deployment.tp)
        return StepCostModel(model, offer.gpu, deployment, offer.timing_efficiency, graphs)
    except SpecError as error:
        return error.message


def _kv_capacity(
    model: ModelSpec,
    offer: GpuOffer,
    deployment: Deployment,
    scheduler: SchedulerConfig,
    options: PlanOptions,
    *,
    footprint_tokens: NDArray[np.int64],
) -> tuple[int, str | None, str | None]:
    """The replica's KV cache in whole blocks, why it does not fit the requests (if not), and a
    caveat when it fits all but a few of them."""
    memory = memory_plan(
        model,
        offer.gpu,
        deployment,
        gpu_memory_utilization=options.gpu_memory_utilization,
        max_num_batched_tokens=scheduler.max_num_batched_tokens,
        max_num_seqs=scheduler.max_num_seqs,
    )
    block = options.block_tokens
    tokens = kv_capacity_tokens(memory, block)
    if tokens < block:
        return (
            tokens,
            (
                f"does not fit: {memory.weights_bytes / GB:.1f} GB of weights and "
                f"{memory.activation_reserve_bytes / GB:.1f} GB of activations per GPU leave no KV "
                f"cache in {memory.usable_bytes / GB:.1f} GB usable"
            ),
            None,
        )
    # The simulator rejects a request whose last decode step needs more blocks than there are.
    too_long = np.count_nonzero(-(-footprint_tokens // block) * block > tokens)
    share = too_long / len(footprint_tokens)
    if share > MAX_REJECTED_FRACTION:
        return (
            tokens,
            f"does not fit: the KV cache holds {tokens} tokens per replica and {share:.1%} of "
            "the requests need more",
            None,
        )
    if too_long:
        return (
            tokens,
            None,
            f"{share:.2%} of the requests need more KV cache than a replica's {tokens} tokens: "
            "they cannot be served on it (the probes count them as missing the TTFT SLO)",
        )
    return tokens, None, None


def screen(
    model: ModelSpec,
    offers: Sequence[GpuOffer],
    sample: ProbeSample,
    slo: Slo,
    options: PlanOptions,
    *,
    demand: float,
) -> tuple[list[Candidate], list[CandidatePlan]]:
    """Closed-form checks of every candidate: the live ones and the infeasible ones."""
    stats = LoadStats.of(sample)
    lengths = _Lengths.of(sample, slo)
    footprint = sample.prompt_tokens + sample.output_tokens - 1  # KV of the last decode step
    live: list[Candidate] = []
    infeasible: list[CandidatePlan] = []
    schedulers = {id(offer): _schedulers(model, offer, options) for offer in offers}
    deployments = [
        (offer, layout)
        for offer in offers
        for weight_dtype, kv_dtype in options.dtype_pairs
        for layout in layouts(
            model,
            offer,
            Deployment(
                weight_dtype=weight_dtype,
                kv_dtype=kv_dtype or offer.kv_dtype(model, weight_dtype),
            ),
            options,
        )
    ]
    count = sum(len(schedulers[id(offer)]) for offer, _ in deployments)
    if count > MAX_CANDIDATES:
        raise SpecError(
            "candidates",
            f"{len(offers)} GPU(s) x {len(options.tp_candidates)} tp (and their dp, ep, pp "
            f"layouts) x {len(options.dtype_pairs)} format pair(s) x "
            f"{max(len(found) for found in schedulers.values())} scheduler setting(s) = "
            f"{count} candidates, over the {MAX_CANDIDATES} a plan may screen",
        )
    for offer, deployment in deployments:
        replication = 1.0 if model.mla else max(1.0, deployment.tp / model.num_kv_heads)
        timer = _timer(model, offer, deployment, options)
        if isinstance(timer, str):
            infeasible.append(_infeasible(offer, deployment, timer, replication=replication))
            continue
        reasons = layout_reasons(model, deployment)
        if replication > 1:
            reasons.append(
                f"KV heads replicated: tp {deployment.tp} exceeds the model's "
                f"{model.num_kv_heads} KV heads, so each is held {replication:g} times"
            )
        for scheduler in schedulers[id(offer)]:
            chunk = scheduler.max_num_batched_tokens
            kv_tokens, why, caveat = _kv_capacity(
                model, offer, deployment, scheduler, options, footprint_tokens=footprint
            )
            # Without chunked prefill a lone prompt is prefilled whole.
            lone_chunk = chunk if scheduler.enable_chunked_prefill else model.max_context_tokens
            lone_why, lone_share = _slo_miss_alone(timer, lone_chunk, slo, lengths)
            why = why or lone_why
            if why is not None:
                infeasible.append(
                    _infeasible(
                        offer,
                        deployment,
                        why,
                        replication=replication,
                        scheduler=scheduler,
                        timer=timer,
                    )
                )
                continue
            ranks = scheduler.for_ranks(deployment.scheduler_batches)
            capacity = capacity_bound(
                timer,
                stats,
                chunk_tokens=ranks.max_num_batched_tokens,
                max_num_seqs=ranks.max_num_seqs,
                kv_capacity_tokens=kv_tokens,
            )
            caveats = [caveat] if caveat else []
            held = kv_tokens / max(stats.mean_decode_context, 1.0)
            if held < ranks.max_num_seqs:
                per_rank = f" per rank x {deployment.dp}" if deployment.dp > 1 else ""
                caveats.append(
                    f"KV-limited batch: the cache holds about {held:.0f} sequences at the mean "
                    f"decode context of {stats.mean_decode_context:.0f} tokens, fewer than "
                    f"max_num_seqs {scheduler.max_num_seqs}{per_rank}"
                )
            k_min = max(1, math.ceil(demand / capacity))
            live.append(
                Candidate(
                    order=len(live),
                    offer=offer,
                    deployment=deployment,
                    scheduler=scheduler,
                    timer=timer,
                    kv_capacity_tokens=kv_tokens,
                    replication=replication,
                    reasons=[*reasons, *caveats],
                    capacity_rps=capacity,
                    estimate_rps=estimate_rps(capacity, lone_share),
                    k_min=k_min,
                    cost_bound=k_min * deployment.gpus * offer.price_per_gpu_hour_usd,
                )
            )
    return live, infeasible


def layouts(
    model: ModelSpec, offer: GpuOffer, formats: Deployment, options: PlanOptions
) -> list[Deployment]:
    """The layouts a plan screens for one GPU and pair of formats.

    Every tp candidate; with `options.layouts`, for an MoE model also attention data
    parallelism (dp x tp within a node), experts sliced or expert-parallel, and, when the model
    does not fit one node at the widest tp, pipeline stages of that tp (and, for an MoE model,
    dp x ep across nodes). Pruned on what needs no timing: only layouts whose weights fit
    (`weight_bytes_per_gpu`) go beyond plain tp."""
    found = [replace(formats, tp=tp) for tp in options.tp_candidates]
    if not options.layouts:
        return found
    usable = options.gpu_memory_utilization * offer.gpu.memory_bytes

    def fits(layout: Deployment) -> bool:
        try:
            validate_layout(model, layout)
            return weight_bytes_per_gpu(model, layout) < usable
        except SpecError:
            return False

    node = options.gpus_per_node
    if model.moe is not None:
        moe = moe_layouts(formats, options.tp_candidates, node)
        found += [layout for layout in moe if fits(layout)]
    widest, pipelines, across_nodes = beyond_a_node(model, formats, options.tp_candidates, node)
    if not fits(widest):
        # The fewest stages, and the fewest nodes, that hold it.
        for group in (pipelines, across_nodes):
            first = next((layout for layout in group if fits(layout)), None)
            if first is not None:
                found.append(first)
    return found
