"""Calibration: decomposed points time exactly as the StepCostModel does, and the bounded
least-squares fit recovers a known efficiency, keeps what it is not asked to fit, and stops at
its bounds."""

from __future__ import annotations

import math

import pytest

from app.engine.calibration import (
    MIN_FRACTION,
    CalibrationPoint,
    ComputeKind,
    FitParameter,
    TimedOp,
    decompose,
    fit_efficiency,
    mape_pct,
    mape_pct_by_phase,
    predict_ms,
    unit_efficiency,
)
from app.engine.specs import Deployment, Efficiency, GpuSpec, ModelSpec
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from tests.engine.test_counting import A100, H100, LLAMA3_8B, MIXTRAL

TRUE = Efficiency(
    gemm=0.55, attention=0.45, memory=0.8, communication=0.7, overhead_ms=2.0, source="truth"
)
START = Efficiency(gemm=0.9, attention=0.9, memory=0.9, communication=0.7, overhead_ms=0.5)

# Prefill at batch 1 and 4 (linear and, at 32K, attention compute-bound) and decode at growing
# batches and contexts (memory-bound): every fitted value is pinned by some point.
LOADS: list[tuple[str, StepLoad]] = [
    ("prefill", prefill_load(512)),
    ("prefill", prefill_load(2048)),
    ("prefill", prefill_load(8192)),
    ("prefill", prefill_load(32768)),
    ("prefill", prefill_load(1024, batch_size=4)),
    ("decode", decode_load(1, 512)),
    ("decode", decode_load(8, 4096)),
    ("decode", decode_load(64, 2048)),
    ("decode", decode_load(256, 1024)),
]


def _points(
    model: ModelSpec = LLAMA3_8B,
    gpu: GpuSpec = A100,
    deployment: Deployment | None = None,
    truth: Efficiency = TRUE,
    start: Efficiency = START,
    loads: list[tuple[str, StepLoad]] = LOADS,
) -> list[CalibrationPoint]:
    """Points whose 'measured' times are the engine's own under `truth`."""
    measured = StepCostModel(model, gpu, deployment, truth)
    unit = StepCostModel(model, gpu, deployment, unit_efficiency(start))
    return [
        decompose(unit.breakdown(load), measured.seconds(load) * 1000.0, phase)
        for phase, load in loads
    ]


def test_predict_by_hand() -> None:
    """gemm op: max(2 ms / 0.5, 1 ms / 0.5) = 4 ms; attention: max(1 / 0.5, 3 / 0.5) = 6 ms;
    plus 0.5 ms of communication and 1 ms of overhead: 11.5 ms."""
    point = CalibrationPoint(
        measured_ms=10.0,
        ops=(TimedOp(ComputeKind.GEMM, 2e-3, 1e-3), TimedOp(ComputeKind.ATTENTION, 1e-3, 3e-3)),
        communication_s=0.5e-3,
    )
    efficiency = Efficiency(gemm=0.5, attention=0.5, memory=0.5, overhead_ms=1.0)
    assert predict_ms([point], efficiency) == pytest.approx((11.5,), rel=1e-12)


@pytest.mark.parametrize(
    ("model", "gpu", "tp"),
    [(LLAMA3_8B, A100, 1), (LLAMA3_8B, H100, 2), (MIXTRAL, H100, 4)],
    ids=["llama3-8b-a100", "llama3-8b-h100-tp2", "mixtral-h100-tp4"],
)
def test_decomposed_points_time_as_the_step_cost_model(
    model: ModelSpec, gpu: GpuSpec, tp: int
) -> None:
    """Whatever the efficiency, a decomposed point predicts StepCostModel.seconds exactly, with
    communication (tp > 1) and MoE experts."""
    deployment = Deployment(tp=tp)
    points = _points(model, gpu, deployment, truth=START, start=START)
    # Communication is timed at decomposition (START's 0.7) and never fitted: keep it there.
    other = Efficiency(gemm=0.3, attention=0.9, memory=0.5, communication=0.7, overhead_ms=9.0)
    for efficiency in (TRUE, START, other):
        cost = StepCostModel(model, gpu, deployment, efficiency)
        expected = [cost.seconds(load) * 1000.0 for _, load in LOADS]
        assert predict_ms(points, efficiency) == pytest.approx(expected, rel=1e-12)


def test_fit_recovers_a_known_efficiency() -> None:
    result = fit_efficiency(_points(), START)
    fitted = result.efficiency
    assert fitted.gemm == pytest.approx(TRUE.gemm, rel=1e-6)
    assert fitted.attention == pytest.approx(TRUE.attention, rel=1e-6)
    assert fitted.memory == pytest.approx(TRUE.memory, rel=1e-6)
    assert fitted.overhead_ms == pytest.approx(TRUE.overhead_ms, rel=1e-6)
    assert fitted.communication == START.communication  # never fitted
    assert result.after_mape_pct < 1e-6
    assert result.before_mape_pct > 10.0  # the start was far off
    assert result.converged
    assert set(result.after_mape_pct_by_phase) == {"prefill", "decode"}


def test_fitting_a_subset_keeps_the_others() -> None:
    """Only the overhead moves; gemm, attention and memory stay at the start exactly."""
    truth = Efficiency(gemm=0.9, attention=0.9, memory=0.9, overhead_ms=3.0)
    start = Efficiency(gemm=0.9, attention=0.9, memory=0.9, overhead_ms=0.0)
    result = fit_efficiency(_points(truth=truth, start=start), start, [FitParameter.OVERHEAD_MS])
    assert result.parameters == (FitParameter.OVERHEAD_MS,)
    assert (result.efficiency.gemm, result.efficiency.attention, result.efficiency.memory) == (
        0.9,
        0.9,
        0.9,
    )
    assert result.efficiency.overhead_ms == pytest.approx(3.0, rel=1e-6)


def test_a_value_no_point_depends_on_stays_put() -> None:
    """Batch-1 decode steps are memory-bound in every op class: attention has no gradient."""
    decode = [("decode", decode_load(1, 256)), ("decode", decode_load(1, 1024))]
    result = fit_efficiency(_points(loads=decode), START)
    assert result.efficiency.attention == START.attention
    assert result.after_mape_pct < 1e-6


def test_fit_stops_at_its_bounds() -> None:
    """Steps measured at half of the ideal time need efficiencies of 2: they end at 1 and the
    overhead at 0, the closest the bounds allow."""
    unit = StepCostModel(LLAMA3_8B, A100, efficiency=unit_efficiency(START))
    points = [
        decompose(unit.breakdown(load), unit.seconds(load) * 1000.0 / 2.0, phase)
        for phase, load in LOADS
    ]
    result = fit_efficiency(points, START)
    fitted = result.efficiency
    assert (fitted.gemm, fitted.attention, fitted.memory) == pytest.approx((1, 1, 1), abs=1e-9)
    assert fitted.overhead_ms == pytest.approx(0.0, abs=1e-9)
    assert result.after_mape_pct == pytest.approx(100.0, rel=1e-6)  # every estimate 2x


def test_fit_cannot_go_below_the_minimum_fraction() -> None:
    """A step measured 10,000x slower than ideal would need gemm 1e-4: it stops at 1e-3."""
    ideal = StepCostModel(LLAMA3_8B, A100)
    unit = StepCostModel(LLAMA3_8B, A100, efficiency=unit_efficiency(START))
    load = prefill_load(8192)
    point = decompose(unit.breakdown(load), ideal.seconds(load) * 1e7, "prefill")
    result = fit_efficiency([point], START, [FitParameter.GEMM])
    assert result.efficiency.gemm == pytest.approx(MIN_FRACTION, rel=1e-9)


def test_overhead_is_bounded_by_the_shortest_step() -> None:
    """One 1 ms step that the roofline says takes ~0: the overhead cannot exceed 1 ms."""
    point = CalibrationPoint(1.0, (TimedOp(ComputeKind.GEMM, 1e-9, 1e-9),), phase="decode")
    result = fit_efficiency([point], Efficiency(), [FitParameter.OVERHEAD_MS])
    assert result.efficiency.overhead_ms <= 1.0
    assert result.efficiency.overhead_ms == pytest.approx(1.0 - 1e-6, rel=1e-6)


def test_mape_by_hand() -> None:
    assert mape_pct([110.0, 90.0], [100.0, 100.0]) == pytest.approx(10.0)
    assert mape_pct([3.0], [2.0]) == pytest.approx(50.0)
    points = [
        CalibrationPoint(100.0, (TimedOp(ComputeKind.GEMM, 0.1, 0.0),), phase="prefill"),
        CalibrationPoint(10.0, (TimedOp(ComputeKind.GEMM, 0.01, 0.0),), phase="decode"),
        CalibrationPoint(10.0, (TimedOp(ComputeKind.GEMM, 0.01, 0.0),), phase="decode"),
    ]
    assert mape_pct_by_phase(points, [120.0, 9.0, 12.0]) == pytest.approx(
        {"prefill": 20.0, "decode": 15.0}
    )


def test_log_error_is_symmetric_in_ratio() -> None:
    """Log error weighs a 2x overestimate like a 2x underestimate: fitting one overhead to a
    pair of steps 1 ms and 4 ms long lands on their geometric mean, 2 ms."""
    points = [
        CalibrationPoint(1.0, (TimedOp(ComputeKind.GEMM, 0.0, 0.0),), phase="decode"),
        CalibrationPoint(4.0, (TimedOp(ComputeKind.GEMM, 0.0, 0.0),), phase="decode"),
    ]
    start = Efficiency(overhead_ms=0.5)
    # The ceiling of the overhead is the shortest step (1 ms): the unbounded optimum, 2 ms, is
    # past it, so the fit stops at the ceiling.
    assert fit_efficiency(points, start, [FitParameter.OVERHEAD_MS]).efficiency.overhead_ms == (
        pytest.approx(1.0, rel=1e-6)
    )
    unbounded = [
        CalibrationPoint(1.0, (TimedOp(ComputeKind.GEMM, 1e-3, 0.0),), phase="decode"),
        CalibrationPoint(4.0, (TimedOp(ComputeKind.GEMM, 1e-3, 0.0),), phase="decode"),
    ]
    # 1 ms of gemm at efficiency e: t = 1/e ms; log-optimal 1/e = sqrt(1 * 4) = 2, e = 0.5.
    fitted = fit_efficiency(unbounded, Efficiency(), [FitParameter.GEMM]).efficiency
    assert fitted.gemm == pytest.approx(0.5, rel=1e-6)
    assert math.isclose(predict_ms(unbounded, fitted)[0], 2.0, rel_tol=1e-6)


def test_impossible_input_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one measured point"):
        fit_efficiency([], START)
    with pytest.raises(ValueError, match="at least one parameter"):
        fit_efficiency(_points(), START, [])
    with pytest.raises(ValueError, match="measured_ms"):
        CalibrationPoint(0.0, (TimedOp(ComputeKind.GEMM, 1e-3, 0.0),))
    with pytest.raises(ValueError, match="measured_ms"):
        CalibrationPoint(math.nan, (TimedOp(ComputeKind.GEMM, 1e-3, 0.0),))
    with pytest.raises(ValueError, match="negative"):
        CalibrationPoint(1.0, (TimedOp(ComputeKind.GEMM, -1e-3, 0.0),))
    timed_with_overhead = StepCostModel(LLAMA3_8B, A100, efficiency=TRUE)
    with pytest.raises(ValueError, match="unit_efficiency"):
        decompose(timed_with_overhead.breakdown(decode_load(1, 10)), 1.0)
