"""The highest request rate one replica sustains within latency SLOs, found by simulation with
the planner's own machinery. Pure: frozen inputs, frozen answer, no I/O.

The replica is screened exactly as the capacity planner screens a candidate
(`app.engine.planning.screening.screen` with one GPU, one layout, one pair of formats, one
scheduler setting): the same step timer, KV cache and scheduler. Its probes are the planner's
(`ProbeRunner` over the same sample of `probe_requests` requests drawn with `seed`), so a rate
this answers is one the planner's probe would judge the same way. The search:

1. The analytic capacity bound r_max (`screening`: no simulation sustains more) is the first
   rate known to fail.
2. Probe at the planner's estimate of the sustainable rate; while it misses, halve it, down to
   `LOW_LOAD_FRACTION` of r_max, where a miss means the SLOs cannot be met at any load.
3. Narrow [met, failing] by geometric bisection (`search.refine_rate`) until the failing rate is
   within `relative_tolerance` of the met one.

The answer is the highest rate probed that met the SLOs: within `relative_tolerance` below the
boundary the planner's probes see (a verdict monotone in the rate).

At a confidence c, the rate is the one at which the SLOs hold if real step times are k times the
predicted ones, k being the c-quantile of how far published runs of this kind of answer landed
from it (`app.validation.record.Record.slowdown`, the larger of TTFT's and TPOT's): a replica
whose every step takes k times as long serves rate r exactly as the predicted one serves k r,
every latency k times as long, so it sustains R(SLO / k) / k, R being the search above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from app.engine.dtypes import DType
from app.engine.planning import DEFAULT_MAX_SIMULATED_STEPS, GpuOffer, PlanOptions, Slo, Traffic
from app.engine.planning.probes import (
    ProbeOutcome,
    ProbeRunner,
    ProbeSample,
    StepBudget,
    build_sample,
)
from app.engine.planning.screening import Candidate, screen
from app.engine.planning.search import highest_rate, slowed_rate
from app.engine.specs import ModelSpec, SpecError
from app.validation.record import kind_of, shipped_record

__all__ = [
    "DEFAULT_RELATIVE_TOLERANCE",
    "CapacityAnswer",
    "CapacityQuestion",
    "ReplicaLayout",
    "replicas_for",
    "sustainable_rate",
]

DEFAULT_RELATIVE_TOLERANCE = 0.01
"""The failing rate found is within 1 % of the met one."""
_MAX_NARROWING_PROBES = 24  # from a bracket of 8x, 1 % takes 8 probes


@dataclass(frozen=True, slots=True)
class ReplicaLayout:
    """One replica: GPUs, formats and scheduler, as a plan candidate has them."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    weight_dtype: DType = DType.BF16
    kv_dtype: DType = DType.BF16
    max_num_seqs: int | None = None
    """Per attention data-parallel rank; lowered to `chunk_tokens` as the planner does. None:
    the engine's default on the GPU (`GpuOffer.default_scheduler`)."""
    chunk_tokens: int | None = None
    """None: the engine's default token budget."""
    gpu_memory_utilization: float = 0.9
    gpus_per_node: int = 8


@dataclass(frozen=True, slots=True)
class CapacityQuestion:
    """A deployment and the traffic mix and SLOs it must meet."""

    model: ModelSpec
    offer: GpuOffer
    layout: ReplicaLayout
    traffic: Traffic
    """Length distributions (or a trace); its rate is not used."""
    slo: Slo
    probe_requests: int = 3000
    seed: int = 0
    relative_tolerance: float = DEFAULT_RELATIVE_TOLERANCE
    confidences: tuple[float, ...] = ()
    """Confidences to find the rate at, besides the prediction's own (module docstring)."""


@dataclass(frozen=True, slots=True)
class ConfidentRate:
    """The rate one replica sustains with the SLOs holding at a confidence."""

    confidence: float
    slowdown: float
    """How many times the predicted step times real ones may be (the confidence's quantile)."""
    requests_per_s: float | None
    """None: the SLOs cannot be met at any load that slow."""


@dataclass(frozen=True, slots=True)
class CapacityAnswer:
    """What one replica sustains within the SLOs, and its latencies there."""

    requests_per_s: float
    """The highest rate probed that met the SLOs."""
    failing_requests_per_s: float
    """The lowest rate known to miss them: a probe, or the analytic bound."""
    analytic_max_requests_per_s: float
    predicted: ProbeOutcome
    """The probe at `requests_per_s`: p50/p99 TTFT and TPOT."""
    kv_capacity_tokens: int
    simulations: int
    probe_requests: int
    reasons: tuple[str, ...]
    """The screening's caveats (a KV-limited batch, ...)."""
    max_num_seqs: int
    """The scheduler simulated: its batch cap per rank and token budget."""
    chunk_tokens: int
    basis: dict[str, str]
    """What timed each op family (`GpuOffer.basis`)."""
    residual_pct: Mapping[str, float] | None
    """The held-out errors of the profile that timed it, by op family (None: the roofline)."""
    confident: tuple[ConfidentRate, ...] = ()
    """The rate at each of the question's confidences that published runs can inform."""


def _candidate(question: CapacityQuestion, options: PlanOptions, sample: ProbeSample) -> Candidate:
    """The replica as the planner screens it; `SpecError` naming the field when it cannot work."""
    layout = question.layout
    live, infeasible = screen(
        question.model, (question.offer,), sample, question.slo, options, demand=1.0
    )
    wanted = (layout.tp, layout.pp, layout.dp, layout.ep)
    for candidate in live:
        d = candidate.deployment
        if (d.tp, d.pp, d.dp, d.ep) == wanted:
            return candidate
    for plan in infeasible:
        if (plan.tp, plan.pp, plan.dp, plan.ep) == wanted:
            why = "; ".join(plan.reasons)
            raise SpecError("slo" if "SLA unreachable" in why else "tp", why)
    raise SpecError(
        "tp",
        f"tp {layout.tp} x dp {layout.dp} x pp {layout.pp} (ep {layout.ep}) is not a layout the "
        "planner considers for this model on this GPU",
    )


def sustainable_rate(question: CapacityQuestion) -> CapacityAnswer:
    """The highest rate one replica sustains within the SLOs (module docstring). `SpecError`
    naming the field when the replica cannot work or meets the SLOs at no load."""
    layout = question.layout
    if not 0 < question.relative_tolerance < 1:
        raise SpecError("relative_tolerance", "must be in (0, 1)")
    default = question.offer.default_scheduler(question.model)
    options = PlanOptions(
        tp_candidates=(layout.tp,),
        dtype_pairs=((layout.weight_dtype, layout.kv_dtype),),
        max_num_seqs_candidates=(layout.max_num_seqs or default.max_num_seqs,),
        chunk_tokens_candidates=(layout.chunk_tokens or default.max_num_batched_tokens,),
        headroom=0.0,
        gpus_per_node=layout.gpus_per_node,
        gpu_memory_utilization=layout.gpu_memory_utilization,
        probe_requests=question.probe_requests,
        confirm_requests=0,
        seed=question.seed,
        max_plans=1,
        exhaustive=True,
        layouts=(layout.pp, layout.dp, layout.ep) != (1, 1, 1),
    )
    sample = build_sample(question.traffic, options.probe_requests, options.seed)
    candidate = _candidate(question, options, sample)
    bound = candidate.capacity_rps
    if not math.isfinite(bound):
        raise SpecError("gpu", "the step timer gives no finite capacity for this replica")
    runner = ProbeRunner(
        sample,
        candidate.timer,
        kv_capacity_tokens=candidate.kv_capacity_tokens,
        block_tokens=options.block_tokens,
        scheduler=candidate.replica_scheduler,
        slo=question.slo,
        budget=StepBudget(DEFAULT_MAX_SIMULATED_STEPS),
    )
    start = min(candidate.estimate_rps, bound)
    met, failing = highest_rate(
        runner,
        start,
        bound,
        relative_tolerance=question.relative_tolerance,
        max_probes=_MAX_NARROWING_PROBES,
    )
    basis = question.offer.basis(candidate.timer)
    confident = tuple(
        _confident_rate(question, basis, confidence, runner, start, bound)
        for confidence in question.confidences
    )
    return CapacityAnswer(
        requests_per_s=met,
        failing_requests_per_s=failing,
        analytic_max_requests_per_s=bound,
        predicted=runner.run(met),
        kv_capacity_tokens=candidate.kv_capacity_tokens,
        simulations=runner.simulations,
        probe_requests=len(sample),
        reasons=tuple(candidate.reasons),
        max_num_seqs=candidate.scheduler.max_num_seqs,
        chunk_tokens=candidate.scheduler.max_num_batched_tokens,
        basis=basis,
        residual_pct=profile.residual_pct if (profile := question.offer.profile) else None,
        confident=tuple(c for c in confident if c is not None),
    )


def _confident_rate(  # noqa: PLR0917 - the search's state, passed on
    question: CapacityQuestion,
    basis: Mapping[str, str],
    confidence: float,
    runner: ProbeRunner,
    start: float,
    bound: float,
) -> ConfidentRate | None:
    """The rate at `confidence` (module docstring): R(SLO / k) / k, with k the larger of the
    TTFT and TPOT quantiles of answers of this kind under load; None where no published run
    informs them."""
    record = shipped_record()
    kind = kind_of(question.model, str(question.offer.engine.name), basis)
    k = record.answer_slowdown(*kind, "under load", confidence)
    if k is None:
        return None
    rate = slowed_rate(
        runner,
        k,
        start,
        bound,
        relative_tolerance=question.relative_tolerance,
        max_probes=_MAX_NARROWING_PROBES,
    )
    return ConfidentRate(confidence, k, rate)


def replicas_for(requests_per_s: float, per_replica_rps: float, headroom: float) -> int:
    """Replicas that carry `requests_per_s` x (1 + `headroom`) at `per_replica_rps` each (at
    least one): ceil(rate x (1 + headroom) / per-replica rate), as the planner sizes."""
    if per_replica_rps <= 0 or requests_per_s < 0 or headroom < 0:
        raise SpecError("observed_requests_per_s", "rates must be positive, headroom not negative")
    # A relative 1e-9 absorbs float noise: 10 x 1.2 / 6 is exactly 2 replicas, not 3.
    return max(1, math.ceil(requests_per_s * (1 + headroom) / per_replica_rps * (1 - 1e-9)))
