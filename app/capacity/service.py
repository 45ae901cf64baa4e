"""Capacity answers for autoscalers: resolve a deployment against the catalog, find what one
replica sustains within the SLOs by simulation (`app.capacity.search`, once per deployment and
request mix), and answer repeats from a cache in microseconds.

A question's cache key is everything the simulated rate depends on: the request less the
observed rate, the headroom and the name (those only shape the answer), and the specs it was
resolved to (the model's and the GPU's, calibration included) and the profile that times it. A
catalog write that changes a spec, or a new default profile, makes a new key; the old answer
ages out of the least-recently-used cache.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from dataclasses import dataclass

from app.capacity.schemas import (
    CapacityPredicted,
    CapacityRequest,
    CapacityResponse,
    ConfidentCapacity,
)
from app.capacity.search import (
    CapacityAnswer,
    CapacityQuestion,
    ReplicaLayout,
    replicas_for,
    sustainable_rate,
)
from app.catalog.profiles import EngineChoice, choose_engine
from app.catalog.spec_cache import CachedGpu, SpecCache
from app.engine.dtypes import DType
from app.engine.planning import GpuOffer, Slo, Traffic, TtftBucket
from app.engine.specs import IDEAL_EFFICIENCY, ModelSpec
from app.errors import spec_errors
from app.simulations.service import length_distribution
from app.targets.schemas import engine_query, model_query
from app.targets.service import (
    SIMULATED_RECORD_METRICS,
    EfficiencyMode,
    error_intervals,
    resolve_formats,
    resolve_model,
    simulated_error,
    simulated_regime,
)
from app.validation.record import family_of, kind_of
from app.validation.schemas import error_interval_models

__all__ = [
    "METRICS",
    "CapacityStore",
    "ResolvedDeployment",
    "answer",
    "compute_capacity",
    "prepare_question",
    "prometheus_text",
    "resolve_deployment",
]

CACHE_ENTRIES = 1024
"""Deployments and mixes whose answers are kept (each a few hundred bytes)."""
_PLACEHOLDER_PRICE = 1.0  # capacity does not depend on price; an offer needs a positive one


@dataclass(frozen=True, slots=True)
class ResolvedDeployment:
    """A capacity request resolved against the catalog: enough to key it and to simulate it."""

    body: CapacityRequest
    model: ModelSpec
    model_id: str
    gpu: CachedGpu
    choice: EngineChoice
    key: tuple[str, str, str, str]

    @property
    def engine(self) -> str:
        return self.choice.engine.label

    @property
    def name(self) -> str:
        if self.body.name is not None:
            return self.body.name
        b = self.body
        layout = f"tp{b.tp}" + "".join(
            f"{label}{value}"
            for label, value in (("dp", b.dp), ("pp", b.pp), ("ep", b.ep))
            if value > 1
        )
        return f"{self.model_id}.{self.gpu.spec.id}.{layout}"


def resolve_deployment(cache: SpecCache, body: CapacityRequest) -> ResolvedDeployment:
    """The model, GPU and profile a request names (read through the spec cache); 422 naming
    the field for an unknown id."""
    model, model_id, _version = resolve_model(cache, model_query(body.model))
    gpu = cache.gpu(body.gpu, "gpu")
    choice = choose_engine(
        engine_query(body.engine),
        gpu.profiles,
        gpu=gpu.spec.id,
        measured=body.efficiency == "calibrated",
        relatives=cache.relatives_of(gpu),
    )
    question = body.model_dump_json(exclude={"observed_requests_per_s", "headroom", "name"})
    timed = choice.profile.id if choice.profile is not None else ""
    measured_on = cache.measured_on(choice)
    if measured_on is not None:
        timed += f" on {measured_on.spec_key}"
    key = (question, repr(model), gpu.spec_key, f"{choice.engine.label} {timed}")
    return ResolvedDeployment(body, model, model_id, gpu, choice, key)


def prepare_question(cache: SpecCache, resolved: ResolvedDeployment) -> CapacityQuestion:
    """The simulation's input (parsing the profile's tables on first use: may read the
    database); 422 naming the field when the lengths or SLOs are impossible."""
    body = resolved.body
    efficiency = IDEAL_EFFICIENCY if body.efficiency == "ideal" else None
    ref = resolved.choice.profile
    profile = cache.profile(ref) if ref is not None else None
    measured_on = cache.measured_on(resolved.choice)
    context = resolved.model.max_context_tokens
    weights, kv = resolve_formats(
        resolved.model,
        None if body.weight_dtype is None else DType(body.weight_dtype),
        None if body.kv_dtype is None else DType(body.kv_dtype),
        resolved.choice.engine,
    )
    with spec_errors():
        offer = GpuOffer(
            resolved.gpu.spec,
            _PLACEHOLDER_PRICE,
            efficiency,
            profile,
            resolved.choice.engine,
            warnings=resolved.choice.warnings,
            roofline_basis=resolved.choice.basis,
            measured_on=None if measured_on is None else measured_on.spec,
        )
        traffic = Traffic(
            requests_per_s=1.0,
            prompt_tokens=length_distribution(body.prompt_tokens.query(), "prompt_tokens", context),
            output_tokens=length_distribution(body.output_tokens.query(), "output_tokens", context),
        )
        slo = Slo(
            ttft_p99_ms=body.slo.ttft_p99_ms,
            tpot_p99_ms=body.slo.tpot_p99_ms,
            ttft_buckets=tuple(
                TtftBucket(b.max_prompt_tokens, b.ttft_p99_ms)
                for b in body.slo.ttft_p99_ms_by_prompt_tokens
            ),
        )
        layout = ReplicaLayout(
            tp=body.tp,
            pp=body.pp,
            dp=body.dp,
            ep=body.ep,
            weight_dtype=weights,
            kv_dtype=kv,
            max_num_seqs=body.max_num_seqs,
            chunk_tokens=body.chunk_tokens,
            gpu_memory_utilization=body.gpu_memory_utilization,
            gpus_per_node=body.gpus_per_node,
        )
    return CapacityQuestion(
        model=resolved.model,
        offer=offer,
        layout=layout,
        traffic=traffic,
        slo=slo,
        probe_requests=body.probe_requests,
        seed=body.seed,
        confidences=tuple(sorted({*RANGE_CONFIDENCES, 0.5, body.confidence})),
    )


RANGE_CONFIDENCES = (0.1, 0.9)
"""The confidences whose rates make an answer's range: the SLOs holding at 10 % and at 90 %."""


def _by_confidence(
    found: CapacityAnswer, observed: float | None, headroom: float
) -> list[ConfidentCapacity]:
    """The answer's rates by confidence, with the replicas the observed rate needs at each."""
    rows = []
    for row in found.confident:
        rate = row.requests_per_s
        replicas = None
        if observed is not None and rate is not None and rate > 0:
            with spec_errors():
                replicas = replicas_for(observed, rate, headroom)
        rows.append(
            ConfidentCapacity(
                confidence=row.confidence,
                slowdown=round(row.slowdown, 3),
                requests_per_s_per_replica=rate,
                replicas=replicas,
            )
        )
    return rows


def compute_capacity(question: CapacityQuestion) -> CapacityAnswer:
    """Search the sustainable rate (in a heavy-work process; pure computation); an impossible
    deployment is a 422 naming the field."""
    with spec_errors():
        return sustainable_rate(question)


class CapacityStore:
    """Answers by key, least recently used dropped beyond `entries`; and the latest answer per
    deployment name, for the metrics exposition. Thread-safe."""

    def __init__(self, entries: int = CACHE_ENTRIES) -> None:
        self._entries = entries
        self._answers: OrderedDict[tuple[str, str, str, str], CapacityAnswer] = OrderedDict()
        self._named: OrderedDict[str, CapacityResponse] = OrderedDict()
        self._lock = threading.Lock()
        self.pending: dict[tuple[str, str, str, str], asyncio.Future[CapacityAnswer]] = {}
        """Searches under way, by key (the event loop's alone: no lock)."""

    def get(self, key: tuple[str, str, str, str]) -> CapacityAnswer | None:
        with self._lock:
            found = self._answers.get(key)
            if found is not None:
                self._answers.move_to_end(key)
            return found

    def put(self, key: tuple[str, str, str, str], value: CapacityAnswer) -> None:
        with self._lock:
            self._answers[key] = value
            self._answers.move_to_end(key)
            while len(self._answers) > self._entries:
                self._answers.popitem(last=False)

    def remember(self, response: CapacityResponse) -> None:
        """The latest answer for its deployment name: what `GET /v1/capacity/metrics` shows."""
        with self._lock:
            self._named[response.deployment] = response
            self._named.move_to_end(response.deployment)
            while len(self._named) > self._entries:
                self._named.popitem(last=False)

    def named(self) -> list[CapacityResponse]:
        with self._lock:
            return list(self._named.values())


def answer(
    resolved: ResolvedDeployment, found: CapacityAnswer, *, cached: bool
) -> CapacityResponse:
    """The answer to `resolved`'s request from the rate `found`: the replicas for its observed
    rate with its headroom."""
    body = resolved.body
    outcome = found.predicted
    observed = body.observed_requests_per_s
    replicas = None
    if observed is not None:
        with spec_errors():
            replicas = replicas_for(observed, found.requests_per_s, body.headroom)
    mode = EfficiencyMode(body.efficiency)
    ref = resolved.choice.profile
    errors, unknown = simulated_error(
        mode,
        gpu_id=resolved.gpu.spec.id,
        gpu_errors=resolved.gpu.expected_error_pct,
        profile_id=ref.id if ref is not None else None,
        residuals=found.residual_pct,
        basis=found.basis,
        family=family_of(resolved.model),
    )
    regime = simulated_regime(outcome.saturated)
    kind = kind_of(resolved.model, str(resolved.choice.engine.name), found.basis)
    intervals, unbounded = error_intervals(mode, (*kind, regime), SIMULATED_RECORD_METRICS)
    rows = _by_confidence(found, observed, body.headroom)
    at = {row.confidence: row for row in rows}
    low, high = (at.get(c) for c in reversed(RANGE_CONFIDENCES))
    asked = at.get(body.confidence)
    return CapacityResponse(
        deployment=resolved.name,
        requests_per_s_per_replica=found.requests_per_s,
        failing_requests_per_s_per_replica=found.failing_requests_per_s,
        analytic_max_requests_per_s_per_replica=found.analytic_max_requests_per_s,
        predicted=CapacityPredicted(
            requests_per_s_per_replica=outcome.requests_per_s,
            ttft_p50_ms=outcome.ttft_p50_ms,
            ttft_p99_ms=outcome.ttft_p99_ms,
            tpot_p50_ms=outcome.tpot_p50_ms,
            tpot_p99_ms=outcome.tpot_p99_ms,
            saturated=outcome.saturated,
        ),
        observed_requests_per_s=observed,
        headroom=body.headroom,
        replicas=replicas,
        requests_per_s_per_replica_range=(
            None
            if low is None or high is None
            else [low.requests_per_s_per_replica, high.requests_per_s_per_replica]
        ),
        confidence=body.confidence,
        requests_per_s_per_replica_at_confidence=(
            None if asked is None else asked.requests_per_s_per_replica
        ),
        replicas_at_confidence=None if asked is None else asked.replicas,
        by_confidence=rows,
        kv_capacity_tokens=found.kv_capacity_tokens,
        engine=resolved.engine,
        basis=found.basis,
        max_num_seqs=found.max_num_seqs,
        chunk_tokens=found.chunk_tokens,
        expected_error_pct=errors,
        error_interval_pct=error_interval_models(intervals),
        warnings=[*resolved.choice.warnings, *unknown, *unbounded],
        probe_requests=found.probe_requests,
        simulations=found.simulations,
        cached=cached,
        reasons=list(found.reasons),
        metric=METRICS[0][0],
    )


METRICS: tuple[tuple[str, str], ...] = (
    (
        "ridgeline_capacity_requests_per_second",
        "Highest request rate one replica of the deployment sustains with its SLOs met "
        "(simulated by Ridgeline).",
    ),
    (
        "ridgeline_capacity_ttft_p99_seconds",
        "Predicted 99th-percentile time to first token at that rate.",
    ),
    (
        "ridgeline_capacity_tpot_p99_seconds",
        "Predicted 99th-percentile time per output token at that rate.",
    ),
    (
        "ridgeline_capacity_replicas",
        "Replicas the observed rate needs with headroom (present when a rate was given).",
    ),
)


def _label(value: str) -> str:
    # Prometheus text format 0.0.4: label values escape backslash, double quote and newline.
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _values(response: CapacityResponse) -> tuple[float | None, ...]:
    """The values of `METRICS` for one answer, in order (seconds for latencies)."""
    replicas = response.replicas
    return (
        response.requests_per_s_per_replica,
        response.predicted.ttft_p99_ms / 1000,
        response.predicted.tpot_p99_ms / 1000,
        float(replicas) if replicas is not None else None,
    )


def prometheus_text(responses: list[CapacityResponse]) -> str:
    """The answers in the Prometheus text exposition format (0.0.4), one series per deployment
    and metric; labels `deployment` and `engine`."""
    values = [_values(r) for r in responses]
    lines: list[str] = []
    for index, (name, help_text) in enumerate(METRICS):
        series = [(r, v[index]) for r, v in zip(responses, values, strict=True)]
        present = [(r, value) for r, value in series if value is not None]
        if not present:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for response, value in present:
            labels = (
                f'deployment="{_label(response.deployment)}",engine="{_label(response.engine)}"'
            )
            lines.append(f"{name}{{{labels}}} {value!r}")
    return "\n".join(lines) + "\n"
