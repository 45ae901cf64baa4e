"""Memory the job predicts before allocating: hand-counted weights and KV caches, and which
points of the H200 run (scripts/device_bench.sh) cannot fit. Torch-free."""

from __future__ import annotations

import pytest

from app.bench.catalog import bundled_entries, find_model, run_model_spec
from app.bench.config import PointPlan
from app.bench.memory import (
    GIB,
    PointBytes,
    PredictedOutOfMemory,
    check_fits,
    kv_cache_bytes,
    parameter_count,
    point_bytes,
    weight_bytes,
)
from app.formats.run_document import Phase, RunModelSpec

from .conftest import TINY_ENTRY

LLAMA_3_8B = run_model_spec(
    find_model("llama-3-8b", bundled_entries("models")), model_id="llama-3-8b"
)
BF16 = 2
H200_BYTES = 143_771 * 2**20  # nvidia-smi's 143,771 MiB; PyTorch sees a little less


def test_llama_3_8b_has_its_published_parameter_count() -> None:
    # The safetensors total of meta-llama/Meta-Llama-3-8B: 16,060,522,496 bytes in bf16.
    assert parameter_count(LLAMA_3_8B) == 8_030_261_248
    assert weight_bytes(LLAMA_3_8B, BF16, max_positions=0) == 16_060_522_496


def test_kv_cache_is_two_layers_of_kv_heads_per_token() -> None:
    # 2 (K and V) * 32 layers * 8 KV heads * 128 wide * 2 bytes = 131,072 bytes per token.
    assert kv_cache_bytes(LLAMA_3_8B, 1, 1, BF16) == 131_072
    assert kv_cache_bytes(LLAMA_3_8B, 128, 16_384, BF16) == 128 * 16_384 * 131_072  # 256 GiB
    tiny = RunModelSpec.model_validate(TINY_ENTRY)
    assert kv_cache_bytes(tiny, 3, 10, 4) == 3 * 10 * 2 * 2 * 2 * 64 * 4


def _h200_plan() -> list[PointPlan]:
    """The points of scripts/device_bench.sh."""
    prefill = [
        PointPlan(Phase.PREFILL, batch_size=1, prompt_tokens=n)
        for n in (512, 1024, 2048, 4096, 8192, 16_384, 32_768)
    ]
    decode = [
        PointPlan(Phase.DECODE, batch_size=b, context_tokens=c)
        for c in (512, 4096, 16_384)
        for b in (1, 8, 32, 128)
    ]
    return prefill + decode


def test_only_batch_128_at_16k_is_predicted_not_to_fit_an_h200() -> None:
    free = H200_BYTES - weight_bytes(LLAMA_3_8B, BF16, max_positions=32_768) - 2 * GIB
    refused = []
    for plan in _h200_plan():
        try:
            check_fits(plan, point_bytes(LLAMA_3_8B, plan, BF16), free)
        except PredictedOutOfMemory as error:
            refused.append((plan, str(error)))
    assert [(plan.batch_size, plan.context_tokens) for plan, _ in refused] == [(128, 16_384)]
    message = refused[0][1]
    assert message.startswith("predicted before allocating: the KV cache of 128 x 16384 tokens")
    assert "takes 256.0 GiB" in message
    assert "GiB free beside the weights" in message


def test_prefill_activations_grow_with_the_prompt_and_stay_small_beside_the_weights() -> None:
    small = point_bytes(LLAMA_3_8B, PointPlan(Phase.PREFILL, 1, prompt_tokens=512), BF16)
    large = point_bytes(LLAMA_3_8B, PointPlan(Phase.PREFILL, 1, prompt_tokens=32_768), BF16)
    assert small.kv_cache == large.kv_cache == 0
    # Gated FFN at 32K tokens: (4 * 14336 + 3 * 4096) * 32768 * 2 bytes = 4.25 GiB at least.
    assert large.activations >= (4 * 14_336 + 3 * 4096) * 32_768 * BF16
    assert large.activations < 8 * GIB
    # The unfused kernel writes out 32 heads x 32K x 32K scores: 64 GiB more.
    math = point_bytes(
        LLAMA_3_8B,
        PointPlan(Phase.PREFILL, 1, prompt_tokens=32_768),
        BF16,
        materialised_scores=True,
    )
    assert math.activations - large.activations == 32 * 32_768 * 32_768 * BF16


def test_check_fits_lets_unknown_or_enough_memory_through() -> None:
    plan = PointPlan(Phase.PREFILL, 1, prompt_tokens=16)
    check_fits(plan, PointBytes(kv_cache=0, activations=10), None)
    check_fits(plan, PointBytes(kv_cache=0, activations=10), 10)
    with pytest.raises(PredictedOutOfMemory, match="1 x 16 prompt tokens need at least"):
        check_fits(plan, PointBytes(kv_cache=0, activations=11), 10)
