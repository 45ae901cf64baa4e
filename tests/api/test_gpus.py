"""The GPU catalog over HTTP: reads, writes, ETags, filters."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.catalog_helpers import new_gpu
from tests.conftest import AUTH


def test_bundled_catalog_is_served_with_required_ids(client: TestClient) -> None:
    response = client.get("/v1/gpus", params={"limit": 500})
    assert response.status_code == 200
    body = response.json()
    ids = {item["id"] for item in body["items"]}
    required = {
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "h100-pcie-80gb",
        "h200-sxm-141gb",
        "b200-sxm-180gb",
        "l40s-48gb",
        "mi300x-192gb",
    }
    assert required <= ids
    assert body["total"] == len(ids) >= 12


def test_get_returns_entry_with_etag_and_sources(client: TestClient) -> None:
    response = client.get("/v1/gpus/h100-sxm5-80gb")
    assert response.status_code == 200
    assert response.headers["etag"] == '"1"'
    gpu = response.json()
    # Dense BF16, not article A's 495 TFLOPS (which is dense TF32): docs/model.md, errata.
    assert gpu["peak_flops_per_s"]["bf16"] == pytest.approx(989.4e12, rel=0.01)
    assert gpu["memory_bandwidth_bytes_per_s"] == pytest.approx(3.35e12, rel=0.01)
    assert gpu["origin"] == "bundled"
    assert gpu["sources"] and all(s["url"].startswith("https://") for s in gpu["sources"])
    assert gpu["efficiency"]["source"]


def test_pagination_and_filters(client: TestClient) -> None:
    everything = client.get("/v1/gpus", params={"limit": 500}).json()
    first = client.get("/v1/gpus", params={"limit": 3, "offset": 0}).json()
    second = client.get("/v1/gpus", params={"limit": 3, "offset": 3}).json()
    assert [g["id"] for g in first["items"] + second["items"]] == [
        g["id"] for g in everything["items"][:6]
    ]
    assert first["total"] == everything["total"] and first["limit"] == 3

    amd = client.get("/v1/gpus", params={"vendor": "amd"}).json()
    assert amd["items"] and all(g["vendor"] == "amd" for g in amd["items"])
    assert amd["total"] == sum(g["vendor"] == "amd" for g in everything["items"])

    big = client.get("/v1/gpus", params={"min_memory_bytes": 150 * 10**9}).json()
    assert {g["id"] for g in big["items"]} == {
        g["id"] for g in everything["items"] if g["memory_bytes"] >= 150 * 10**9
    }
    assert "mi300x-192gb" in {g["id"] for g in big["items"]}
    assert "a100-sxm4-80gb" not in {g["id"] for g in big["items"]}


def test_create_returns_201_location_etag(client: TestClient) -> None:
    response = client.post("/v1/gpus", json=new_gpu(), headers=AUTH)
    assert response.status_code == 201
    assert response.headers["location"] == "/v1/gpus/test-gpu-96gb"
    assert response.headers["etag"] == '"1"'
    created = response.json()
    assert created["origin"] == "user" and created["version"] == 1
    assert created["peak_flops_per_s"] == {"bf16": 500e12, "fp16": 500e12, "fp8": 1000e12}
    fetched = client.get("/v1/gpus/test-gpu-96gb").json()
    assert fetched == created


def test_replace_and_patch_bump_version(client: TestClient) -> None:
    client.post("/v1/gpus", json=new_gpu(), headers=AUTH)
    replaced = client.put(
        "/v1/gpus/test-gpu-96gb",
        json=new_gpu(memory_bandwidth_bytes_per_s=4.8e12),
        headers={**AUTH, "If-Match": '"1"'},
    )
    assert replaced.status_code == 200
    assert replaced.headers["etag"] == '"2"'
    assert replaced.json()["memory_bandwidth_bytes_per_s"] == 4.8e12

    patched = client.patch(
        "/v1/gpus/test-gpu-96gb",
        json={"peak_flops_per_s": {"fp8": None, "int8": 1000e12}, "tdp_watts": 450},
        headers=AUTH,
    )
    assert patched.status_code == 200
    body = patched.json()
    assert body["version"] == 3
    # Merge patch: fp8 removed, int8 added, bf16/fp16 kept.
    assert body["peak_flops_per_s"] == {"bf16": 500e12, "fp16": 500e12, "int8": 1000e12}
    assert body["tdp_watts"] == 450
    assert body["memory_bandwidth_bytes_per_s"] == 4.8e12


def test_edit_of_bundled_entry_is_marked(client: TestClient) -> None:
    response = client.patch(
        "/v1/gpus/a100-sxm4-80gb", json={"price_per_gpu_hour_usd": 1.23}, headers=AUTH
    )
    assert response.status_code == 200
    assert response.json()["user_modified"] is True
    assert response.json()["origin"] == "bundled"


def test_stale_if_match_gets_412_and_changes_nothing(client: TestClient) -> None:
    client.post("/v1/gpus", json=new_gpu(), headers=AUTH)
    client.patch("/v1/gpus/test-gpu-96gb", json={"tdp_watts": 410}, headers=AUTH)
    stale = client.patch(
        "/v1/gpus/test-gpu-96gb", json={"tdp_watts": 999}, headers={**AUTH, "If-Match": '"1"'}
    )
    assert stale.status_code == 412
    assert stale.headers["content-type"] == "application/problem+json"
    assert client.get("/v1/gpus/test-gpu-96gb").json()["tdp_watts"] == 410


def test_if_match_star_requires_existence(client: TestClient) -> None:
    ok = client.patch("/v1/gpus/l4-24gb", json={"tdp_watts": 72}, headers={**AUTH, "If-Match": "*"})
    assert ok.status_code == 200
    missing = client.patch(
        "/v1/gpus/no-such-gpu", json={"tdp_watts": 72}, headers={**AUTH, "If-Match": "*"}
    )
    assert missing.status_code == 404


def test_delete_then_404_and_recreate(client: TestClient) -> None:
    client.post("/v1/gpus", json=new_gpu(), headers=AUTH)
    assert client.delete("/v1/gpus/test-gpu-96gb", headers=AUTH).status_code == 204
    assert client.get("/v1/gpus/test-gpu-96gb").status_code == 404
    again = client.post("/v1/gpus", json=new_gpu(), headers=AUTH)
    # The same id again continues the version count: "1" named the entry deleted.
    assert again.status_code == 201 and again.json()["version"] == 2
    assert again.headers["etag"] == '"2"'


def test_alias_names_one_gpu_only(client: TestClient) -> None:
    taken = client.get("/v1/gpus/h200-sxm-141gb").json()["aliases"][0]
    response = client.post("/v1/gpus", json=new_gpu(aliases=[taken]), headers=AUTH)
    assert response.status_code == 409
    assert response.json()["errors"][0]["field"] == "aliases"
    assert client.get("/v1/gpus/test-gpu-96gb").status_code == 404


def test_reads_are_open_writes_need_key(client: TestClient) -> None:
    assert client.get("/v1/gpus/l4-24gb").status_code == 200
    assert client.post("/v1/gpus", json=new_gpu()).status_code == 401
    assert (
        client.post("/v1/gpus", json=new_gpu(), headers={"X-API-Key": "wrong"}).status_code == 403
    )
    assert (
        client.post(
            "/v1/gpus", json=new_gpu(), headers={"X-API-Key": AUTH["Authorization"][7:]}
        ).status_code
        == 201
    )


def test_if_none_match_gets_304_while_current(client: TestClient) -> None:
    first = client.get("/v1/gpus/l4-24gb")
    etag = first.headers["etag"]
    cached = client.get("/v1/gpus/l4-24gb", headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.content == b""
    assert cached.headers["etag"] == etag
    client.patch("/v1/gpus/l4-24gb", json={"tdp_watts": 71}, headers=AUTH)
    changed = client.get("/v1/gpus/l4-24gb", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.json()["tdp_watts"] == 71
