"""Speculative decoding against closed forms: a decode-only step is the verify step plus the
drafter's steps, over the tokens it emits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine.counting import OpClass
from app.engine.dtypes import DType
from app.engine.simulation import simulate
from app.engine.simulation.speculative import (
    DraftMethod,
    SpeculativeDecoding,
    SpeculativeTimer,
    verify_load,
)
from app.engine.specs import Deployment, SpecError
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from app.engine.workload import Trace
from tests.engine.test_architectures import DEEPSEEK
from tests.engine.test_counting import H100, LLAMA3_8B
from tests.engine.test_simulator import BIG_KV, LinearTimer

TARGET = StepCostModel(LLAMA3_8B, H100, Deployment())
DRAFTER = LinearTimer(base_s=0.001)  # a small draft model: 1 ms a step


def test_one_accepted_draft_token_halves_the_steps() -> None:
    """k = 1, always accepted: every verify step (the decode, and one more row per sequence
    attending over its context) and one draft step emit 2 tokens: TPOT = (verify + 1 ms) / 2."""
    spec = SpeculativeDecoding(DraftMethod.DRAFT, 1, 1.0)
    timer = SpeculativeTimer(TARGET, spec, DRAFTER)
    load = decode_load(1, 1000)
    verify = TARGET.seconds(
        StepLoad(
            prefill_tokens=1,
            prefill_attention_pairs=1000 + 1,
            decode_seqs=1,
            decode_context_tokens=1000,
        )
    )
    assert verify_load(load, 1) == StepLoad(
        prefill_tokens=1, prefill_attention_pairs=1001, decode_seqs=1, decode_context_tokens=1000
    )
    assert timer.seconds(load) == pytest.approx((verify + 0.001) / 2)
    # A lone request through the simulator: its TPOT is that, step after step.
    trace = Trace.from_rows([(0.0, 1000, 101)])
    result = simulate(trace, timer, kv_capacity_tokens=BIG_KV, exact_step_times=True)
    plain = simulate(trace, TARGET, kv_capacity_tokens=BIG_KV, exact_step_times=True)
    assert result.tpot_ms.p50 == pytest.approx(
        (TARGET.seconds(verify_load(decode_load(1, 1050), 1)) + 0.001) / 2 * 1000, rel=0.01
    )
    # Memory-bound: verifying 2 tokens costs about one decode step, so TPOT nearly halves.
    assert result.tpot_ms.p50 < 0.65 * plain.tpot_ms.p50


def test_nothing_accepted_costs_more_than_no_speculation() -> None:
    spec = SpeculativeDecoding(DraftMethod.DRAFT, 3, 0.0)
    timer = SpeculativeTimer(TARGET, spec, DRAFTER)
    load = decode_load(8, 8 * 2000)
    assert timer.seconds(load) > TARGET.seconds(load)
    # Prefill-only steps are the target's own.
    prefill = prefill_load(512)
    assert timer.seconds(prefill) == TARGET.seconds(prefill)


def test_mtp_drafts_with_one_layer_and_the_head() -> None:
    """DeepSeek-V3's MTP module: each draft token is one more decoder layer (1/61 of the
    step's layers) and the LM head."""
    fp8 = Deployment(tp=8, weight_dtype=DType.FP8)
    target = StepCostModel(DEEPSEEK, H100, fp8)
    timer = SpeculativeTimer(target, SpeculativeDecoding(DraftMethod.MTP, 1, 0.85))
    step = decode_load(16, 3000)  # 16 sequences of 3,000 tokens
    breakdown = target.breakdown(step)
    head = sum(op.seconds for op in breakdown.ops if op.op_class is OpClass.LM_HEAD)
    layer = (breakdown.total_s - breakdown.overhead_s - head) / 61
    assert timer.draft_seconds(16, 16 * 3000) == pytest.approx(layer + head)
    assert timer.seconds(step) == pytest.approx(
        (target.seconds(verify_load(step, 1)) + layer + head) / 1.85
    )
    with pytest.raises(SpecError) as caught:
        SpeculativeTimer(TARGET, SpeculativeDecoding(DraftMethod.MTP, 1, 0.5))
    assert caught.value.field == "speculative.method"
    assert replace(DEEPSEEK, mtp_layers=0).mtp_layers == 0


def test_speculation_rules() -> None:
    with pytest.raises(SpecError) as caught:
        SpeculativeDecoding(DraftMethod.DRAFT, 2, 3.0)
    assert caught.value.field == "speculative.mean_accepted_tokens"
    with pytest.raises(SpecError) as caught:
        SpeculativeTimer(TARGET, SpeculativeDecoding(DraftMethod.DRAFT, 2, 1.0))
    assert caught.value.field == "speculative.draft_model"
