"""Block-scaled weight formats: bytes including their scales, the format each GPU computes
them in, and what a GPU cannot run at all."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.engine.dtypes import BYTES_PER_ELEMENT, DType, compute_dtype_for
from app.engine.specs import Deployment, SpecError

HOPPER = {DType.BF16, DType.FP16, DType.FP8, DType.INT8}
BLACKWELL = HOPPER | {DType.FP4}


def test_bytes_per_element_count_the_scales() -> None:
    # fp8 + one fp32 per 128 x 128; fp4 + one e4m3 byte per 16; fp4 + one e8m0 byte per 32
    assert BYTES_PER_ELEMENT[DType.FP8_BLOCK] == pytest.approx(1 + 4 / 16384, rel=1e-15)
    assert BYTES_PER_ELEMENT[DType.NVFP4] == 0.5625
    assert BYTES_PER_ELEMENT[DType.MXFP4] == 0.53125


@pytest.mark.parametrize(
    ("weights", "peaks", "computes"),
    [
        (DType.FP8_BLOCK, HOPPER, DType.FP8),
        (DType.NVFP4, BLACKWELL, DType.FP4),
        (DType.NVFP4, HOPPER, DType.FP4),  # which a Hopper GPU lacks: refused, below
        (DType.MXFP4, BLACKWELL, DType.FP4),
        (DType.MXFP4, HOPPER, DType.BF16),  # weight-only, as Hopper serves gpt-oss
        (DType.INT4, BLACKWELL, DType.BF16),
    ],
)
def test_each_gpu_computes_a_format_at_its_own_rate(
    weights: DType, peaks: set[DType], computes: DType
) -> None:
    assert compute_dtype_for(weights, peaks) is computes


def test_block_scaled_formats_are_not_kv_cache_formats() -> None:
    with pytest.raises(SpecError) as caught:
        Deployment(kv_dtype=DType.NVFP4)
    assert caught.value.field == "kv_dtype"


def _decode(client: TestClient, gpu: str, weights: str, kv: str = "bf16") -> dict[str, object]:
    body = {
        "model": "llama-3-8b",
        "gpu": gpu,
        "weight_dtype": weights,
        "kv_dtype": kv,
        "batch_size": 8,
        "context_tokens": 1024,
    }
    response = client.post("/v1/estimates/decode", json=body)
    answer: dict[str, object] = response.json() | {"status": response.status_code}
    return answer


def test_formats_over_http(client: TestClient) -> None:
    refused = _decode(client, "h100-sxm5-80gb", "nvfp4")
    assert refused["status"] == 422
    assert refused["errors"][0]["field"] == "weight_dtype"  # type: ignore[index]
    assert "no fp4 compute" in refused["errors"][0]["message"]  # type: ignore[index]
    kv = _decode(client, "h100-sxm5-80gb", "bf16", kv="mxfp4")
    assert kv["status"] == 422 and kv["errors"][0]["field"] == "kv_dtype"  # type: ignore[index]
    # Measured block-scaled GEMMs where the profile has them; the roofline where it has not.
    basis = {
        (gpu, weights): _decode(client, gpu, weights)["target"]["basis"]["gemm"]  # type: ignore[index]
        for gpu, weights in (
            ("h100-sxm5-80gb", "fp8-block"),
            ("b200-sxm-180gb", "nvfp4"),
            ("h100-sxm5-80gb", "mxfp4"),
        )
    }
    assert basis[("h100-sxm5-80gb", "fp8-block")] == "profile h100-sxm5-80gb vllm@0.24.0"
    assert basis[("b200-sxm-180gb", "nvfp4")] == "profile b200-sxm-180gb vllm@0.24.0"
    assert basis[("h100-sxm5-80gb", "mxfp4")].startswith("roofline fitted")
    memory = client.post(
        "/v1/estimates/batch-ceiling",
        json={
            "model": "llama-3-8b",
            "gpu": "h100-sxm5-80gb",
            "weight_dtype": "mxfp4",
            "context_tokens": 1024,
        },
    ).json()["memory"]
    # The linear layers' 6,979,321,856 parameters at 0.53125 bytes; the embedding, the LM head
    # (525,336,576 each) and the norms (266,240) stay in bf16.
    kept = 2 * 525_336_576 + 266_240
    expected = (8_030_261_248 - kept) * 0.53125 + kept * 2
    assert memory["weights_bytes"] == pytest.approx(expected, rel=1e-6)
