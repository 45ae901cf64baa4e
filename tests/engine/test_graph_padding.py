"""CUDA-graph padding: a decode-only step runs its linear layers at the next batch size the
engine captured a graph for, its attention at the real batch."""

from __future__ import annotations

import pytest

from app.catalog.loader import bundled_gpus, bundled_models
from app.catalog.profiles import bundled_document
from app.engine.counting import OpClass
from app.engine.profiles import ProfiledStepCost
from app.engine.serving import policy_of
from app.engine.specs import Deployment
from app.engine.step_cost import decode_load, prefill_load
from app.formats.catalog_specs import gpu_spec_from_fields, model_spec_from_fields

GPU = gpu_spec_from_fields(next(g for g in bundled_gpus() if g["id"] == "h100-sxm5-80gb"))
MODEL = model_spec_from_fields(next(m for m in bundled_models() if m["id"] == "llama-3.1-8b"))


def _timer(profile_id: str) -> ProfiledStepCost:
    return ProfiledStepCost(MODEL, GPU, Deployment(), bundled_document(profile_id).to_profile())


def test_the_engines_capture_sizes() -> None:
    vllm = policy_of("vllm").graph_sizes("0.24.0", 1)
    assert vllm[:5] == (1, 2, 4, 8, 16) and vllm[-1] == 512 and len(vllm) == 67
    v0 = policy_of("vllm").graph_sizes("0.6.0", 1)  # V0's _BATCH_SIZES_TO_CAPTURE
    assert v0[:5] == (1, 2, 4, 8, 16) and v0[-1] == 256 and len(v0) == 35
    sglang = policy_of("sglang").graph_sizes("0.5.14", 1)
    assert sglang[:6] == (1, 2, 4, 8, 12, 16) and sglang[-1] == 256
    assert policy_of("sglang").graph_sizes("0.5.14", 4)[-1] == 512
    assert policy_of("trtllm").graph_sizes("1.3.0rc20", 1) == ()
    assert policy_of("roofline").graph_sizes(None, 1) == ()


@pytest.mark.parametrize(
    ("profile", "seqs", "padded"),
    [
        ("h100-sxm5-80gb-vllm-0.24.0", 9, 16),
        ("h100-sxm5-80gb-vllm-0.24.0", 16, 16),
        ("h100-sxm5-80gb-vllm-0.24.0", 3, 4),
        ("h100-sxm5-80gb-sglang-0.5.14", 9, 12),
    ],
)
def test_a_decode_step_runs_at_the_next_captured_batch(
    profile: str, seqs: int, padded: int
) -> None:
    timer = _timer(profile)
    step = {op.op_class: op for op in timer.breakdown(decode_load(seqs, 1000)).ops}
    full = {op.op_class: op for op in timer.breakdown(decode_load(padded, 1000)).ops}
    # The projections and the LM head take the padded batch's time; attention the real one.
    for op in (OpClass.QKV_PROJ, OpClass.O_PROJ, OpClass.FFN, OpClass.LM_HEAD):
        assert step[op].seconds == pytest.approx(full[op].seconds, rel=1e-9)
    assert timer.seconds(decode_load(seqs, 1000)) == pytest.approx(
        timer.breakdown(decode_load(seqs, 1000)).total_s
    )


def test_prefill_steps_and_trtllm_are_not_padded() -> None:
    trt = _timer("h100-sxm5-80gb-trtllm-1.3.0rc20")
    nine = {op.op_class: op for op in trt.breakdown(decode_load(9, 1000)).ops}
    sixteen = {op.op_class: op for op in trt.breakdown(decode_load(16, 1000)).ops}
    assert nine[OpClass.QKV_PROJ].seconds < sixteen[OpClass.QKV_PROJ].seconds
    vllm = _timer("h100-sxm5-80gb-vllm-0.24.0")
    mixed = vllm.breakdown(prefill_load(9) + decode_load(3, 1000))
    ops = {op.op_class: op for op in mixed.ops}
    unpadded = {op.op_class: op for op in vllm.breakdown(prefill_load(12)).ops}
    assert ops[OpClass.QKV_PROJ].seconds == pytest.approx(unpadded[OpClass.QKV_PROJ].seconds)
