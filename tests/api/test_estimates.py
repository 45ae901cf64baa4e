"""Estimate endpoints: hand-worked cases, TP feasibility, chunk size, charts, errors, and that a
catalog write reaches the next estimate."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.settings import Settings
from tests.api.catalog_helpers import snapshot
from tests.conftest import AUTH

BASE = {"model": "llama-3-8b", "gpu": "h100-sxm5-80gb"}


def _post(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_decode_worked_by_hand_under_ideal_efficiency(client: TestClient) -> None:
    """Llama-3-8B on H100, batch 8 at 4,096 tokens, ideal: the step reads the bf16 weights
    (8,030,261,248 x 2 B) and 8 sequences' KV cache (8 x 4,096 x 131,072 B) at 3.35 TB/s;
    its FLOPs are far below the compute roof, so TPOT = bytes / bandwidth, to 1 %."""
    answer = _post(
        client,
        "/v1/estimates/decode",
        {**BASE, "efficiency": "ideal", "batch_size": 8, "context_tokens": 4096},
    )
    # Every weight but the embedding table (a look-up reads 8 rows of it, not the table).
    weights = (8_030_261_248 - 128_256 * 4096) * 2
    kv = 8 * 4096 * 131_072
    assert answer["bytes"]["weights"] == pytest.approx(weights, rel=0.001)
    assert answer["bytes"]["kv_cache"] == pytest.approx(kv, rel=0.01)
    assert answer["tpot_ms"] == pytest.approx((weights + kv) / 3.35e12 * 1e3, rel=0.01)
    assert answer["tokens_per_s"] == pytest.approx(8 / answer["tpot_ms"] * 1e3)
    assert answer["bound"] == "memory"
    assert answer["target"]["efficiency"] == {
        "mode": "ideal",
        "gemm": 1.0,
        "attention": 1.0,
        "memory": 1.0,
        "communication": 1.0,
        "overhead_ms": 0.0,
        "source": answer["target"]["efficiency"]["source"],
        "calibration_id": None,
    }


def test_prefill_flops_per_token_from_parameters(client: TestClient) -> None:
    """Linear FLOPs of a prompt = 2 x (non-embedding matmul parameters but the LM head) x n;
    Llama-3-8B: 32 layers of 218,112,000 parameters (incl. 8,192 norm weights, which do no
    matmul): 2 x 32 x 218,103,808 x n."""
    answer = _post(client, "/v1/estimates/prefill", {**BASE, "prompt_tokens": 1000})
    assert answer["flops"]["linear"] == pytest.approx(2 * 32 * 218_103_808 * 1000, rel=1e-9)
    assert answer["flops"]["lm_head"] == pytest.approx(2 * 4096 * 128_256, rel=1e-9)
    # Causal attention: 4 * H * h * n(n+1)/2 per layer.
    assert answer["flops"]["attention"] == pytest.approx(
        32 * 4 * 32 * 128 * 1000 * 1001 / 2, rel=1e-9
    )


def test_request_is_ttft_plus_decode(client: TestClient) -> None:
    answer = _post(
        client, "/v1/estimates/request", {**BASE, "prompt_tokens": 2048, "output_tokens": 256}
    )
    assert answer["e2e_ms"] == pytest.approx(answer["ttft_ms"] + 255 * answer["tpot_ms"])
    prefill = _post(client, "/v1/estimates/prefill", {**BASE, "prompt_tokens": 2048})
    assert answer["ttft_ms"] == pytest.approx(prefill["ttft_ms"])
    first = _post(client, "/v1/estimates/decode", {**BASE, "batch_size": 1, "context_tokens": 2049})
    last = _post(client, "/v1/estimates/decode", {**BASE, "batch_size": 1, "context_tokens": 2303})
    assert first["tpot_ms"] <= answer["tpot_ms"] <= last["tpot_ms"]


def test_batch_ceiling_worked_by_hand(client: TestClient) -> None:
    """Llama-3-8B on H100 at 8,192 tokens per sequence: 131,072 B per token, 1,073,741,824 B per
    sequence (512 whole 16-token blocks); the pool is 0.9 x memory - weights - reserve."""
    answer = _post(client, "/v1/estimates/batch-ceiling", {**BASE, "context_tokens": 8192})
    memory = answer["memory"]
    assert memory["usable_bytes"] == pytest.approx(0.9 * memory["memory_bytes"])
    pool = memory["usable_bytes"] - memory["weights_bytes"] - memory["activation_reserve_bytes"]
    assert memory["kv_pool_bytes"] == pytest.approx(pool)
    assert answer["kv_bytes_per_sequence"] == 8192 * 131_072
    assert answer["max_batch_by_memory"] == math.floor(pool / (8192 * 131_072))
    # 8K contexts read more KV than any batch can amortise: memory-bound at any batch.
    assert answer["ridge_batch"] is None and answer["ridge_batch_reason"]
    assert answer["limited_by"] == "memory"
    assert answer["batch_ceiling"] == answer["max_batch_by_memory"]


def test_batch_ceiling_rounds_to_whole_blocks(client: TestClient) -> None:
    answer = _post(
        client,
        "/v1/estimates/batch-ceiling",
        {**BASE, "context_tokens": 1000, "block_tokens": 64},
    )
    assert answer["kv_bytes_per_sequence"] == 1024 * 131_072  # 16 blocks of 64


def test_tp_feasibility_llama_3_70b_on_h100(client: TestClient) -> None:
    """tp 1 does not fit (141 GB of bf16 weights), tp 2 is tight, tp 16 replicates the 8 KV
    heads twice."""
    answer = _post(
        client,
        "/v1/estimates/tp-feasibility",
        {"model": "llama-3-70b", "gpu": "h100-sxm5-80gb", "context_tokens": 4096},
    )
    by_tp = {c["tp"]: c for c in answer["candidates"]}
    # 64 query and 8 KV heads split; memory is the problem, so it is not deployable.
    assert by_tp[1]["splits_evenly"] is True
    assert by_tp[1]["feasible"] is False
    assert by_tp[1]["fits_memory"] is False
    assert any("fit" in reason for reason in by_tp[1]["reasons"])
    assert by_tp[2]["fits_memory"] is True
    assert by_tp[2]["kv_pool_bytes_per_gpu"] < 0.25 * by_tp[4]["kv_pool_bytes_per_gpu"]
    assert by_tp[16]["kv_head_replication"] == 2
    assert any("replicated 2 times" in reason for reason in by_tp[16]["reasons"])
    assert by_tp[8]["kv_head_replication"] == 1
    assert answer["recommended_tp"] == 2
    assert by_tp[2]["weights_bytes_per_gpu"] == pytest.approx(
        by_tp[4]["weights_bytes_per_gpu"] * 2, rel=0.01
    )


def test_tp_alternatives_when_kv_heads_run_out(client: TestClient) -> None:
    """Llama-3.1-405B (8 KV heads, 810 GB of bf16 weights) needs more than 8 L4s' worth of
    memory per KV head: alternatives to tensor parallelism come back with reasons."""
    answer = _post(
        client,
        "/v1/estimates/tp-feasibility",
        {"model": "llama-3.1-405b", "gpu": "l4-24gb", "tp_candidates": [8, 16, 32]},
    )
    assert answer["recommended_tp"] is None or answer["recommended_tp"] > 8
    kinds = {alternative["kind"] for alternative in answer["alternatives"]}
    assert "pipeline_parallel" in kinds
    assert all(alternative["why"] for alternative in answer["alternatives"])


def test_chunk_size_agrees_with_seed_first_cut_when_ideal(client: TestClient) -> None:
    """No decodes, ideal, a short long-prompt: T_max x peak / FLOPs per token, within 3 %
    (Llama-3-70B on H100 at 100 ms: 0.1 x 989.4e12 / (1,711,276,032 x 80) = 722.7). Under tp 2
    article A's cut doubles (each GPU does half the FLOPs) but ours is lower: the all-reduces
    article A's formula ignores take their share of the step."""
    body = {
        "model": "llama-3-70b",
        "gpu": "h100-sxm5-80gb",
        "efficiency": "ideal",
        "itl_slo_ms": 100,
        "long_prompt_tokens": 1024,
    }
    one = _post(client, "/v1/recommendations/chunk-size", body)
    seed = 0.1 * 989.4e12 / (1_711_276_032 * 80)
    assert one["seed_first_cut_tokens"] == math.floor(seed)
    assert one["max_chunk_tokens"] == pytest.approx(seed, rel=0.03)
    two = _post(client, "/v1/recommendations/chunk-size", {**body, "tp": 2})
    assert two["seed_first_cut_tokens"] == math.floor(2 * seed)
    assert one["max_chunk_tokens"] < two["max_chunk_tokens"] < 2 * seed


def test_chunk_size_with_running_decodes(client: TestClient) -> None:
    answer = _post(
        client,
        "/v1/recommendations/chunk-size",
        {
            **BASE,
            "itl_slo_ms": 50,
            "short_ttft_slo_ms": 1000,
            "decode_batch_size": 64,
            "decode_context_tokens": 2048,
        },
    )
    assert answer["recommended_chunk_tokens"] % 64 == 0
    assert 0 < answer["recommended_chunk_tokens"] <= answer["max_chunk_tokens"]
    assert answer["step_ms"] <= 50
    long = answer["long_prompt"]
    assert long["prompt_tokens"] == 8192  # Llama-3-8B's context caps the 32K default
    assert long["steps"] == math.ceil(8192 / answer["recommended_chunk_tokens"])
    assert long["ttft_ms_chunked"] > long["ttft_ms_unchunked"]
    assert answer["length_buckets"] and answer["rationale"]


def test_prefill_curve_of_1000_points(client: TestClient) -> None:
    lengths = list(range(100, 100_100, 100))
    answer = _post(
        client,
        "/v1/estimates/prefill-curve",
        {"model": "llama-3.1-8b", "gpu": "h200-sxm-141gb", "prompt_tokens": lengths},
    )
    points = answer["points"]
    assert [p["prompt_tokens"] for p in points] == lengths
    assert all(b["ttft_ms"] > a["ttft_ms"] for a, b in itertools.pairwise(points))
    slope = points[-1]["loglog_slope"]
    assert 1.0 < slope < 2.0  # between linear and quadratic at 100K tokens
    too_many = client.post(
        "/v1/estimates/prefill-curve",
        json={**BASE, "prompt_tokens": [512] * 1001},
    )
    assert too_many.status_code == 422


@pytest.mark.slow
def test_charts_are_svg(client: TestClient) -> None:
    roof = client.post(
        "/v1/roofline",
        json={"gpu": "h100-sxm5-80gb", "model": "llama-3-8b"},
        headers={"Accept": "image/svg+xml"},
    )
    assert roof.status_code == 200
    assert roof.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in roof.text and "ridge" in roof.text and "arithmetic intensity" in roof.text
    curve = client.post(
        "/v1/estimates/prefill-curve",
        json={**BASE, "prompt_tokens": [256, 1024, 4096, 8192]},
        headers={"Accept": "image/svg+xml, application/json;q=0.5"},
    )
    assert curve.headers["content-type"].startswith("image/svg+xml")
    assert "crossover" in curve.text and "prompt tokens" in curve.text
    json_preferred = client.post(
        "/v1/roofline",
        json={"gpu": "h100-sxm5-80gb"},
        headers={"Accept": "application/json, image/svg+xml;q=0.1"},
    )
    assert json_preferred.headers["content-type"] == "application/json"


def test_warnings_for_allowed_but_unwise_input(client: TestClient) -> None:
    answer = _post(
        client, "/v1/estimates/decode", {**BASE, "tp": 16, "batch_size": 1, "context_tokens": 512}
    )
    assert any("replicat" in warning for warning in answer["warnings"])


def test_a_catalog_write_reaches_the_next_estimate(client: TestClient) -> None:
    body = {**BASE, "efficiency": "ideal", "batch_size": 1, "context_tokens": 16}
    before = _post(client, "/v1/estimates/decode", body)
    patched = client.patch(
        "/v1/gpus/h100-sxm5-80gb", json={"memory_bandwidth_bytes_per_s": 6.7e12}, headers=AUTH
    )
    assert patched.status_code == 200
    after = _post(client, "/v1/estimates/decode", body)
    assert after["tpot_ms"] == pytest.approx(before["tpot_ms"] / 2, rel=0.01)
    assert (
        after["target"]["catalog_versions"]["gpu"]
        == before["target"]["catalog_versions"]["gpu"] + 1
    )


def test_calibrated_is_never_faster_than_ideal(client: TestClient) -> None:
    for path, extra in (
        ("/v1/estimates/prefill", {"prompt_tokens": 4096}),
        ("/v1/estimates/decode", {"batch_size": 16, "context_tokens": 4096}),
    ):
        ideal = _post(client, path, {**BASE, **extra, "efficiency": "ideal"})
        calibrated = _post(client, path, {**BASE, **extra})
        key = "ttft_ms" if "ttft_ms" in ideal else "tpot_ms"
        assert calibrated[key] > ideal[key]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/estimates/prefill", {**BASE, "prompt_tokens": 4096, "tp": 3}, "tp"),
        ("/v1/estimates/prefill", {**BASE, "prompt_tokens": 9000}, "prompt_tokens"),
        ("/v1/estimates/prefill", {**BASE, "prompt_tokens": 0}, "prompt_tokens"),
        ("/v1/estimates/prefill", {**BASE, "prompt_tokens": -5}, "prompt_tokens"),
        (
            "/v1/estimates/prefill",
            {
                "model": "llama-3-8b",
                "gpu": "a100-sxm4-80gb",
                "prompt_tokens": 8,
                "weight_dtype": "fp8",
            },
            "weight_dtype",
        ),
        ("/v1/estimates/decode", {**BASE, "batch_size": 0, "context_tokens": 8}, "batch_size"),
        ("/v1/estimates/decode", {**BASE, "batch_size": 1}, "context_tokens"),
        ("/v1/estimates/decode", {**BASE, "batch_size": 1, "context_tokens": 8, "tp": 0}, "tp"),
        (
            "/v1/estimates/decode",
            {
                "model": "no-such-model",
                "gpu": "h100-sxm5-80gb",
                "batch_size": 1,
                "context_tokens": 8,
            },
            "model",
        ),
        (
            "/v1/estimates/decode",
            {"model": "llama-3-8b", "gpu": "no-such-gpu", "batch_size": 1, "context_tokens": 8},
            "gpu",
        ),
        (
            "/v1/estimates/decode",
            {
                "model": {
                    "num_layers": 2,
                    "hidden_size": 64,
                    "num_attention_heads": 4,
                    "num_kv_heads": 3,
                    "head_dim": 16,
                    "intermediate_size": 128,
                    "ffn_type": "gated",
                    "vocab_size": 100,
                    "max_context_tokens": 64,
                },
                "gpu": "h100-sxm5-80gb",
                "batch_size": 1,
                "context_tokens": 8,
            },
            "model.num_kv_heads",
        ),
        (
            "/v1/estimates/decode",
            {**BASE, "batch_size": 1, "context_tokens": 8, "speed": 1},
            "speed",
        ),
        (
            "/v1/estimates/decode",
            {**BASE, "batch_size": 1, "context_tokens": 8, "kv_dtype": "fp7"},
            "kv_dtype",
        ),
        (
            "/v1/estimates/prefill",
            {**BASE, "prompt_tokens": 100, "efficiency": {"gemm": 2, "attention": 1, "memory": 1}},
            "efficiency.gemm",
        ),
        (
            "/v1/estimates/prefill",
            {**BASE, "prompt_tokens": 100, "cached_prefix_tokens": 100},
            "cached_prefix_tokens",
        ),
        (
            "/v1/estimates/batch-ceiling",
            {**BASE, "context_tokens": 100, "gpu_memory_utilization": 1.5},
            "gpu_memory_utilization",
        ),
        ("/v1/estimates/tp-feasibility", {**BASE, "tp_candidates": []}, "tp_candidates"),
        ("/v1/recommendations/chunk-size", {**BASE, "itl_slo_ms": 0}, "itl_slo_ms"),
        (
            "/v1/recommendations/chunk-size",
            {**BASE, "itl_slo_ms": 50, "decode_batch_size": 4},
            "decode_context_tokens",
        ),
        ("/v1/roofline", {"gpu": "h100-sxm5-80gb", "weight_dtype": "int3"}, "weight_dtype"),
    ],
)
def test_impossible_input_names_the_field(
    client: TestClient, settings: Settings, path: str, body: dict[str, Any], field: str
) -> None:
    before = snapshot(settings.database_url)
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    fields = [error["field"] for error in response.json()["errors"]]
    assert any(f == field or f.startswith(field) for f in fields), fields
    assert snapshot(settings.database_url) == before


def test_repeated_questions_are_answered_from_the_memo(client: TestClient) -> None:
    memo = client.app.state.response_memo  # type: ignore[attr-defined]
    _post(client, "/v1/estimates/prefill", {**BASE, "prompt_tokens": 10})  # fills the spec cache
    body = {**BASE, "prompt_tokens": 3000}
    first = client.post("/v1/estimates/prefill", json=body)
    hits = memo.hits
    # The same question, with a default spelled out: the same validated body, the same answer.
    again = client.post("/v1/estimates/prefill", json={**body, "batch_size": 1})
    assert memo.hits == hits + 1
    assert again.content == first.content
    other = client.post("/v1/estimates/prefill", json={**body, "prompt_tokens": 3001})
    assert memo.hits == hits + 1 and other.json()["ttft_ms"] > first.json()["ttft_ms"]


def test_memo_never_outlives_the_catalog_entry(client: TestClient) -> None:
    body = {**BASE, "batch_size": 4, "context_tokens": 512}
    before = _post(client, "/v1/estimates/decode", body)
    cache = client.app.state.spec_cache  # type: ignore[attr-defined]
    cache.invalidate("gpu", "h100-sxm5-80gb")  # as a write, a run upload or expiry does
    memo = client.app.state.response_memo  # type: ignore[attr-defined]
    hits = memo.hits
    after = _post(client, "/v1/estimates/decode", body)
    assert memo.hits == hits  # recomputed from the refilled entry
    assert after["tpot_ms"] == before["tpot_ms"]


def test_union_errors_name_the_body_field_only(client: TestClient) -> None:
    """An inline spec sent as `model` is refused at `model.<field>`: not at the name of the union
    member pydantic tried (`model.ModelArchitecture.num_layers`), and not also as "not a string"."""
    inline = {
        "num_layers": 0,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_kv_heads": 4,
        "head_dim": 16,
        "intermediate_size": 128,
        "ffn_type": "gated",
        "vocab_size": 100,
    }
    response = client.post(
        "/v1/estimates/prefill", json={**BASE, "model": inline, "prompt_tokens": 8}
    )
    assert response.status_code == 422
    fields = sorted(error["field"] for error in response.json()["errors"])
    assert fields == ["model.max_context_tokens", "model.num_layers"]
    neither = client.post("/v1/estimates/prefill", json={**BASE, "model": 7, "prompt_tokens": 8})
    assert {error["field"] for error in neither.json()["errors"]} == {"model"}


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b'"ttft_slo_ms": Infinity', "ttft_slo_ms"),
        (b'"tpot_slo_ms": NaN', "tpot_slo_ms"),
        (b'"ttft_slo_ms": 1e999', "ttft_slo_ms"),
        (b'"efficiency": {"gemm": 1e-300, "attention": 1, "memory": 1}', "efficiency.gemm"),
    ],
)
def test_non_finite_and_vanishing_figures_are_422(
    client: TestClient, content: bytes, field: str
) -> None:
    body = b'{"model": "llama-3-8b", "gpu": "h100-sxm5-80gb", ' + content + b"}"
    response = client.post(
        "/v1/estimates/tp-feasibility",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert [error["field"] for error in response.json()["errors"]] == [field]


def test_an_inline_gpu_too_slow_to_time_is_422_not_a_null_ttft(client: TestClient) -> None:
    """1e-300 B/s used to pass `gt=0`, overflow the time to infinity and serialise `ttft_ms` as
    null, a field the contract says is a number."""
    gpu = {
        "memory_bytes": 80 * 2**30,
        "memory_bandwidth_bytes_per_s": 1e-300,
        "peak_flops_per_s": {"bf16": 1e15},
        "interconnect": {"kind": "nvlink4", "bandwidth_bytes_per_s": 9e11},
    }
    response = client.post(
        "/v1/estimates/prefill", json={**BASE, "gpu": gpu, "prompt_tokens": 4096}
    )
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["gpu.memory_bandwidth_bytes_per_s"]


def test_tp_feasibility_ignores_tp(client: TestClient) -> None:
    """`tp` is documented as ignored here: 3 does not divide Llama-3-8B's 32 heads, and the
    request still assesses its candidates."""
    answer = _post(
        client, "/v1/estimates/tp-feasibility", {**BASE, "tp": 3, "tp_candidates": [1, 2]}
    )
    assert [c["tp"] for c in answer["candidates"]] == [1, 2]
