"""Capacity plans: resolve the model and the candidate GPUs with their prices, plan with the
engine, and store the request, the answer and the catalog versions used.

A plan is a job (`app.plans.queue` hands it to a worker, `app.plans.jobs` runs it): `queue_plan`
stores it `queued`, a worker plans it (`compute_plan`, in a heavy-work process, reporting
progress) and closes it with `finish_plan` or `fail_plan` (`fail_queued_plan` when the job
queue refused it); `cancel_or_delete_plan` stops one still to finish, or forgets a finished one.

The answer is stored as the JSON document the API returns (`plans`, `pruned`, `disaggregated`,
...), so reading a plan back months later shows exactly what it said, whatever the catalog says
now; `catalog_versions` says which versions of the entries it was computed from.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session

from app.catalog.orm import utcnow
from app.catalog.profiles import choose_engine
from app.catalog.service import list_gpus
from app.catalog.spec_cache import SpecCache
from app.db.pages import Page
from app.engine.dtypes import DType
from app.engine.planning import (
    CandidatePlan,
    CandidateStatus,
    CapacityPlan,
    GpuOffer,
    PlanOptions,
    Slo,
    Traffic,
    TtftBucket,
    plan_capacity,
)
from app.engine.planning.progress import PlanProgress
from app.engine.specs import IDEAL_EFFICIENCY, ModelSpec
from app.errors import (
    Conflict,
    DomainError,
    FieldProblem,
    Forbidden,
    InvalidInput,
    PlanNotFound,
    spec_errors,
)
from app.plans.queries import MAX_TRAFFIC_REQUESTS_PER_S, PlanQuery
from app.plans.repository import PlanRepository, PlanRow, PlanStatus
from app.plans.schemas import CandidateRead, DisaggregatedRead, PlanRead
from app.simulations.service import (
    MIN_REQUESTS_PER_S,
    check_trace_lengths,
    length_distribution,
    trace_from_rows,
)
from app.targets.service import (
    SIMULATED_RECORD_METRICS,
    EfficiencyMode,
    error_intervals,
    resolve_model,
    simulated_error,
)
from app.validation.record import family_of, kind_of, shipped_record
from app.validation.schemas import ErrorInterval

__all__ = [
    "MAX_TRAFFIC_REQUESTS_PER_S",
    "ComputedPlan",
    "PlanFailed",
    "PlanJob",
    "PlanNotDone",
    "PlanQuery",
    "PlanQueueFull",
    "PlanQueueUnavailable",
    "cancel_or_delete_plan",
    "compute_plan",
    "fail_plan",
    "fail_queued_plan",
    "finish_plan",
    "forget_plan",
    "get_plan",
    "list_plans",
    "plan_in_full",
    "prepare_plan",
    "problem_of",
    "queue_plan",
]


class PlanNotDone(Conflict):
    """A plan's answer was asked for (drawn) before the plan was done."""

    def __init__(self, plan_id: str, status: str, progress: float) -> None:
        super().__init__(
            f"Plan {plan_id!r} is {status} ({progress:.0%} of its candidates done): only a "
            "done plan can be drawn; poll GET /v1/plans/{id} until its status is done."
        )
        self.plan_id = plan_id


class PlanQueueFull(DomainError):
    """Too many plans are queued or running already."""

    status = 429
    slug = "too-many-requests"
    title = "Too many requests"

    def __init__(self, waiting: int, retry_after_s: int) -> None:
        super().__init__(
            f"{waiting} plan(s) queued or running already, as many as this service takes; "
            "retry shortly."
        )
        self.headers = {"Retry-After": str(retry_after_s)}


class PlanQueueUnavailable(DomainError):
    """The job queue did not take a stored plan (its database went away after the plan was
    stored); the plan is stored failed with this problem."""

    status = 503
    slug = "queue-unavailable"
    title = "Service unavailable"

    def __init__(self) -> None:
        super().__init__(
            "The plan could not be handed to the job queue, so it was not started; retry shortly."
        )
        self.headers = {"Retry-After": "5"}


class PlanFailed(DomainError):
    """The problem a plan failed with, raised again (a plan that fails within the wait of its
    POST answers as a synchronous plan would have)."""

    def __init__(self, problem: Mapping[str, Any]) -> None:
        super().__init__(
            str(problem["detail"]),
            tuple(FieldProblem(e["field"], e["message"]) for e in problem.get("errors", [])),
        )
        self.status = int(problem["status"])
        self.slug = str(problem["type"]).rsplit("/", 1)[-1]
        self.title = str(problem["title"])


def problem_of(error: DomainError) -> dict[str, Any]:
    """`error` as the problem a failed plan stores (`PlanProblem`)."""
    return {
        "type": f"/problems/{error.slug}",
        "title": error.title,
        "status": error.status,
        "detail": error.detail,
        "errors": [{"field": e.field, "message": e.message} for e in error.errors],
    }


def _offers(
    session: Session, cache: SpecCache, query: PlanQuery, family: str
) -> tuple[list[GpuOffer], dict[str, int], dict[str, dict[str, float]]]:
    """The candidate GPUs with their prices, the catalog versions read and each GPU's
    validation residuals; 422 naming `gpus[i]` for an unknown or unpriced GPU,
    `price_overrides.<id>` for an unknown override."""
    overrides = dict(query.price_overrides)
    for gpu_id in overrides:
        cache.gpu(gpu_id, f"price_overrides.{gpu_id}")  # 422 when the catalog has no such GPU
    explicit = query.gpus is not None
    if query.gpus is not None:
        ids = list(query.gpus)
    else:
        page = list_gpus(session, vendor=None, min_memory_bytes=None, limit=10**6, offset=0)
        ids = [
            row.id
            for row in page.items
            if row.price_per_gpu_hour_usd is not None or row.id in overrides
        ]
    offers: list[GpuOffer] = []
    versions: dict[str, int] = {}
    errors: dict[str, dict[str, float]] = {}
    for i, gpu_id in enumerate(ids):
        name = f"gpus[{i}]"
        cached = cache.gpu(gpu_id, name)
        price = overrides.get(gpu_id, cached.price_per_gpu_hour_usd)
        if price is None:
            raise InvalidInput.at(
                name,
                f"GPU {gpu_id!r} has no price in the catalog: give one in "
                f"price_overrides.{gpu_id} (USD per GPU-hour)",
            )
        efficiency = IDEAL_EFFICIENCY if query.efficiency is EfficiencyMode.IDEAL else None
        choice = choose_engine(
            query.engine,
            cached.profiles,
            gpu=gpu_id,
            measured=efficiency is None,
            relatives=cache.relatives_of(cached),
        )
        profile = cache.profile(choice.profile) if choice.profile is not None else None
        measured_on = cache.measured_on(choice)
        offers.append(
            GpuOffer(
                cached.spec,
                price,
                efficiency,
                profile,
                choice.engine,
                warnings=choice.warnings,
                roofline_basis=choice.basis,
                measured_on=None if measured_on is None else measured_on.spec,
                slowdowns=_slowdowns(
                    query,
                    (
                        family,
                        str(choice.engine.name),
                        _offer_basis(profile is not None, measured_on is not None),
                    ),
                ),
            )
        )
        versions[cached.spec.id] = cached.version
        errors[cached.spec.id] = dict(cached.expected_error_pct)
    if not offers:
        field_name = "gpus" if explicit else "price_overrides"
        raise InvalidInput.at(field_name, "no GPU with a price to plan on")
    return offers, versions, errors


CONFIDENCES = (0.5, 0.9)
"""The confidences every plan asked for one sizes its candidates at, besides the asked one."""


def _offer_basis(profiled: bool, scaled: bool) -> str:
    """What times a GPU's candidates, as the validation record names it."""
    if not profiled:
        return "roofline"
    return "scaled" if scaled else "measured"


def _slowdowns(query: PlanQuery, kind: tuple[str, str, str]) -> tuple[tuple[float, float], ...]:
    """(confidence, k) for each confidence a plan asked for one sizes at (`CONFIDENCES` and
    the asked one): k the larger of the TTFT and TPOT slowdowns of answers of `kind` (family,
    engine, basis) under load at that quantile; none for an ideal efficiency (a bound)."""
    asked = query.confidence
    if asked is None or query.efficiency is not EfficiencyMode.CALIBRATED:
        return ()
    record = shipped_record()
    found = []
    for confidence in sorted({*CONFIDENCES, asked}):
        k = record.answer_slowdown(*kind, "under load", confidence)
        if k is not None:
            found.append((confidence, k))
    return tuple(found)


def _dtype_pairs(query: PlanQuery, model: ModelSpec) -> tuple[tuple[DType, DType | None], ...]:
    """(weights, KV cache) pairs to plan: a KV format None is each GPU's engine's default for
    those weights (`GpuOffer.kv_dtype`)."""
    weights = query.weight_dtypes or (model.checkpoint_dtype,)
    kv_dtypes = query.kv_dtypes or (None,)
    return tuple((w, kv) for w in dict.fromkeys(weights) for kv in kv_dtypes)


def _given(values: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def _traffic(query: PlanQuery, model: ModelSpec) -> Traffic:
    context = model.max_context_tokens
    with spec_errors():
        if query.trace_rows is not None:
            trace = trace_from_rows(query.trace_rows, "traffic.trace")
            check_trace_lengths(trace, context, "traffic.trace")
            rate = query.requests_per_s
            if rate is None:
                span_s = float(trace.arrival_s[-1] - trace.arrival_s[0])
                if not span_s > 0:
                    raise InvalidInput.at(
                        "traffic.trace", "all requests arrive at once: give requests_per_s"
                    )
                rate = (len(trace) - 1) / span_s
                if not MIN_REQUESTS_PER_S <= rate <= MAX_TRAFFIC_REQUESTS_PER_S:
                    raise InvalidInput.at(
                        "traffic.trace",
                        f"the trace's own rate, {rate:.4g} requests/s, is outside "
                        f"[{MIN_REQUESTS_PER_S:g}, {MAX_TRAFFIC_REQUESTS_PER_S:g}]: give "
                        "requests_per_s",
                    )
            return Traffic(requests_per_s=rate, trace=trace)
        if query.prompt_tokens is None or query.output_tokens is None or not query.requests_per_s:
            raise InvalidInput.at("traffic", "give requests_per_s with length distributions")
        return Traffic(
            requests_per_s=query.requests_per_s,
            prompt_tokens=length_distribution(
                query.prompt_tokens, "traffic.prompt_tokens", context
            ),
            output_tokens=length_distribution(
                query.output_tokens, "traffic.output_tokens", context
            ),
        )


@dataclass(frozen=True, slots=True)
class PlanJob:
    """A plan request resolved against the catalog: what a heavy-work process plans."""

    query: PlanQuery
    model: ModelSpec
    model_id: str
    offers: tuple[GpuOffer, ...]
    traffic: Traffic
    slo: Slo
    options: PlanOptions
    catalog_versions: dict[str, dict[str, int]]
    gpu_errors: dict[str, dict[str, float]]
    """Each GPU's validation residuals by phase (what its candidates' error statement reads)."""


@dataclass(frozen=True, slots=True)
class ComputedPlan:
    """A finished plan, as stored: the answer's document and its summary."""

    document: dict[str, Any]
    summary: dict[str, Any]
    demand_requests_per_s: float


def prepare_plan(session: Session, cache: SpecCache, query: PlanQuery) -> PlanJob:
    """Resolve the model and the GPUs (with their prices) and check the request; 422 naming
    the field when something cannot be planned."""
    model, model_id, model_version = resolve_model(cache, query.model)
    offers, gpu_versions, gpu_errors = _offers(session, cache, query, family_of(model))
    with spec_errors():
        slo = Slo(
            ttft_p99_ms=query.ttft_p99_ms,
            tpot_p99_ms=query.tpot_p99_ms,
            ttft_buckets=tuple(TtftBucket(int(b), float(ms)) for b, ms in query.ttft_buckets),
        )
        options = PlanOptions(
            tp_candidates=tuple(query.tp_candidates),
            dtype_pairs=_dtype_pairs(query, model),
            max_num_seqs_candidates=_given(query.max_num_seqs),
            chunk_tokens_candidates=_given(query.chunk_tokens),
            headroom=query.headroom,
            gpus_per_node=query.gpus_per_node,
            gpu_memory_utilization=query.gpu_memory_utilization,
            probe_requests=query.probe_requests,
            confirm_requests=query.confirm_requests,
            seed=query.seed,
            max_plans=query.max_plans,
            exhaustive=query.exhaustive,
            disaggregated=query.disaggregated,
            kv_link=query.kv_link,
            layouts=query.layouts,
        )
        traffic = _traffic(query, model)
    versions = {
        "gpus": gpu_versions,
        "models": {model_id: model_version} if model_version is not None else {},
    }
    return PlanJob(
        query, model, model_id, tuple(offers), traffic, slo, options, versions, gpu_errors
    )


def compute_plan(job: PlanJob, progress: PlanProgress | None = None) -> ComputedPlan:
    """Plan a prepared job (in a heavy-work process), telling `progress` how far it got;
    `PlanCancelled` when `progress` stops it."""
    start = time.perf_counter()
    with spec_errors():
        plan = plan_capacity(
            job.model, job.offers, job.traffic, job.slo, job.options, progress=progress
        )
    elapsed_ms = (time.perf_counter() - start) * 1000.0
    if job.query.confidence is not None:
        plan = _ranked_at(plan, job.query.confidence)
    return ComputedPlan(
        document=_document(plan, elapsed_ms, job),
        summary=_summary(plan, job.query.confidence),
        demand_requests_per_s=plan.demand_requests_per_s,
    )


def _ranked_at(plan: CapacityPlan, confidence: float) -> CapacityPlan:
    """`plan` with its planned candidates ranked by their cost sized at `confidence` (then as
    timed; one without that sizing last), the others after them as they were: the plan a user
    who asked for that confidence provisions first."""

    def cost(candidate: CandidatePlan) -> tuple[float, float]:
        sized = candidate.sized_at(confidence)
        at = sized.cost_per_hour_usd if sized is not None else None
        timed = candidate.cost_per_hour_usd
        return (math.inf if at is None else at, math.inf if timed is None else timed)

    planned = sorted((c for c in plan.candidates if c.feasible), key=cost)
    rest = [c for c in plan.candidates if not c.feasible]
    notes = (
        *plan.notes,
        f"Planned candidates ranked by their cost with the SLOs holding at {confidence:g} "
        "confidence (`by_confidence`).",
    )
    return dc_replace(plan, candidates=(*planned, *rest), notes=notes)


def _document(plan: CapacityPlan, elapsed_ms: float, job: PlanJob) -> dict[str, Any]:
    """The answer as stored: its candidates (each with its error statement) and the
    disaggregated option read from the engine's results by attribute (`CandidateRead`,
    `DisaggregatedRead`: one definition)."""
    ranked = [c for c in plan.candidates if c.status is not CandidateStatus.PRUNED]
    pruned = [c for c in plan.candidates if c.status is CandidateStatus.PRUNED]
    return {
        "plans": [_candidate(c, job) for c in ranked],
        "pruned": [_candidate(c, job) for c in pruned],
        "disaggregated": (
            _read(DisaggregatedRead, plan.disaggregated) if plan.disaggregated else None
        ),
        "demand_requests_per_s": plan.demand_requests_per_s,
        "mean_prompt_tokens": plan.mean_prompt_tokens,
        "mean_output_tokens": plan.mean_output_tokens,
        "probe_requests": plan.probe_requests,
        "simulations": plan.simulations,
        "elapsed_ms": elapsed_ms,
        "notes": list(plan.notes) + _quantisation_notes(ranked),
    }


def _candidate(candidate: CandidatePlan, job: PlanJob) -> dict[str, Any]:
    """A candidate as stored, with how far to trust its latencies (`error_statement`)."""
    offer = next(o for o in job.offers if o.id == candidate.gpu)
    mode = job.query.efficiency
    profile = offer.profile
    errors, unknown = simulated_error(
        mode,
        gpu_id=offer.id,
        gpu_errors=job.gpu_errors.get(offer.id, {}),
        profile_id=profile.id if profile is not None else None,
        residuals=profile.residual_pct if profile is not None else None,
        basis=candidate.basis,
        family=family_of(job.model),
    )
    kind = kind_of(job.model, str(offer.engine.name), candidate.basis)
    intervals, unbounded = error_intervals(mode, (*kind, "under load"), SIMULATED_RECORD_METRICS)
    read = _read(CandidateRead, candidate)
    read["expected_error_pct"] = errors
    read["error_interval_pct"] = {
        metric: None if interval is None else _read(ErrorInterval, interval)
        for metric, interval in intervals.items()
    }
    read["warnings"] = [*read["warnings"], *unknown, *unbounded]
    return read


def _read(schema: type[BaseModel], result: object) -> dict[str, Any]:
    return schema.model_validate(result, from_attributes=True).model_dump(mode="json")


def _quantisation_notes(candidates: list[CandidatePlan]) -> list[str]:
    quantised = [c for c in candidates if c.quantized_from is not None]
    if not quantised:
        return []
    formats = ", ".join(sorted({c.weight_dtype.value for c in quantised}))
    return [
        f"{formats} weights quantise the model's {quantised[0].quantized_from} checkpoint: a "
        "change in output quality to measure before serving (those candidates carry "
        "quantized_from)"
    ]


def _summary(plan: CapacityPlan, confidence: float | None) -> dict[str, Any]:
    """The cheapest plan as timed; with a `confidence`, also its replicas and cost sized so its
    SLOs hold at it (`CandidatePlan.by_confidence`)."""
    best = plan.best
    if best is None:
        return {"feasible": False}
    summary: dict[str, Any] = {
        "feasible": True,
        "gpu": best.gpu,
        "tp": best.tp,
        "weight_dtype": best.weight_dtype.value,
        "replicas": best.replicas,
        "gpus_total": best.gpus_total,
        "cost_per_hour_usd": best.cost_per_hour_usd,
    }
    sized = best.sized_at(confidence)
    if sized is not None:
        summary |= {
            "confidence": confidence,
            "replicas_at_confidence": sized.replicas,
            "cost_per_hour_usd_at_confidence": sized.cost_per_hour_usd,
        }
    return summary


def queue_plan(
    session: Session,
    job: PlanJob,
    request: Mapping[str, Any],
    limit: int,
    owner: str | None = None,
) -> PlanRow:
    """Store a prepared plan `queued` with `request` (the body as validated), owned by `owner`
    (a principal's name); `PlanQueueFull` when `limit` plans are queued or running already."""
    repository = PlanRepository(session)
    waiting = repository.waiting()
    if waiting >= limit:
        raise PlanQueueFull(waiting, retry_after_s=5)
    row = PlanRow(
        id=uuid.uuid4().hex,
        created_at=utcnow(),
        model_id=job.model_id,
        owner=owner,
        requests_per_s=job.traffic.requests_per_s,
        request=dict(request),
        response=None,
        catalog_versions=job.catalog_versions,
        summary=None,
        status=PlanStatus.QUEUED,
        progress=0.0,
        attempts=0,
    )
    repository.add(row)
    return row


def finish_plan(
    session: Session,
    plan_id: str,
    owner: str,
    job: PlanJob,
    computed: ComputedPlan,
    *,
    attempt: int | None = None,
) -> bool:
    """Store `owner`'s computed plan (of its attempt `attempt`), done, with the catalog
    versions it read; False when it no longer holds the job (cancelled meanwhile, or taken
    over)."""
    return PlanRepository(session).finish(
        plan_id,
        owner,
        {
            "status": PlanStatus.DONE,
            "progress": 1.0,
            "response": computed.document,
            "summary": computed.summary,
            "catalog_versions": job.catalog_versions,
            "requests_per_s": computed.demand_requests_per_s / (1 + job.query.headroom),
        },
        attempt,
    )


def fail_plan(
    session: Session,
    plan_id: str,
    owner: str,
    error: DomainError,
    *,
    attempt: int | None = None,
) -> bool:
    """Close `owner`'s job (of its attempt `attempt`) as failed with `error`'s problem; False
    when it no longer holds it."""
    return PlanRepository(session).finish(
        plan_id, owner, {"status": PlanStatus.FAILED, "error": problem_of(error)}, attempt
    )


def fail_queued_plan(session: Session, plan_id: str, error: DomainError) -> bool:
    """Close a plan no worker holds yet as failed with `error`'s problem; False when it is no
    longer queued."""
    return PlanRepository(session).close_queued(
        plan_id, {"status": PlanStatus.FAILED, "error": problem_of(error)}
    )


def forget_plan(session: Session, plan_id: str) -> None:
    """Delete a plan (one that failed within its POST's wait: it was answered as a problem)."""
    repository = PlanRepository(session)
    row = repository.get(plan_id)
    if row is not None:
        repository.delete(row)


class NotPlanOwner(Forbidden):
    """A key that neither created the plan nor is an admin's."""

    def __init__(self, plan_id: str, name: str) -> None:
        super().__init__(
            f"Plan {plan_id!r} is not {name}'s: only the principal that created it, or an "
            "admin, may cancel or delete it."
        )


def cancel_or_delete_plan(
    session: Session, plan_id: str, principal: str | None = None, *, admin: bool = True
) -> PlanRow | None:
    """Cancel a queued or running plan (its worker stops before its next candidate) and return
    it; delete a finished one and return None. `PlanNotFound` for an unknown id;
    `NotPlanOwner` (403) unless `principal` created it or is an `admin`."""
    repository = PlanRepository(session)
    row = get_plan(session, plan_id)
    if not admin and row.owner != principal:
        raise NotPlanOwner(plan_id, principal or "an anonymous caller")
    if repository.cancel(plan_id):
        return get_plan(session, plan_id)
    repository.delete(row)
    return None


def plan_in_full(session: Session, plan_id: str) -> PlanRead:
    """A done plan's whole answer; `PlanNotDone` (409) before it is done."""
    row = get_plan(session, plan_id)
    if row.status != PlanStatus.DONE or row.response is None:
        raise PlanNotDone(plan_id, row.status, row.progress)
    return PlanRead.of(row)


def get_plan(session: Session, plan_id: str) -> PlanRow:
    row = PlanRepository(session).get(plan_id)
    if row is None:
        raise PlanNotFound(plan_id)
    return row


def list_plans(
    session: Session,
    *,
    limit: int,
    offset: int,
    model_id: str | None = None,
    owner: str | None = None,
) -> Page[PlanRow]:
    """Stored plans (`owner`'s only, when given), newest first, without their request and
    response documents."""
    items, total = PlanRepository(session).recent(
        limit=limit, offset=offset, model_id=model_id, owner=owner
    )
    return Page(items=items, total=total, limit=limit, offset=offset)
