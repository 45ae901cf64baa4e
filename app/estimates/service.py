"""Estimate use cases: resolve the target once, ask the engine, attach how far to trust it.

Each function takes a frozen query (what the request asks, typed: engine specs, `DType`s) and
returns the engine's result beside the resolved target's echo and expected error (`Answer`),
which the answer schemas read by attribute. Engine `SpecError`s become 422s naming the request
field (`spec_errors`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, TypeVar

from app.catalog.spec_cache import SpecCache
from app.engine.batch_ceiling import BatchCeiling, estimate_batch_ceiling
from app.engine.chunking import ChunkRecommendation, recommend_chunk_size
from app.engine.estimates import (
    DecodeEstimate,
    PrefillCurve,
    PrefillEstimate,
    RequestEstimate,
    estimate_decode,
    estimate_prefill,
    estimate_request,
    prefill_curve,
)
from app.engine.memory import (
    DEFAULT_BLOCK_TOKENS,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
)
from app.engine.parallelism import DEFAULT_TP_CANDIDATES, TpFeasibility, assess_tp
from app.engine.roofline import Roofline, roofline
from app.engine.specs import GpuSpec, ModelSpec
from app.errors import spec_errors
from app.targets.schemas import TargetEcho
from app.targets.service import (
    PHASE_METRICS,
    EfficiencyMode,
    Layout,
    Target,
    TargetQuery,
    resolve_gpu_spec,
    resolve_target,
)
from app.validation.record import StatedInterval, regime_of

__all__ = [
    "Answer",
    "BatchCeilingQuery",
    "ChunkSizeQuery",
    "DecodeQuery",
    "PrefillCurveQuery",
    "PrefillQuery",
    "RequestQuery",
    "RooflineAnswer",
    "RooflineQuery",
    "TpFeasibilityQuery",
    "batch_ceiling",
    "chunk_size",
    "decode",
    "prefill",
    "prefill_points",
    "request",
    "roofline_of",
    "tp_feasibility",
]


R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Resolved:
    """A resolved target and its echo as the answers carry it (`TargetEcho`), built once per
    target (`target_of`)."""

    target: Target
    echo: TargetEcho
    statements: dict[tuple[str, ...], tuple[dict[str, float | None], tuple[str, ...]]] = field(
        default_factory=dict, compare=False
    )
    """The target's error statement (`Target.error_statement`) and warnings, by the phases an
    answer reports, made once per target and phases."""

    intervals: dict[
        tuple[tuple[str, ...], str], tuple[dict[str, StatedInterval | None], tuple[str, ...]]
    ] = field(default_factory=dict, compare=False)
    """The target's error intervals (`Target.error_intervals`) and their warnings, by the
    phases and regime an answer reports, made once per target, phases and regime."""

    def stated(self, phases: tuple[str, ...]) -> tuple[dict[str, float | None], tuple[str, ...]]:
        """(expected_error_pct, warnings) of an answer about `phases`."""
        found = self.statements.get(phases)
        if found is None:
            target = self.target
            errors, unknown = target.error_statement({phase: phase for phase in phases})
            found = self.statements[phases] = (errors, (*target.warnings, *unknown))
        return found

    def bounded(
        self, phases: tuple[str, ...], regime: str
    ) -> tuple[dict[str, StatedInterval | None], tuple[str, ...]]:
        """(error_interval_pct, warnings) of an answer about `phases` in `regime`."""
        key = (phases, regime)
        found = self.intervals.get(key)
        if found is None:
            metrics = {phase: PHASE_METRICS[phase] for phase in phases}
            found = self.intervals[key] = self.target.error_intervals(metrics, regime)
        return found


_NO_INTERVALS: Mapping[str, StatedInterval | None] = MappingProxyType({})


class Answer(NamedTuple, Generic[R]):
    """An engine result and what every estimate answer carries besides its figures: the
    target's echo and how far to trust the result (the spread of validation residuals of its
    phases). An answer schema takes `target` and `expected_error_pct` from here and every other
    field from `result`, by attribute. (A named tuple: one per answer, built faster than a
    frozen dataclass.)"""

    target: TargetEcho
    expected_error_pct: dict[str, float | None]
    result: R
    warnings: tuple[str, ...] = ()
    """What the target itself warns of (an engine timed by the roofline), before the result's
    own warnings."""
    error_interval_pct: Mapping[str, StatedInterval | None] = _NO_INTERVALS
    """By phase, where published runs of the answer's kind measured its figure, in percent of
    it (`Target.error_intervals`)."""


@dataclass(frozen=True, slots=True)
class PrefillQuery:
    target: TargetQuery
    prompt_tokens: int
    batch_size: int = 1
    cached_prefix_tokens: int = 0
    chunk_tokens: int | None = None
    causal: bool = True


@dataclass(frozen=True, slots=True)
class PrefillCurveQuery:
    target: TargetQuery
    prompt_tokens: tuple[int, ...]
    batch_size: int = 1
    chunk_tokens: int | None = None
    causal: bool = True


@dataclass(frozen=True, slots=True)
class DecodeQuery:
    target: TargetQuery
    batch_size: int
    context_tokens: int


@dataclass(frozen=True, slots=True)
class RequestQuery:
    target: TargetQuery
    prompt_tokens: int
    output_tokens: int
    batch_size: int = 1
    cached_prefix_tokens: int = 0
    chunk_tokens: int | None = None
    causal: bool = True


@dataclass(frozen=True, slots=True)
class BatchCeilingQuery:
    target: TargetQuery
    context_tokens: int
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS


@dataclass(frozen=True, slots=True)
class TpFeasibilityQuery:
    target: TargetQuery
    """Its deployment's `tp` plays no part: every candidate is assessed."""
    candidates: tuple[int, ...] = DEFAULT_TP_CANDIDATES
    prompt_tokens: int = 2048
    context_tokens: int = 2048
    batch_size: int = 1
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    layouts: bool = False


@dataclass(frozen=True, slots=True)
class ChunkSizeQuery:
    target: TargetQuery
    itl_slo_ms: float
    short_ttft_slo_ms: float | None = None
    decode_batch_size: int = 0
    decode_context_tokens: int = 0
    long_prompt_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class RooflineQuery:
    gpu: str | GpuSpec
    model: str | ModelSpec | None = None
    deployment: Layout = field(default_factory=Layout)
    prompt_tokens: int = 2048
    context_tokens: int = 2048
    batch_size: int = 1
    causal: bool = False


@dataclass(frozen=True, slots=True)
class RooflineAnswer:
    """A roofline and the ids of the GPU and model it was drawn for (`inline` for inline specs;
    no model: null)."""

    gpu: str
    model: str | None
    result: Roofline

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)


def workload_of(query: Any) -> dict[str, Any]:
    """A frozen query's fields after its `target`, by name: the keyword arguments of the engine
    function it is answered by (they share names, which the API tests hold)."""
    names = _WORKLOAD_NAMES.get(type(query))
    if names is None:
        names = _WORKLOAD_NAMES[type(query)] = tuple(f.name for f in fields(query)[1:])
    return {name: getattr(query, name) for name in names}


_WORKLOAD_NAMES: dict[type, tuple[str, ...]] = {}
"""`workload_of`'s field names by query class, read once per class (`fields` is slow)."""


def target_of(cache: SpecCache, query: TargetQuery) -> Resolved:
    """`resolve_target` and the target's echo, kept by the spec cache per query and generation
    of the catalog entries it names (`SpecCache.derived`): a scheduler asks about few targets,
    and resolving one (ids, efficiency, profile, its expected error) and echoing it cost half a
    computed prefill estimate."""

    def resolved() -> Resolved:
        target = resolve_target(cache, query)
        # Validated into the answer schema's part once: each answer then takes it as it is.
        return Resolved(target, TargetEcho.model_validate(target.echo(), from_attributes=True))

    generations = cache.generations(model=query.model, gpu=query.gpu)
    if generations is None:
        return resolved()
    try:
        key = ("target", query, generations)
        hash(key)
    except TypeError:  # an inline spec holding a dict: not hashable, resolved each time
        return resolved()
    return cache.derived(key, resolved)


def _answer(resolved: Resolved, result: R, regime: str, *phases: str) -> Answer[R]:
    errors, warnings = resolved.stated(phases)
    intervals, unknown = resolved.bounded(phases, regime)
    return Answer(resolved.echo, errors, result, (*warnings, *unknown), intervals)


def prefill(cache: SpecCache, query: PrefillQuery) -> Answer[PrefillEstimate]:
    resolved = target_of(cache, query.target)
    target = resolved.target
    with spec_errors():
        estimate = estimate_prefill(target.cost, **workload_of(query))
    regime = regime_of(target.cost, query.batch_size, query.prompt_tokens)
    return _answer(resolved, estimate, regime, "prefill")


def prefill_points(cache: SpecCache, query: PrefillCurveQuery) -> Answer[PrefillCurve]:
    resolved = target_of(cache, query.target)
    target = resolved.target
    lengths: Sequence[int] = query.prompt_tokens
    with spec_errors():
        curve = prefill_curve(
            target.cost,
            lengths,
            batch_size=query.batch_size,
            chunk_tokens=query.chunk_tokens,
            causal=query.causal,
        )
    regime = regime_of(target.cost, query.batch_size, max(lengths))
    return _answer(resolved, curve, regime, "prefill")


def decode(cache: SpecCache, query: DecodeQuery) -> Answer[DecodeEstimate]:
    resolved = target_of(cache, query.target)
    target = resolved.target
    with spec_errors():
        estimate = estimate_decode(
            target.cost, batch_size=query.batch_size, context_tokens=query.context_tokens
        )
    regime = regime_of(target.cost, query.batch_size, query.context_tokens)
    return _answer(resolved, estimate, regime, "decode")


def request(cache: SpecCache, query: RequestQuery) -> Answer[RequestEstimate]:
    resolved = target_of(cache, query.target)
    target = resolved.target
    with spec_errors():
        estimate = estimate_request(target.cost, **workload_of(query))
    regime = regime_of(target.cost, query.batch_size, query.prompt_tokens + query.output_tokens)
    return _answer(resolved, estimate, regime, "prefill", "decode")


def batch_ceiling(cache: SpecCache, query: BatchCeilingQuery) -> Answer[BatchCeiling]:
    resolved = target_of(cache, query.target)
    target = resolved.target
    with spec_errors():
        ceiling = estimate_batch_ceiling(target.cost, **workload_of(query))
    return _answer(resolved, ceiling, "near capacity", "decode")


def chunk_size(cache: SpecCache, query: ChunkSizeQuery) -> Answer[ChunkRecommendation]:
    resolved = target_of(cache, query.target)
    target = resolved.target
    with spec_errors():
        recommendation = recommend_chunk_size(target.cost, **workload_of(query))
    regime = "under load" if query.decode_batch_size > 1 else "single request"
    return _answer(resolved, recommendation, regime, "prefill", "decode")


def tp_feasibility(cache: SpecCache, query: TpFeasibilityQuery) -> Answer[TpFeasibility]:
    """Each of `query.candidates` assessed; the target's own `tp` plays no part (it is resolved
    at tp 1, so a tp the heads cannot take is no 422 here)."""
    one_gpu = query.target.deployment.single_gpu()
    at_tp_1 = (
        query.target
        if one_gpu is query.target.deployment
        else replace(query.target, deployment=one_gpu)
    )
    resolved = target_of(cache, at_tp_1)
    target = resolved.target
    with spec_errors():
        result = assess_tp(
            target.model,
            target.gpu,
            target.deployment,
            target.efficiency,
            candidates=query.candidates,
            prompt_tokens=query.prompt_tokens,
            context_tokens=query.context_tokens,
            batch_size=query.batch_size,
            ttft_slo_ms=query.ttft_slo_ms,
            tpot_slo_ms=query.tpot_slo_ms,
            layouts=query.layouts,
            cost=target.cost,
        )
    regime = "under load" if query.batch_size > 1 else "single request"
    return _answer(resolved, result, regime, "prefill", "decode")


def roofline_of(cache: SpecCache, query: RooflineQuery) -> RooflineAnswer:
    """Roofline of a GPU, and where a model's phases sit on it when a model is given."""
    if query.model is not None:
        # Counts do not depend on the efficiency: the ideal target's cost model, kept per target.
        target = target_of(
            cache, TargetQuery(query.model, query.gpu, query.deployment, EfficiencyMode.IDEAL)
        ).target
        with spec_errors():
            result = roofline(
                target.gpu,
                model=target.model,
                deployment=target.deployment,
                prompt_tokens=query.prompt_tokens,
                context_tokens=query.context_tokens,
                batch_size=query.batch_size,
                causal=query.causal,
                cost=target.cost,
            )
        return RooflineAnswer(target.gpu_id, target.model_id, result)
    spec, gpu_id, _ = resolve_gpu_spec(cache, query.gpu)
    with spec_errors():
        result = roofline(
            spec,
            deployment=query.deployment.deployment(None),
            prompt_tokens=query.prompt_tokens,
            context_tokens=query.context_tokens,
            batch_size=query.batch_size,
            causal=query.causal,
        )
    return RooflineAnswer(gpu_id, None, result)
