"""The roofline endpoint's figures."""

from __future__ import annotations

import pytest

from app.engine.dtypes import DType
from app.engine.roofline import Bound, RooflinePhase, attainable_flops_per_s, roofline
from app.engine.specs import Deployment, Efficiency, SpecError
from app.engine.step_cost import StepCostModel
from tests.engine.test_counting import A100, H100, LLAMA3_8B, LLAMA3_70B


def test_attainable_is_the_lower_roof() -> None:
    assert attainable_flops_per_s(10, 312e12, 2e12) == 20e12
    assert attainable_flops_per_s(1000, 312e12, 2e12) == 312e12


def test_without_a_model_article_b_idealisation() -> None:
    """A100 80 GB: ridge 312e12 / 2.039e12 = 153 (article A's table); prefill intensity = n,
    decode = B in bf16."""
    result = roofline(A100, prompt_tokens=512, batch_size=8)
    assert result.ridge_intensity == pytest.approx(153.0, abs=0.1)
    by_phase = {p.phase: p for p in result.phases}
    assert by_phase[RooflinePhase.PREFILL].arithmetic_intensity == 512
    assert by_phase[RooflinePhase.PREFILL].bound is Bound.COMPUTE
    assert by_phase[RooflinePhase.DECODE].arithmetic_intensity == 8
    assert by_phase[RooflinePhase.DECODE].attainable_flops_per_s == pytest.approx(8 * 2.039e12)
    assert result.warnings


def test_with_a_model_every_phase_is_placed() -> None:
    result = roofline(H100, model=LLAMA3_8B, prompt_tokens=4096, context_tokens=4096)
    by_phase = {p.phase: p for p in result.phases}
    assert set(by_phase) == set(RooflinePhase)
    assert by_phase[RooflinePhase.PREFILL].bound is Bound.COMPUTE
    assert by_phase[RooflinePhase.DECODE].bound is Bound.MEMORY
    # bf16 KV, G = 4: decode attention 2*G*c/(G+c) per 2 bytes = G*c/(G+c) ~ 4.
    assert by_phase[RooflinePhase.DECODE_ATTENTION].arithmetic_intensity == pytest.approx(
        4 * 4096 / 4100
    )
    assert by_phase[RooflinePhase.PREFILL_ATTENTION].compute_dtype is DType.BF16


def test_fp8_kv_on_a_gpu_without_fp8_warns() -> None:
    result = roofline(A100, model=LLAMA3_8B, deployment=Deployment(kv_dtype=DType.FP8))
    assert any("no fp8" in w for w in result.warnings)


def test_rejects_impossible_input() -> None:
    with pytest.raises(SpecError) as error:
        roofline(A100, model=LLAMA3_8B, context_tokens=10**7)
    assert error.value.field == "context_tokens"
    with pytest.raises(SpecError) as error:
        roofline(A100, deployment=Deployment(weight_dtype=DType.FP8))
    assert error.value.field == "weight_dtype"
    with pytest.raises(SpecError) as error:
        roofline(A100, batch_size=0)
    assert error.value.field == "batch_size"


def test_a_kept_cost_model_counts_the_same() -> None:
    """The service passes the target's cost model (counts do not depend on its efficiency);
    one of another model is not used."""
    fresh = roofline(H100, model=LLAMA3_8B, prompt_tokens=3000, context_tokens=1000)
    calibrated = Efficiency(gemm=0.6, attention=0.5, memory=0.8, communication=0.7)
    kept = StepCostModel(LLAMA3_8B, H100, Deployment(), calibrated)
    assert (
        roofline(H100, model=LLAMA3_8B, prompt_tokens=3000, context_tokens=1000, cost=kept) == fresh
    )
    other = StepCostModel(LLAMA3_70B, H100, Deployment(tp=8))
    assert (
        roofline(H100, model=LLAMA3_8B, prompt_tokens=3000, context_tokens=1000, cost=other)
        == fresh
    )
