"""A plan that searches layouts: DeepSeek-R1 FP8 at 3,200 input / 800 output tokens on H200s,
checked against an independent hand calculation of the layouts' memory and KV cache."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import AUTH

CONSTANT_3200 = {"p50": 3200, "p90": 3200, "p99": 3200}
CONSTANT_800 = {"p50": 800, "p90": 800, "p99": 800}
PLAN: dict[str, Any] = {
    "model": "deepseek-r1",
    "traffic": {"requests_per_s": 2, "prompt_tokens": CONSTANT_3200, "output_tokens": CONSTANT_800},
    "slo": {"ttft_p99_ms": 5000, "tpot_p99_ms": 100},
    "gpus": ["h200-sxm-141gb"],
    "tp_candidates": [1, 2, 4, 8],
    "weight_dtypes": ["fp8-block"],
    "max_num_seqs": [256],
    "chunk_tokens": [2048],
    "probe_requests": 500,
}

# DeepSeek-R1 by hand (tests/fixtures/hf_configs/deepseek-r1.json), in parameters.
ATTENTION = 61 * (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168)
REPLICATED = 61 * 7168 * (1536 + 576)  # q_a and kv_a: whole on every GPU of a TP group
DENSE = 3 * 3 * 7168 * 18432
EXPERTS = 58 * 257 * 3 * 7168 * 2048
ROUTER = 58 * 7168 * 256
NORMS = 61 * (2 * 7168 + 1536 + 512) + 7168
EMBEDDINGS = 2 * 129280 * 7168
FP8_BLOCK = 1 + 4 / (128 * 128)  # a byte per weight and an fp32 scale per 128 x 128 block
LATENT = 61 * (512 + 64) * 2  # bytes of KV per token, bf16
USABLE = 0.9 * 150_754_820_096  # gpu_memory_utilization 0.9 of the H200's 141 GB
LOGITS = 2 * 256 * 129280 * 4  # fp32 logits and probabilities of 256 sequences


def _kv_tokens(weights: float, attention_width: int, ranks: int) -> int:
    """Whole 16-token blocks of latent in each rank's pool, times the ranks: the pool is what
    the weights and a 2,048-token step's activations (hidden and residual, and the widest of
    attention or the FFN) leave."""
    reserve = 2048 * (2 * 7168 + attention_width) * 2 + LOGITS
    per_rank = math.floor((USABLE - weights - reserve) / LATENT) // 16 * 16
    return per_rank * ranks


def test_deepseek_r1_plan_on_h200_picks_attention_data_parallelism(client: TestClient) -> None:
    response = client.post("/v1/plans", json=PLAN, headers=AUTH, params={"detail": "full"})
    assert response.status_code == 201, response.text
    plan = response.json()
    best = plan["plans"][0]
    candidates = plan["plans"] + plan["pruned"]
    by_layout = {(c["tp"], c["dp"], c["ep"]): c for c in candidates}

    # One board of 8: data-parallel attention, each GPU caching only its own sequences.
    assert (best["gpus_per_replica"], best["tp"] * best["dp"]) == (8, 8)
    assert best["dp"] > 1
    assert any("latents" in reason for reason in best["reasons"])
    assert best["feasible"]

    # dp 8: all of attention and the dense FFNs on every GPU, an eighth of the experts.
    dp8 = (ATTENTION + DENSE + EXPERTS / 8) * FP8_BLOCK + 2 * (ROUTER + NORMS + EMBEDDINGS)
    assert dp8 / 1e9 == pytest.approx(98.61, abs=0.01)
    # Prefill of a 2,048-token step holds 128 heads' q, k, v and o of 192: (2 x 128 + 2 x 128)
    # x 192 wide, more than the FFN's 3 x (8 x 2048 + 2048).
    dp8_tokens = _kv_tokens(dp8, (2 * 128 + 2 * 128) * 192, ranks=8)
    assert by_layout[(1, 8, 1)]["kv_capacity_tokens"] == dp8_tokens == 4_137_984
    assert by_layout[(1, 8, 8)]["kv_capacity_tokens"] == dp8_tokens

    # tp 8: an eighth of everything but q_a and kv_a, and one pool of the latent, which every
    # GPU caches whole for every sequence.
    tp8 = ((ATTENTION - REPLICATED) / 8 + REPLICATED + DENSE / 8 + EXPERTS / 8) * FP8_BLOCK + 2 * (
        ROUTER / 8 + NORMS + EMBEDDINGS / 8
    )
    tp8_tokens = _kv_tokens(tp8, (2 * 16 + 2 * 16) * 192, ranks=1)
    assert by_layout[(8, 1, 1)]["kv_capacity_tokens"] == tp8_tokens == 716_512
    assert dp8_tokens > 5 * tp8_tokens

    # Fewer than 8 GPUs cannot hold 671 B parameters.
    assert not any(c["gpus_per_replica"] < 8 and c["feasible"] for c in candidates)


def test_a_model_larger_than_a_node_is_planned_over_pipeline_stages(client: TestClient) -> None:
    """Llama-3.1-405B in bf16 (811 GB) does not fit one board of 8 H100s (8 x 72 GB usable):
    the plan takes two stages of tp 8, 16 GPUs a replica, each stage holding 63 of the 126
    layers, and says so."""
    body = PLAN | {
        "model": "llama-3.1-405b",
        "gpus": ["h100-sxm5-80gb"],
        "weight_dtypes": ["bf16"],
        "traffic": {
            "requests_per_s": 0.5,
            "prompt_tokens": {"p50": 1000, "p90": 1000, "p99": 1000},
            "output_tokens": {"p50": 200, "p90": 200, "p99": 200},
        },
        "slo": {"ttft_p99_ms": 10000, "tpot_p99_ms": 200},
    }
    response = client.post("/v1/plans", json=body, headers=AUTH)
    assert response.status_code == 201, response.text
    best = response.json()["plans"][0]
    assert (best["tp"], best["pp"], best["gpus_per_replica"]) == (8, 2, 16)
    assert any("pipeline: 2 stages" in reason for reason in best["reasons"])
    assert best["gpus_total"] == best["replicas"] * 16


@pytest.mark.parametrize(
    ("model", "gpu", "weights"),
    [
        ("kimi-k2", "b200-sxm-180gb", "fp8-block"),
        ("gpt-oss-120b", "h100-sxm5-80gb", "bf16"),
        ("gpt-oss-20b", "mi355x-288gb", "bf16"),
        ("llama-4-scout", "h200-sxm-141gb", "bf16"),
        ("llama-4-maverick", "gb300-288gb", "bf16"),
    ],
)
def test_every_new_architecture_is_planned(
    client: TestClient, model: str, gpu: str, weights: str
) -> None:
    body = PLAN | {
        "model": model,
        "gpus": [gpu],
        "weight_dtypes": [weights],
        "traffic": {
            "requests_per_s": 1,
            "prompt_tokens": {"p50": 2000, "p90": 2000, "p99": 2000},
            "output_tokens": {"p50": 200, "p90": 200, "p99": 200},
        },
        "slo": {"ttft_p99_ms": 5000, "tpot_p99_ms": 100},
        # GB300 and MI355X have no published hourly price: a plan asks for one.
        "price_overrides": {gpu: 5.0},
    }
    response = client.post("/v1/plans", json=body, headers=AUTH)
    assert response.status_code == 201, response.text
    best = response.json()["plans"][0]
    assert best["feasible"]
    assert best["gpus_total"] == best["replicas"] * best["gpus_per_replica"]
