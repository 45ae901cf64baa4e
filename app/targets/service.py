"""What an estimate is about: a model on a GPU, deployed with a TP degree and formats, timed with an
efficiency. Requests name the model and GPU by catalog id or give them inline; a `TargetQuery`
carries either, typed, and `resolve_target` turns it, once, into the engine's specs and a
`StepCostModel`, and `Target.error_statement` says how far to trust what it answers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from app.catalog.profiles import choose_engine
from app.catalog.spec_cache import CachedGpu, SpecCache
from app.engine.dtypes import DType
from app.engine.profiles import ProfiledStepCost, uniform_basis
from app.engine.serving import ROOFLINE, ServingEngine
from app.engine.simulation import SchedulerConfig
from app.engine.specs import (
    IDEAL_EFFICIENCY,
    Deployment,
    Efficiency,
    GpuSpec,
    ModelSpec,
    expert_dtype_for,
)
from app.engine.step_cost import StepCostModel
from app.errors import spec_errors
from app.validation.record import StatedInterval, basis_kind, family_of, shipped_record

__all__ = [
    "INLINE",
    "PHASE_METRICS",
    "SIMULATED_METRICS",
    "SIMULATED_RECORD_METRICS",
    "EfficiencyMode",
    "Layout",
    "Target",
    "TargetEcho",
    "TargetQuery",
    "error_intervals",
    "error_statement",
    "expected_errors",
    "resolve_formats",
    "resolve_gpu_spec",
    "resolve_model",
    "resolve_target",
    "simulated_error",
    "simulated_regime",
]

INLINE = "inline"


class EfficiencyMode(StrEnum):
    CALIBRATED = "calibrated"  # the GPU's current calibration (or its bundled default)
    IDEAL = "ideal"  # 100 % of datasheet peak, no overhead: article B's lower bound (docs/model.md)
    CUSTOM = "custom"  # efficiencies given in the request


def resolve_formats(
    model: ModelSpec | None,
    weight_dtype: DType | None,
    kv_dtype: DType | None,
    engine: ServingEngine = ROOFLINE,
) -> tuple[DType, DType]:
    """(weights, KV cache) of a deployment whose request may leave either out: the weights are
    the model's checkpoint's (`checkpoint_dtype`; bf16 without a model), the KV cache what
    `engine` serves those weights with by default (`EnginePolicy.kv_dtype`: the checkpoint's
    declared KV scheme where the engine reads it, else the 16-bit compute dtype). The one
    resolution of formats every route uses (estimates, simulations, capacity, plans)."""
    weights = weight_dtype or (model.checkpoint_dtype if model is not None else DType.BF16)
    if kv_dtype is not None:
        return weights, kv_dtype
    return weights, engine.policy.kv_dtype(engine.version, model, weights)


@dataclass(frozen=True, slots=True)
class Layout:
    """A deployment as a request gave it: the parallel layout, and formats where given (None:
    the model's checkpoint's, `resolve_formats`). `deployment` completes it."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    expert_imbalance: float | None = None
    weight_dtype: DType | None = None
    kv_dtype: DType | None = None
    expert_dtype: DType | None = None

    def single_gpu(self) -> Layout:
        """The formats of this layout on one GPU (no tp, dp, ep or pp)."""
        if (self.tp, self.pp, self.dp, self.ep) == (1, 1, 1, 1):
            return self
        return replace(self, tp=1, pp=1, dp=1, ep=1, expert_imbalance=None)

    def deployment(self, model: ModelSpec | None, engine: ServingEngine = ROOFLINE) -> Deployment:
        """The deployment of `model` under `engine` (whose defaults complete the formats); a
        422 naming the field when it is impossible."""
        weights, kv = resolve_formats(model, self.weight_dtype, self.kv_dtype, engine)
        with spec_errors():
            return Deployment(
                tp=self.tp,
                weight_dtype=weights,
                kv_dtype=kv,
                pp=self.pp,
                dp=self.dp,
                ep=self.ep,
                expert_imbalance=self.expert_imbalance,
                expert_dtype=self.expert_dtype,
            )


@dataclass(frozen=True, slots=True)
class TargetQuery:
    """Which model, on which GPU, deployed how, timed how: a catalog id (or another name of the
    entry) or an engine spec for each; `efficiency` a mode or explicit efficiencies."""

    model: str | ModelSpec
    gpu: str | GpuSpec
    deployment: Layout = field(default_factory=Layout)
    efficiency: EfficiencyMode | Efficiency = EfficiencyMode.CALIBRATED
    engine: ServingEngine | None = None
    """The serving engine asked for (`app.catalog.profiles.choose_engine` resolves it); None:
    the GPU's default profile's, else the roofline."""


@dataclass(frozen=True, slots=True)
class EfficiencyUsed:
    """The efficiencies an estimate was timed with, where they come from, and how chosen."""

    mode: EfficiencyMode
    gemm: float
    attention: float
    memory: float
    communication: float
    overhead_ms: float
    source: str
    calibration_id: str | None


@dataclass(frozen=True, slots=True)
class TargetEcho:
    """What was estimated, as the answer names it: ids, deployment, efficiency, versions."""

    model: str
    gpu: str
    tp: int
    pp: int
    dp: int
    ep: int
    gpus_per_replica: int
    weight_dtype: str
    kv_dtype: str
    expert_dtype: str | None
    efficiency: EfficiencyUsed
    catalog_versions: dict[str, int]
    engine: str
    basis: dict[str, str]


@dataclass(frozen=True, slots=True)
class Target:
    model: ModelSpec
    gpu: GpuSpec
    deployment: Deployment
    efficiency: Efficiency
    efficiency_mode: EfficiencyMode
    cost: StepCostModel
    model_id: str
    gpu_id: str
    model_version: int | None = None
    gpu_version: int | None = None
    calibration_id: str | None = None
    price_per_gpu_hour_usd: float | None = None
    expected_error_pct: Mapping[str, float] = field(default_factory=dict)
    engine: ServingEngine = ROOFLINE
    """The engine whose behaviour is simulated (its scheduler, CUDA graphs), resolved: a
    version for every engine but the roofline, whatever times its steps."""
    basis: Mapping[str, str] = field(default_factory=lambda: {"all": ROOFLINE.label})
    warnings: tuple[str, ...] = ()
    """What the answer should say of the target itself (an engine timed by the roofline)."""

    def echo(self) -> TargetEcho:
        eff = self.efficiency
        versions = {
            name: version
            for name, version in (("model", self.model_version), ("gpu", self.gpu_version))
            if version is not None
        }
        return TargetEcho(
            model=self.model_id,
            gpu=self.gpu_id,
            tp=self.deployment.tp,
            pp=self.deployment.pp,
            dp=self.deployment.dp,
            ep=self.deployment.ep,
            gpus_per_replica=self.deployment.gpus,
            weight_dtype=self.deployment.weight_dtype.value,
            kv_dtype=self.deployment.kv_dtype.value,
            expert_dtype=(
                expert_dtype_for(self.model, self.deployment).value
                if self.model.moe is not None
                else None
            ),
            efficiency=EfficiencyUsed(
                mode=self.efficiency_mode,
                gemm=eff.gemm,
                attention=eff.attention,
                memory=eff.memory,
                communication=eff.communication,
                overhead_ms=eff.overhead_ms,
                source=eff.source,
                calibration_id=self.calibration_id,
            ),
            catalog_versions=versions,
            engine=self.engine.label,
            basis=dict(self.basis),
        )

    def scheduler(self, given: Mapping[str, Any]) -> SchedulerConfig:
        """The scheduler this target's engine runs with the settings `given` (by
        `SchedulerConfig` field) over its defaults on this GPU; a 422 naming the setting when
        they cannot work together or the engine's version cannot run them."""
        engine = self.engine
        with spec_errors():
            return engine.policy.scheduler(
                engine.version, self.gpu, self.model.max_context_tokens, **given
            )

    def error_statement(
        self, metrics: Mapping[str, str]
    ) -> tuple[dict[str, float | None], tuple[str, ...]]:
        """How far to trust this target's answer (`error_statement`)."""
        profile = self.cost.profile.id if isinstance(self.cost, ProfiledStepCost) else None
        return error_statement(
            metrics,
            self.expected_error_pct,
            self.efficiency_mode,
            profile,
            self.gpu_id,
            family_of(self.model),
        )

    def error_intervals(
        self, metrics: Mapping[str, str], regime: str
    ) -> tuple[dict[str, StatedInterval | None], tuple[str, ...]]:
        """This target's `error_intervals` for `metrics` in `regime`."""
        kind = (family_of(self.model), str(self.engine.name), basis_kind(self.cost), regime)
        return error_intervals(self.efficiency_mode, kind, metrics)


SIMULATED_METRICS = {"ttft": "prefill", "tpot": "decode"}
"""A simulation's metrics and the phase whose validation residuals each is judged by."""

PHASE_METRICS = {"prefill": "ttft_ms", "decode": "tpot_ms"}
"""An estimate's phases and the published metric the validation record judges each by."""

SIMULATED_RECORD_METRICS = {
    metric: PHASE_METRICS[phase] for metric, phase in SIMULATED_METRICS.items()
}
"""A simulation's metrics and the published metric the validation record judges each by (that
of the phase each comes from)."""


def simulated_regime(saturated: bool) -> str:
    """The regime of a simulated load, as the validation record groups answers: a run whose
    backlog grows without bound is saturated, any other under load."""
    return "saturated" if saturated else "under load"


def error_intervals(
    mode: EfficiencyMode, kind: tuple[str, str, str, str], metrics: Mapping[str, str]
) -> tuple[dict[str, StatedInterval | None], tuple[str, ...]]:
    """Where measured figures of published runs of an answer's `kind` (architecture family,
    engine, basis, regime: `app.validation.record`) lay, in percent of the answer, for each of
    `metrics` (an answer's key to the record's metric: `ttft_ms`, `tpot_ms`); None, with one
    warning saying why, for an ideal or custom efficiency (no run validates them) and a metric
    no published run measured. Every estimate, simulation, capacity and plan answer states its
    interval this one way."""
    if mode is not EfficiencyMode.CALIBRATED:
        why = (
            "an ideal-efficiency answer is a lower bound, not a prediction"
            if mode is EfficiencyMode.IDEAL
            else "the efficiencies the request gives were not validated against runs"
        )
        names = " and ".join(metrics)
        return dict.fromkeys(metrics), (f"error_interval_pct {names} is null: {why}",)
    record = shipped_record()
    stated = {key: record.interval(*kind, metric) for key, metric in metrics.items()}
    unknown = [key for key, interval in stated.items() if interval is None]
    if not unknown:
        return stated, ()
    names = " and ".join(unknown)
    return stated, (
        f"error_interval_pct {names} is null: no published run in the validation set measured it",
    )


def error_statement(  # noqa: PLR0917 - the statement's inputs, in the order callers hold them
    metrics: Mapping[str, str],
    errors: Mapping[str, float],
    mode: EfficiencyMode,
    profile_id: str | None,
    gpu_id: str,
    family: str,
) -> tuple[dict[str, float | None], tuple[str, ...]]:
    """How far to trust an answer's `metrics`, each mapped to the phase its figure comes from
    (`SIMULATED_METRICS`; an estimate's metrics are its phases): the spread of that phase's
    validation residuals in `errors`, but never less than the mean absolute error published
    runs showed for the model's architecture `family` (`Record.validated_error_pct`: a profile's
    interpolation residual of 5 % says nothing of how far a serving run lands), or None where
    none is known, and one warning that says why for those (an answer `mode` gives a bound
    rather than a prediction, a profile `profile_id` without held-out errors, or no benchmark
    run of `gpu_id`). Every estimate, simulation, capacity and plan answer states its error
    this one way."""
    record = shipped_record()
    stated: dict[str, float | None] = {}
    for metric, phase in metrics.items():
        error = errors.get(phase)
        if error is not None:
            validated = record.validated_error_pct(family, PHASE_METRICS[phase])
            if validated is not None and validated > error:
                error = validated
        stated[metric] = error
    unknown = [metric for metric, error in stated.items() if error is None]
    if not unknown:
        return stated, ()
    if mode is EfficiencyMode.IDEAL:
        why = (
            "an ideal-efficiency answer is a lower bound (datasheet peak, no overhead), not a "
            "prediction"
        )
    elif mode is EfficiencyMode.CUSTOM:
        why = "the efficiencies the request gives have not been validated against measurement"
    elif profile_id is not None:
        why = (
            f"profile {profile_id} holds no held-out error for the op families these figures "
            "come from"
        )
    else:
        why = (
            f"no stored benchmark run of GPU {gpu_id} validates the roofline's timing of them "
            "(POST /v1/benchmark-runs with measurements of it states one)"
        )
    names = " and ".join(unknown)
    return stated, (f"expected_error_pct {names} is null, the error unknown: {why}",)


def expected_errors(
    mode: EfficiencyMode,
    gpu_errors: Mapping[str, float],
    residuals: Mapping[str, float] | None,
    basis: Mapping[str, str],
) -> dict[str, float]:
    """By phase, the expected error of an answer timed in `mode`: none for an ideal or custom
    efficiency; timed by a profile, the RMS of its held-out interpolation errors (`residuals`,
    by op family) over the families it timed (per `basis`); else the GPU's validation
    residuals (`gpu_errors`)."""
    if mode is not EfficiencyMode.CALIBRATED:
        return {}
    if residuals is None:
        return dict(gpu_errors)
    families = {
        "prefill": ("gemm", "prefill_attention", "communication"),
        "decode": ("gemm", "decode_attention", "communication"),
    }
    errors = {}
    for phase, names in families.items():
        used = [
            residuals[name]
            for name in names
            if name in residuals and basis.get(name, "").startswith("profile")
        ]
        if used:
            errors[phase] = round((sum(e * e for e in used) / len(used)) ** 0.5, 2)
    return errors


def simulated_error(
    mode: EfficiencyMode,
    *,
    gpu_id: str,
    gpu_errors: Mapping[str, float],
    profile_id: str | None,
    residuals: Mapping[str, float] | None,
    basis: Mapping[str, str],
    family: str,
) -> tuple[dict[str, float | None], tuple[str, ...]]:
    """The error statement (`error_statement`) of a simulated answer (`SIMULATED_METRICS`) on
    `gpu_id`, timed in `mode` by the profile `profile_id` (its held-out `residuals`) or, where
    None, by the roofline (the GPU's validation residuals `gpu_errors`), for a model of the
    architecture `family`: what capacity answers and plan candidates state."""
    errors = expected_errors(mode, gpu_errors, residuals, basis)
    return error_statement(SIMULATED_METRICS, errors, mode, profile_id, gpu_id, family)


def resolve_model(cache: SpecCache, model: str | ModelSpec) -> tuple[ModelSpec, str, int | None]:
    """The model's spec, its catalog id (`inline` for an inline spec) and catalog version; a
    422 naming `model` when the id is unknown."""
    if isinstance(model, str):
        cached = cache.model(model, "model")
        return cached.spec, cached.spec.id, cached.version
    return model, INLINE, None


def resolve_gpu_spec(cache: SpecCache, gpu: str | GpuSpec) -> tuple[GpuSpec, str, CachedGpu | None]:
    """The GPU's spec, its catalog id (`inline` for an inline spec) and its cache entry (None
    inline); a 422 naming `gpu` when the id is unknown."""
    if isinstance(gpu, str):
        cached = cache.gpu(gpu, "gpu")
        return cached.spec, cached.spec.id, cached
    return gpu, INLINE, None


def resolve_target(cache: SpecCache, query: TargetQuery) -> Target:
    """Resolve ids and inline specs; a 422 names the request field behind any impossibility
    (a tp the heads cannot take, a format the GPU cannot compute in)."""
    model_spec, model_id, model_version = resolve_model(cache, query.model)
    gpu_spec, gpu_id, cached = resolve_gpu_spec(cache, query.gpu)
    extras: dict[str, Any] = {}
    if cached is not None:
        extras = {
            "gpu_version": cached.version,
            "price_per_gpu_hour_usd": cached.price_per_gpu_hour_usd,
            "calibration_id": (cached.efficiency_fields or {}).get("calibration_id"),
            "expected_error_pct": cached.expected_error_pct,
        }
    if isinstance(query.efficiency, Efficiency):
        mode, chosen = EfficiencyMode.CUSTOM, query.efficiency
    elif query.efficiency is EfficiencyMode.IDEAL:
        mode, chosen = EfficiencyMode.IDEAL, IDEAL_EFFICIENCY
    else:
        mode, chosen = EfficiencyMode.CALIBRATED, gpu_spec.efficiency
    if mode is not EfficiencyMode.CALIBRATED:  # the GPU's calibration played no part
        extras.pop("calibration_id", None)
        extras.pop("expected_error_pct", None)
    choice = choose_engine(
        query.engine,
        cached.profiles if cached is not None else (),
        gpu=gpu_id,
        measured=mode is EfficiencyMode.CALIBRATED,
        relatives=None if cached is None else cache.relatives_of(cached),
    )
    extras["engine"] = choice.engine
    deployment = query.deployment.deployment(model_spec, choice.engine)
    graphs = (
        ()
        if mode is EfficiencyMode.IDEAL
        else choice.engine.policy.graph_sizes(choice.engine.version, deployment.tp)
    )
    with spec_errors():
        if choice.profile is None or cached is None:
            cost: StepCostModel = StepCostModel(model_spec, gpu_spec, deployment, chosen, graphs)
            extras["basis"] = uniform_basis(
                choice.basis, moe=cost.has_moe, exchanges=deployment.has_exchanges
            )
            extras["warnings"] = choice.warnings
        else:
            measured_on = cache.measured_on(choice)
            key = (
                model_spec,
                cached.spec_key,
                deployment,
                choice.profile.id,
                None if measured_on is None else measured_on.spec_key,
            )
            cost = _PROFILED.get(key) or _PROFILED.put(
                key,
                ProfiledStepCost(
                    model_spec,
                    gpu_spec,
                    deployment,
                    cache.profile(choice.profile),
                    memo_entries=PROFILED_MEMO_ENTRIES,
                    measured_on=None if measured_on is None else measured_on.spec,
                ),
            )
            extras["warnings"] = choice.warnings
    if isinstance(cost, ProfiledStepCost):
        chosen = cost.efficiency
        extras.pop("calibration_id", None)
        extras["basis"] = cost.basis
        extras["expected_error_pct"] = expected_errors(
            mode, {}, cost.profile.residual_pct, cost.basis
        )
    return Target(
        model=model_spec,
        gpu=gpu_spec,
        deployment=deployment,
        efficiency=chosen,
        efficiency_mode=mode,
        cost=cost,
        model_id=model_id,
        gpu_id=gpu_id,
        model_version=model_version,
        **extras,
    )


class _Recent:
    """The most recently built profiled timers: building one reduces the profile's tables to the
    model's shapes (about a millisecond), which the estimate hot path must not pay per request.
    Keys carry the whole GPU spec (`CachedGpu.spec_key`), so a changed or re-created entry is
    never answered from here."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[Hashable, ProfiledStepCost] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> ProfiledStepCost | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: Hashable, cost: ProfiledStepCost) -> ProfiledStepCost:
        with self._lock:
            self._entries[key] = cost
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return cost


PROFILED_TIMERS_KEPT = 64
"""Profiled timers the estimate path keeps built (one per model, GPU, layout and profile)."""
PROFILED_MEMO_ENTRIES = 1024
"""Shapes each measured op class of a kept timer remembers (up to 7 a timer; a full memo starts
again). Budget: 64 timers x 7 memos x 1,024 shapes x at most 160 bytes = 70 MiB, on top of the
timers themselves. The chunk-size search, which reads many shapes, counts fewer instructions
than with the unbounded memos before the bound (docs/performance.md has every route); larger
memos were slower to level off."""
_PROFILED = _Recent(PROFILED_TIMERS_KEPT)
