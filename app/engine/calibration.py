"""Calibration: fit a GPU's efficiencies to measured step times.

A measured point is decomposed once, at 100 % of peak and bandwidth, into the compute and memory
seconds of each op class (what `StepCostModel.breakdown` returns under `unit_efficiency`). Its
time under any efficiency `eta` is then docs/model.md's roofline sum (section 3)

    t(eta) = sum over ops of max(compute_s / eta_kind, memory_s / eta_memory)
             + communication_s + overhead_ms / 1000

with `eta_kind` the GEMM efficiency for linear layers, router and LM head and the attention
efficiency for attention. So a fit evaluates a candidate efficiency in microseconds, and a
decomposed point times exactly as `StepCostModel.seconds` would.

`fit_efficiency` minimises sum_i (log t_i(eta) - log measured_i)^2 with
`scipy.optimize.least_squares` (trust-region reflective, bounded): log error weighs a 10 % miss on
a 1 ms decode step as much as one on a 30 s prefill. Fractions are bounded to
[MIN_FRACTION, 1], the overhead to [0, min(shortest measured step, MAX_OVERHEAD_MS)].
Communication is never fitted (single-GPU runs carry no information about it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from app.engine.counting import ATTENTION_OP_CLASSES
from app.engine.specs import Efficiency
from app.engine.timing import StepTime
from app.engine.units import MS_PER_S

__all__ = [
    "ALL_PARAMETERS",
    "MAX_OVERHEAD_MS",
    "MIN_FRACTION",
    "CalibrationPoint",
    "CalibrationResult",
    "ComputeKind",
    "FitParameter",
    "TimedOp",
    "decompose",
    "fit_efficiency",
    "mape_pct",
    "mape_pct_by_phase",
    "predict_ms",
    "unit_efficiency",
]

MIN_FRACTION = 1e-3  # an efficiency must stay positive; 0.1 % of peak is "effectively nothing"
MAX_OVERHEAD_MS = 1000.0  # the catalog's bound on overhead_ms


class FitParameter(StrEnum):
    """The efficiency values a calibration may fit."""

    GEMM = "gemm"
    ATTENTION = "attention"
    MEMORY = "memory"
    OVERHEAD_MS = "overhead_ms"


ALL_PARAMETERS: tuple[FitParameter, ...] = tuple(FitParameter)


class ComputeKind(StrEnum):
    """Which compute efficiency scales an op class's compute time."""

    GEMM = "gemm"  # linear layers, MoE router and experts, LM head
    ATTENTION = "attention"


@dataclass(frozen=True, slots=True)
class TimedOp:
    """One op class of one point at 100 % of peak and bandwidth, seconds."""

    kind: ComputeKind
    compute_s: float
    memory_s: float


@dataclass(frozen=True, slots=True)
class CalibrationPoint:
    """A measured step and its decomposition. `phase` labels it for per-phase errors."""

    measured_ms: float
    ops: tuple[TimedOp, ...]
    communication_s: float = 0.0
    """Tensor-parallel all-reduce seconds at the GPU's (unfitted) communication efficiency."""
    phase: str = ""

    def __post_init__(self) -> None:
        if not (self.measured_ms > 0 and math.isfinite(self.measured_ms)):
            raise ValueError(f"measured_ms must be positive and finite, got {self.measured_ms}")
        if self.communication_s < 0:
            raise ValueError("communication_s must not be negative")
        for op in self.ops:
            if op.compute_s < 0 or op.memory_s < 0:
                raise ValueError("op times must not be negative")
        if not self.ops and self.communication_s == 0:
            raise ValueError("a point needs at least one op to time")


def unit_efficiency(efficiency: Efficiency) -> Efficiency:
    """`efficiency` with compute and memory at 100 % and no overhead (communication kept): the
    efficiency to build the `StepCostModel` whose breakdowns `decompose` takes. Never
    `IDEAL_EFFICIENCY` (its source says what it is): the ideal roofline has no norm and
    activation kernels, a decomposed step keeps them."""
    return replace(
        efficiency,
        gemm=1.0,
        attention=1.0,
        memory=1.0,
        overhead_ms=0.0,
        source=f"unit, to decompose steps at (from: {efficiency.source})",
    )


def decompose(step: StepTime, measured_ms: float, phase: str = "") -> CalibrationPoint:
    """A calibration point from a step timed under `unit_efficiency` (its overhead must be 0)."""
    if step.overhead_s != 0:
        raise ValueError("decompose a step timed under unit_efficiency (no overhead)")
    ops = tuple(
        TimedOp(
            ComputeKind.ATTENTION if op.op_class in ATTENTION_OP_CLASSES else ComputeKind.GEMM,
            op.compute_s,
            op.memory_s,
        )
        for op in step.ops
    )
    return CalibrationPoint(measured_ms, ops, step.communication_s, phase)


class _Arrays:
    """The points flattened into arrays, for vectorised timing and its Jacobian."""

    def __init__(self, points: Sequence[CalibrationPoint]) -> None:
        owner: list[int] = []
        attention: list[bool] = []
        compute: list[float] = []
        memory: list[float] = []
        for index, point in enumerate(points):
            for op in point.ops:
                owner.append(index)
                attention.append(op.kind is ComputeKind.ATTENTION)
                compute.append(op.compute_s)
                memory.append(op.memory_s)
        self.count = len(points)
        self.owner = np.asarray(owner, dtype=np.intp)
        self.attention = np.asarray(attention, dtype=bool)
        self.compute = np.asarray(compute, dtype=float)
        self.memory = np.asarray(memory, dtype=float)
        self.communication = np.asarray([p.communication_s for p in points], dtype=float)
        self.measured_s = np.asarray([p.measured_ms / MS_PER_S for p in points], dtype=float)

    def _per_point(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        sums = np.bincount(self.owner, weights=values, minlength=self.count)
        return sums.astype(np.float64, copy=False)

    def seconds(
        self, gemm: float, attention: float, memory: float, overhead_ms: float
    ) -> NDArray[np.float64]:
        eta = np.where(self.attention, attention, gemm)
        ops: NDArray[np.float64] = np.maximum(self.compute / eta, self.memory / memory)
        seconds: NDArray[np.float64] = (
            self._per_point(ops) + self.communication + overhead_ms / MS_PER_S
        )
        return seconds

    def gradients(
        self, gemm: float, attention: float, memory: float
    ) -> dict[FitParameter, NDArray[np.float64]]:
        """d seconds / d parameter for every point (the compute side wins a tie)."""
        eta = np.where(self.attention, attention, gemm)
        compute_s = self.compute / eta
        memory_s = self.memory / memory
        compute_bound = compute_s >= memory_s
        d_compute = np.where(compute_bound, -compute_s / eta, 0.0)
        d_memory = np.where(compute_bound, 0.0, -memory_s / memory)
        return {
            FitParameter.GEMM: self._per_point(np.where(self.attention, 0.0, d_compute)),
            FitParameter.ATTENTION: self._per_point(np.where(self.attention, d_compute, 0.0)),
            FitParameter.MEMORY: self._per_point(d_memory),
            FitParameter.OVERHEAD_MS: np.full(self.count, 1.0 / MS_PER_S),
        }


def _values(efficiency: Efficiency) -> dict[FitParameter, float]:
    return {
        FitParameter.GEMM: efficiency.gemm,
        FitParameter.ATTENTION: efficiency.attention,
        FitParameter.MEMORY: efficiency.memory,
        FitParameter.OVERHEAD_MS: efficiency.overhead_ms,
    }


def predict_ms(points: Sequence[CalibrationPoint], efficiency: Efficiency) -> tuple[float, ...]:
    """Each point's step time under `efficiency`, ms. Communication is the points' own (timed
    at the efficiency they were decomposed under), not `efficiency.communication`."""
    if not points:
        return ()
    seconds = _Arrays(points).seconds(
        efficiency.gemm, efficiency.attention, efficiency.memory, efficiency.overhead_ms
    )
    return tuple(float(s) * MS_PER_S for s in seconds)


def mape_pct(estimated_ms: Sequence[float], measured_ms: Sequence[float]) -> float:
    """Mean absolute percentage error: mean of |estimated - measured| / measured, in %."""
    if len(estimated_ms) != len(measured_ms) or not measured_ms:
        raise ValueError("mape_pct needs equally many estimates and measurements, at least one")
    return (
        100.0
        * sum(abs(e - m) / m for e, m in zip(estimated_ms, measured_ms, strict=True))
        / len(measured_ms)
    )


def mape_pct_by_phase(
    points: Sequence[CalibrationPoint], estimated_ms: Sequence[float]
) -> dict[str, float]:
    """MAPE of each phase label present, in the order the phases first appear."""
    groups: dict[str, tuple[list[float], list[float]]] = {}
    for point, estimate in zip(points, estimated_ms, strict=True):
        estimates, measured = groups.setdefault(point.phase, ([], []))
        estimates.append(estimate)
        measured.append(point.measured_ms)
    return {phase: mape_pct(e, m) for phase, (e, m) in groups.items()}


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    """A fit: the new efficiency (unfitted values and `communication` kept from the start), and
    the mean absolute percentage error of the points before and after."""

    efficiency: Efficiency
    parameters: tuple[FitParameter, ...]
    before_mape_pct: float
    after_mape_pct: float
    before_mape_pct_by_phase: Mapping[str, float]
    after_mape_pct_by_phase: Mapping[str, float]
    before_ms: tuple[float, ...]
    after_ms: tuple[float, ...]
    rms_log_error_before: float
    rms_log_error_after: float
    converged: bool
    evaluations: int


def _bounds(parameter: FitParameter, overhead_ceiling_ms: float) -> tuple[float, float]:
    if parameter is FitParameter.OVERHEAD_MS:
        return 0.0, overhead_ceiling_ms
    return MIN_FRACTION, 1.0


def _rms_log_error(estimated_ms: Sequence[float], measured_ms: Sequence[float]) -> float:
    logs = [math.log(e / m) ** 2 for e, m in zip(estimated_ms, measured_ms, strict=True)]
    return math.sqrt(sum(logs) / len(logs))


def fit_efficiency(
    points: Sequence[CalibrationPoint],
    start: Efficiency,
    parameters: Sequence[FitParameter] = ALL_PARAMETERS,
    *,
    source: str = "calibration: least squares on log error against measured step times",
) -> CalibrationResult:
    """Fit `parameters` of `start` to `points`; the others keep their `start` values.

    Raises `ValueError` without points or parameters. The start values are clipped into the
    bounds and used as the initial guess, so a parameter no point depends on (attention when
    every step is memory-bound) stays where it was.
    """
    if not points:
        raise ValueError("a calibration needs at least one measured point")
    chosen = tuple(dict.fromkeys(FitParameter(p) for p in parameters))
    if not chosen:
        raise ValueError("a calibration needs at least one parameter to fit")
    arrays = _Arrays(points)
    measured_ms = [p.measured_ms for p in points]
    log_measured = np.log(arrays.measured_s)
    overhead_ceiling = min(*measured_ms, MAX_OVERHEAD_MS)
    fixed = _values(start)
    bounds = [_bounds(p, overhead_ceiling) for p in chosen]
    x0 = np.asarray(
        [min(max(fixed[p], low), high) for p, (low, high) in zip(chosen, bounds, strict=True)]
    )

    def values_of(x: NDArray[np.float64]) -> dict[FitParameter, float]:
        return fixed | {p: float(v) for p, v in zip(chosen, x, strict=True)}

    def seconds_of(v: dict[FitParameter, float]) -> NDArray[np.float64]:
        return arrays.seconds(
            v[FitParameter.GEMM],
            v[FitParameter.ATTENTION],
            v[FitParameter.MEMORY],
            v[FitParameter.OVERHEAD_MS],
        )

    def residuals(x: NDArray[np.float64]) -> NDArray[np.float64]:
        result: NDArray[np.float64] = np.log(seconds_of(values_of(x))) - log_measured
        return result

    def jacobian(x: NDArray[np.float64]) -> NDArray[np.float64]:
        v = values_of(x)
        seconds = seconds_of(v)
        grads = arrays.gradients(
            v[FitParameter.GEMM], v[FitParameter.ATTENTION], v[FitParameter.MEMORY]
        )
        # d log t / d p = (d t / d p) / t
        return np.column_stack([grads[p] / seconds for p in chosen])

    solution = least_squares(
        residuals,
        x0,
        jac=jacobian,
        bounds=([b[0] for b in bounds], [b[1] for b in bounds]),
        method="trf",
        x_scale="jac",
        xtol=1e-10,
        ftol=1e-12,
        gtol=1e-12,
        max_nfev=1000,
    )
    x = np.clip(solution.x, [b[0] for b in bounds], [b[1] for b in bounds])
    # The bounded trust-region steps can drift a value no point depends on (attention when every
    # step is memory-bound): put each such value back where it started.
    best = residuals(x)
    for index in range(len(chosen)):
        trial = x.copy()
        trial[index] = x0[index]
        if np.array_equal(residuals(trial), best):
            x = trial
    fitted = values_of(x)
    efficiency = replace(
        start,
        gemm=fitted[FitParameter.GEMM],
        attention=fitted[FitParameter.ATTENTION],
        memory=fitted[FitParameter.MEMORY],
        overhead_ms=fitted[FitParameter.OVERHEAD_MS],
        source=source,
    )
    before = predict_ms(points, start)
    after = predict_ms(points, efficiency)
    return CalibrationResult(
        efficiency=efficiency,
        parameters=chosen,
        before_mape_pct=mape_pct(before, measured_ms),
        after_mape_pct=mape_pct(after, measured_ms),
        before_mape_pct_by_phase=mape_pct_by_phase(points, before),
        after_mape_pct_by_phase=mape_pct_by_phase(points, after),
        before_ms=before,
        after_ms=after,
        rms_log_error_before=_rms_log_error(before, measured_ms),
        rms_log_error_after=_rms_log_error(after, measured_ms),
        converged=bool(solution.success),
        evaluations=int(solution.nfev),
    )
