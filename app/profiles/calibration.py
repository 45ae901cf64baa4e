"""Simulation-based calibration of a profile's engine overhead against serving runs.

The kernels of a profile are measured; what a serving engine adds around them (scheduling,
sampling, dispatch) is not, and differs by engine and version. A calibration takes serving runs
of one (GPU, engine, version), replays each on the simulator, and fits the overhead so that the
replays reproduce the runs: `step_ms` against the median TPOT (every decode step pays it), then
`prefill_per_layer_ms` against the median TTFT (every request pays it once), each by a golden-
section search on the mean squared log error. The result is a new profile of the same engine
version, uploaded and made the GPU's default: other engines' answers do not move.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from app.engine.profiles import EngineOverhead, Profile, ProfiledStepCost
from app.formats.serving_results import ServingMeasurement
from app.simulations.service import SimulationJob, run_simulation_job

__all__ = ["OverheadFit", "fit_overhead"]

_STEP_MS = (0.0, 20.0)
_PER_LAYER_MS = (0.0, 5.0)
_ITERATIONS = 14  # golden-section steps: the bracket shrinks to 0.1 % of its width


@dataclass(frozen=True, slots=True)
class OverheadFit:
    overhead: EngineOverhead
    before: dict[str, float]
    """Mean absolute error, percent, of TTFT p50, TPOT p50 and mean e2e across the runs."""
    after: dict[str, float]
    runs: int


def _with_overhead(
    jobs: list[SimulationJob], profile: Profile, overhead: EngineOverhead
) -> list[SimulationJob]:
    changed = replace(profile, overhead=overhead)
    out = []
    for job in jobs:
        target = job.target
        cost = ProfiledStepCost(target.model, target.gpu, target.deployment, changed)
        out.append(replace(job, target=replace(target, cost=cost)))
    return out


def _errors(
    jobs: list[SimulationJob], measurements: list[ServingMeasurement]
) -> dict[str, list[float]]:
    """Log errors (simulated over measured) per metric."""
    found: dict[str, list[float]] = {"ttft_ms_p50": [], "tpot_ms_p50": [], "e2e_ms_mean": []}
    for job, measurement in zip(jobs, measurements, strict=True):
        result = run_simulation_job(job).result
        pairs = (
            ("ttft_ms_p50", result.ttft_ms.p50, measurement.ttft_ms.p50),
            ("tpot_ms_p50", result.tpot_ms.p50, measurement.tpot_ms.p50),
            ("e2e_ms_mean", result.e2e_ms.mean, measurement.e2e_ms.mean),
        )
        for name, simulated, measured in pairs:
            if measured and simulated and measured > 0 and simulated > 0:
                found[name].append(math.log(simulated / measured))
    return found


def _mape(errors: dict[str, list[float]]) -> dict[str, float]:
    return {
        name: round(100.0 * sum(abs(math.expm1(e)) for e in values) / len(values), 2)
        for name, values in errors.items()
        if values
    }


def _golden(objective: Callable[[float], float], low: float, high: float) -> float:
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = objective(c), objective(d)
    for _ in range(_ITERATIONS):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = objective(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = objective(d)
    return (a + b) / 2.0


def fit_overhead(
    profile: Profile, jobs: list[SimulationJob], measurements: list[ServingMeasurement]
) -> OverheadFit:
    """Fit `step_ms`, then `prefill_per_layer_ms`, to the runs (in a heavy-work process)."""
    start = profile.overhead

    def loss(metric: str, overhead: EngineOverhead) -> float:
        values = _errors(_with_overhead(jobs, profile, overhead), measurements)[metric]
        return sum(v * v for v in values) / len(values) if values else 0.0

    before = _mape(_errors(_with_overhead(jobs, profile, start), measurements))
    step_ms = _golden(lambda x: loss("tpot_ms_p50", replace(start, step_ms=x)), *_STEP_MS)
    fitted = replace(start, step_ms=round(step_ms, 4))
    per_layer = _golden(
        lambda x: loss("ttft_ms_p50", replace(fitted, prefill_per_layer_ms=x)), *_PER_LAYER_MS
    )
    fitted = replace(fitted, prefill_per_layer_ms=round(per_layer, 4))
    after = _mape(_errors(_with_overhead(jobs, profile, fitted), measurements))
    return OverheadFit(fitted, before, after, len(jobs))


def fitted_document(
    base: dict[str, Any], fit: OverheadFit, new_id: str, run_ids: list[str]
) -> dict[str, Any]:
    """The base profile's document with the fitted overhead, as a new default profile."""
    overhead = fit.overhead
    document = dict(base)
    document.update(
        id=new_id,
        default=True,
        overhead={
            "step_ms": overhead.step_ms,
            "per_sequence_ms": overhead.per_sequence_ms,
            "per_token_ms": overhead.per_token_ms,
            "prefill_per_layer_ms": overhead.prefill_per_layer_ms,
            "source": (
                f"fitted to serving runs {', '.join(run_ids)} by simulation (step_ms to the "
                f"median TPOT, prefill_per_layer_ms to the median TTFT); kernels from profile "
                f"{base['id']}. MAPE before {fit.before}, after {fit.after}."
            )[:2000],
        },
        source={
            "title": f"profile {base['id']} calibrated to {len(run_ids)} serving run(s)",
            "url": base["source"].get("url"),
            "note": base["source"].get("note"),
        },
    )
    return document
