"""What a hostile or careless client can send: strict types, nesting, huge ids, entity-tags,
methods, long URLs; and names a person would type for a catalog entry."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import AUTH

PREFILL = {"model": "llama-3-8b", "gpu": "h100-sxm5-80gb", "prompt_tokens": 2048}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"causal": 0}, "causal"),
        ({"cached_prefix_tokens": True}, "cached_prefix_tokens"),
        ({"tp": "2"}, "tp"),
        ({"tp": 2.0}, "tp"),
        ({"prompt_tokens": "2048"}, "prompt_tokens"),
        ({"efficiency": {"gemm": 0.5, "overhead_ms": False}}, "efficiency.overhead_ms"),
    ],
)
def test_request_values_are_never_coerced(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/estimates/prefill", json=PREFILL | changes)
    assert response.status_code == 422, response.text
    assert field in [error["field"] for error in response.json()["errors"]]


def test_formats_and_other_enumerations_still_read_from_their_names(client: TestClient) -> None:
    response = client.post(
        "/v1/estimates/prefill", json=PREFILL | {"weight_dtype": "fp8", "kv_dtype": "fp8"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["target"]["weight_dtype"] == "fp8"


def test_deeply_nested_patch_is_a_422_not_a_500(client: TestClient) -> None:
    nested: dict[str, Any] = {"leaf": 1}
    for _ in range(600):
        nested = {"x": nested}
    response = client.patch("/v1/gpus/l4-24gb", json={"interconnect": nested}, headers=AUTH)
    assert response.status_code == 422, response.text
    assert "nests deeper than 32 levels" in response.text


def test_a_huge_id_is_refused_without_being_echoed(client: TestClient) -> None:
    response = client.post("/v1/estimates/prefill", json=PREFILL | {"model": "m" * 1_000_000})
    assert response.status_code == 422
    assert len(response.content) < 4_000
    assert response.json()["errors"][0]["field"] == "model"


def test_an_unknown_id_is_named_with_the_nearest_ones(client: TestClient) -> None:
    response = client.post("/v1/estimates/prefill", json=PREFILL | {"model": "llama-3-8B"})
    assert response.status_code == 422
    assert "did you mean 'llama-3-8b'" in response.json()["errors"][0]["message"]
    read = client.get("/v1/models/llama-3-8B")
    assert read.status_code == 404
    assert "did you mean 'llama-3-8b'" in read.json()["detail"]
    gpu = client.get("/v1/gpus/h100-sxm-80gb")
    assert gpu.status_code == 404
    assert "'h100-sxm5-80gb'" in gpu.json()["detail"]


def test_device_names_and_hugging_face_repositories_resolve(client: TestClient) -> None:
    by_id = client.post("/v1/estimates/prefill", json=PREFILL).json()
    repo = client.get("/v1/models/llama-3-8b").json()["hf_repo"]
    alias = client.get("/v1/gpus/h100-sxm5-80gb").json()["aliases"][0]
    response = client.post(
        "/v1/estimates/prefill", json=PREFILL | {"model": repo.upper(), "gpu": alias}
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["target"]["model"] == "llama-3-8b"
    assert answer["target"]["gpu"] == "h100-sxm5-80gb"
    assert answer["ttft_ms"] == pytest.approx(by_id["ttft_ms"], rel=1e-12)


def test_a_write_through_an_alias_drops_the_cached_entry_too(client: TestClient) -> None:
    """Timed by the roofline, which reads the datasheet figures the write changes (a measured
    profile times the real GPU, whatever its entry says)."""
    alias = client.get("/v1/gpus/h100-sxm5-80gb").json()["aliases"][0]
    roofline = PREFILL | {"gpu": alias, "engine": "roofline"}
    before = client.post("/v1/estimates/prefill", json=roofline).json()
    patched = client.patch(
        "/v1/gpus/h100-sxm5-80gb",
        json={"memory_bandwidth_bytes_per_s": 1.0e12, "peak_flops_per_s": {"bf16": 1.0e14}},
        headers=AUTH,
    )
    assert patched.status_code == 200, patched.text
    after = client.post("/v1/estimates/prefill", json=roofline).json()
    assert after["ttft_ms"] > 3 * before["ttft_ms"]


@pytest.mark.parametrize(
    ("if_match", "status"),
    [
        ('"abc"', 412),  # well-formed, names no version
        ('W/"1"', 412),  # weak: If-Match compares strongly
        ('"7", "1"', 200),  # a list naming the current version
        ('"7", "8"', 412),
        ("abc", 400),  # not an entity-tag
        ("null", 400),
        ('"1", abc', 400),
    ],
)
def test_if_match_follows_rfc_9110(client: TestClient, if_match: str, status: int) -> None:
    response = client.patch(
        "/v1/gpus/l4-24gb", json={"tdp_watts": 71}, headers={**AUTH, "If-Match": if_match}
    )
    assert response.status_code == status, response.text


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/v1/gpus", "GET, POST"),
        ("DELETE", "/v1/models", "GET, POST"),
        ("POST", "/v1/gpus/l4-24gb", "DELETE, GET, PATCH, PUT"),
        ("GET", "/v1/estimates/prefill", "POST"),
        # A route of its own beside /v1/models/{id}: only what it serves (it was every
        # method of the entry route, which serves no entry there).
        ("OPTIONS", "/v1/models/hf-import", "POST"),
    ],
)
def test_a_405_lists_every_method_of_the_path(
    client: TestClient, method: str, path: str, allow: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    assert response.headers["content-type"] == "application/problem+json"


def test_an_id_that_names_a_route_is_reserved(client: TestClient) -> None:
    """No model can be created as `hf-import`: it would be unreachable at its own path."""
    from tests.api.catalog_helpers import new_model  # noqa: PLC0415

    response = client.post("/v1/models", json=new_model() | {"id": "hf-import"}, headers=AUTH)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "id"
    assert "reserved" in response.json()["errors"][0]["message"]


def test_a_long_request_target_is_a_414_problem(client: TestClient) -> None:
    response = client.get("/v1/gpus", params={"vendor": "a" * 20_000})
    assert response.status_code == 414
    assert response.headers["content-type"] == "application/problem+json"


def test_refused_requests_count_on_their_route(fresh_client: TestClient) -> None:
    client = fresh_client
    refused = client.post(
        "/v1/gpus", content=b"name=x", headers={**AUTH, "content-type": "text/plain"}
    )
    assert refused.status_code == 415
    metrics = client.get("/metrics").text
    assert 'ridgeline_http_requests_total{method="POST",route="/v1/gpus",status="415"} 1.0' in (
        metrics
    )
    assert "process_cpu_seconds_total" in metrics
    assert 'ridgeline_http_request_duration_seconds_bucket{le="120.0"' in metrics
