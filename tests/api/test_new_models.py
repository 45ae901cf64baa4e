"""The catalog's newer models answer estimates and simulations on GPUs where they fit, timed by
the GPU's profile (attention and projections measured; MoE experts by the fitted roofline)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

CASES = [
    # model, GPU, tp, KV bytes per token per GPU by hand: 2 (K and V) x layers x KV heads per
    # GPU x 128 x 2 bytes. bf16 weights 141 GB over 2 x 80 GB; 470 GB over 4 x 141 GB.
    ("llama-3.3-70b", "h100-sxm5-80gb", 2, 2 * 80 * 4 * 128 * 2),
    ("qwen3-235b-a22b", "h200-sxm-141gb", 4, 2 * 94 * 1 * 128 * 2),
    # The Blackwell parts, each timed by its own bundled profile.
    ("llama-3.3-70b", "b300-sxm-288gb", 1, 2 * 80 * 8 * 128 * 2),
    ("qwen3-235b-a22b", "gb200-186gb", 4, 2 * 94 * 1 * 128 * 2),
    ("llama-3.1-8b", "rtx-pro-6000-96gb", 1, 2 * 32 * 8 * 128 * 2),
]


def _simulates(
    client: TestClient,
    target: dict[str, object],
    requests: int,
    *,
    rate: float = 1.0,
    prompt: int = 1000,
    output: int = 100,
) -> None:
    """`requests` requests of `prompt` + `output` tokens at `rate` req/s all complete."""
    simulated = client.post(
        "/v1/simulations",
        json=target
        | {
            "workload": {
                "requests_per_s": rate,
                "num_requests": requests,
                "prompt_tokens": {"p50": prompt, "p90": prompt, "p99": prompt},
                "output_tokens": {"p50": output, "p90": output, "p99": output},
            }
        },
    )
    assert simulated.status_code == 200, simulated.text
    assert simulated.json()["completed_requests"] == requests


@pytest.mark.parametrize(("model", "gpu", "tp", "kv_bytes"), CASES)
def test_new_models_are_estimated_and_simulated(
    client: TestClient, model: str, gpu: str, tp: int, kv_bytes: int
) -> None:
    target = {"model": model, "gpu": gpu, "tp": tp}
    prefill = client.post("/v1/estimates/prefill", json=target | {"prompt_tokens": 2048})
    assert prefill.status_code == 200, prefill.text
    decode = client.post(
        "/v1/estimates/decode", json=target | {"batch_size": 32, "context_tokens": 2048}
    ).json()
    basis = decode["target"]["basis"]
    assert basis["decode_attention"] == f"profile {gpu} vllm@0.24.0"
    assert ("moe" in basis) == model.startswith("qwen3")
    assert 5 < decode["tpot_ms"] < 100
    ceiling = client.post(
        "/v1/estimates/batch-ceiling", json=target | {"context_tokens": 4096}
    ).json()
    assert ceiling["kv_bytes_per_token"] == kv_bytes
    assert ceiling["batch_ceiling"] >= 1
    _simulates(client, target, 50)


def test_qwen3_235b_counts_its_active_parameters(client: TestClient) -> None:
    """22.2 B active of 235.1 B: attention (6.70 B), 8 of 128 experts per layer (14.2 B), the
    router, embedding and head; the model card says 22 B activated."""
    entry = client.get("/v1/models/qwen3-235b-a22b").json()
    assert entry["params_total"] == pytest.approx(235_093_634_560, rel=1e-6)
    assert entry["params_active"] == pytest.approx(22.19e9, rel=0.005)


ARCHITECTURES = [
    # model, GPU, tp, weight format, KV bytes per token per GPU by hand.
    # MLA: 61 layers x (512 latent + 64 rope) x 2 bytes, the same on each of the 8 GPUs;
    # FP8 block-scaled weights 671 GB / 8 = 84 GB per H200, or 1.03 TB / 8 = 128 GB per B300.
    ("deepseek-r1", "h200-sxm-141gb", 8, "fp8-block", 61 * (512 + 64) * 2),
    ("deepseek-v3", "h200-sxm-141gb", 8, "fp8-block", 61 * (512 + 64) * 2),
    ("kimi-k2", "b300-sxm-288gb", 8, "fp8-block", 61 * (512 + 64) * 2),
    # gpt-oss as published (bf16 attention, MXFP4 experts, which Hopper multiplies in bf16):
    # 2 x layers x 8 KV heads of 64 x 2 bytes (windowed layers cost the same per token inside
    # the window).
    ("gpt-oss-120b", "h100-sxm5-80gb", 1, "bf16", 2 * 36 * 8 * 64 * 2),
    ("gpt-oss-20b", "b200-sxm-180gb", 1, "bf16", 2 * 24 * 8 * 64 * 2),
    # Llama 4: 2 x 48 layers x 8 / tp KV heads x 128 x 2 bytes.
    ("llama-4-scout", "h200-sxm-141gb", 2, "bf16", 2 * 48 * 4 * 128 * 2),
    ("llama-4-maverick", "h200-sxm-141gb", 8, "bf16", 2 * 48 * 1 * 128 * 2),
]


@pytest.mark.parametrize(("model", "gpu", "tp", "weights", "kv_bytes"), ARCHITECTURES)
def test_new_architectures_are_estimated_and_simulated(
    client: TestClient, model: str, gpu: str, tp: int, weights: str, kv_bytes: int
) -> None:
    target = {"model": model, "gpu": gpu, "tp": tp, "weight_dtype": weights}
    prefill = client.post("/v1/estimates/prefill", json=target | {"prompt_tokens": 2048})
    assert prefill.status_code == 200, prefill.text
    decode = client.post(
        "/v1/estimates/decode", json=target | {"batch_size": 32, "context_tokens": 2048}
    )
    assert decode.status_code == 200, decode.text
    assert 2 < decode.json()["tpot_ms"] < 200
    ceiling = client.post("/v1/estimates/batch-ceiling", json=target | {"context_tokens": 4096})
    assert ceiling.status_code == 200, ceiling.text
    assert ceiling.json()["kv_bytes_per_token"] == kv_bytes
    assert ceiling.json()["batch_ceiling"] >= 1
    _simulates(client, target, 40)


def test_layouts_are_estimated_and_echoed(client: TestClient) -> None:
    """DeepSeek-R1 FP8 on one H200 board as dp 8 x ep 8: 8 GPUs a replica, each caching only
    its own sequences' latents (the batch ceiling counts all 8 pools)."""
    target = {
        "model": "deepseek-r1",
        "gpu": "h200-sxm-141gb",
        "weight_dtype": "fp8-block",
        "dp": 8,
        "ep": 8,
    }
    decode = client.post(
        "/v1/estimates/decode", json=target | {"batch_size": 256, "context_tokens": 4000}
    )
    assert decode.status_code == 200, decode.text
    echo = decode.json()["target"]
    assert (echo["tp"], echo["dp"], echo["ep"], echo["gpus_per_replica"]) == (1, 8, 8, 8)
    _simulates(client, target, 40, rate=2.0, prompt=3200, output=200)


def test_a_layout_the_engines_do_not_run_is_a_422_naming_the_field(client: TestClient) -> None:
    response = client.post(
        "/v1/estimates/decode",
        json={
            "model": "llama-3.3-70b",
            "gpu": "h100-sxm5-80gb",
            "tp": 4,
            "dp": 2,
            "batch_size": 8,
            "context_tokens": 1000,
        },
    )
    assert response.status_code == 422
    problem = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    assert any(e["field"] == "dp" and "replicas" in e["message"] for e in problem["errors"])


def test_layout_feasibility_says_which_layouts_work_and_why(client: TestClient) -> None:
    """DeepSeek-R1 FP8 on H200 with layouts: nothing under 8 GPUs holds it; on 8, tp 8 and the
    dp x ep layouts work, and the data-parallel ones cache several times the sequences (each
    rank its own latents); the recommendation is the smallest layout that fits."""
    response = client.post(
        "/v1/estimates/tp-feasibility",
        json={
            "model": "deepseek-r1",
            "gpu": "h200-sxm-141gb",
            "weight_dtype": "fp8-block",
            "tp_candidates": [1, 2, 4, 8],
            "context_tokens": 4000,
            "batch_size": 64,
            "layouts": True,
        },
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    by_layout = {(c["tp"], c["dp"], c["ep"]): c for c in answer["candidates"]}
    assert not any(c["feasible"] for c in answer["candidates"] if c["gpus"] < 8)
    tp8, dp8 = by_layout[(8, 1, 1)], by_layout[(1, 8, 8)]
    assert tp8["feasible"] and dp8["feasible"]
    assert dp8["kv_bytes_per_token_per_gpu"] == tp8["kv_bytes_per_token_per_gpu"] == 70_272
    assert dp8["max_batch_by_memory"] > 5 * tp8["max_batch_by_memory"]
    assert any("latent" in reason for reason in tp8["reasons"])
    assert any("expert-parallel" in reason for reason in dp8["reasons"])
    assert "smallest" in answer["recommendation"]
