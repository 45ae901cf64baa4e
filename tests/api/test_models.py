"""The model catalog over HTTP, and import from a Hugging Face config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.web.heavy import HeavyWork
from tests.api.catalog_helpers import new_model
from tests.conftest import AUTH

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


def test_bundled_models_with_computed_params(client: TestClient) -> None:
    llama = client.get("/v1/models/llama-3-8b").json()
    # Hand count: 8,030,261,248 (embedding 525,336,576 + LM head 525,336,576 + 32 layers of
    # 218,112,000 + final norm 4,096); Meta publishes 8.03B.
    assert llama["params_total"] == 8_030_261_248
    assert llama["params_active"] == llama["params_total"]
    mixtral = client.get("/v1/models/mixtral-8x7b").json()
    assert mixtral["params_total"] == pytest.approx(46.7e9, rel=0.01)
    assert mixtral["params_active"] == pytest.approx(12.9e9, rel=0.01)


def test_list_filters_by_family_and_params(client: TestClient) -> None:
    everything = client.get("/v1/models", params={"limit": 500}).json()
    llamas = client.get("/v1/models", params={"family": "llama", "limit": 500}).json()
    assert llamas["total"] == sum(m["family"] == "llama" for m in everything["items"]) >= 5
    mid = client.get(
        "/v1/models", params={"min_params": 10**10, "max_params": 10**11, "limit": 500}
    ).json()
    expected = {m["id"] for m in everything["items"] if 10**10 <= m["params_total"] <= 10**11}
    assert {m["id"] for m in mid["items"]} == expected
    assert "llama-3-70b" in expected and "llama-3-8b" not in expected


def test_create_model_computes_params(client: TestClient) -> None:
    response = client.post("/v1/models", json=new_model(), headers=AUTH)
    assert response.status_code == 201
    body = response.json()
    d, layers, vocab = 2048, 16, 128256
    # Q,O: 2*d*(32*64); K,V: 2*d*(8*64); gated FFN 3*d*8192; norms 2d; tied embedding once.
    per_layer = 2 * d * 2048 + 2 * d * 512 + 3 * d * 8192 + 2 * d
    assert body["params_total"] == vocab * d + layers * per_layer + d
    assert response.headers["location"] == "/v1/models/test-model-1b"


def test_patch_recomputes_params(client: TestClient) -> None:
    client.post("/v1/models", json=new_model(), headers=AUTH)
    before = client.get("/v1/models/test-model-1b").json()["params_total"]
    after = client.patch("/v1/models/test-model-1b", json={"num_layers": 32}, headers=AUTH).json()[
        "params_total"
    ]
    per_layer = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048
    assert after - before == 16 * per_layer


def test_moe_patch_merges(client: TestClient) -> None:
    response = client.patch(
        "/v1/models/mixtral-8x7b", json={"moe": {"experts_per_token": 1}}, headers=AUTH
    )
    assert response.status_code == 200
    moe = response.json()["moe"]
    assert moe["experts_per_token"] == 1 and moe["num_experts"] == 8


@pytest.mark.parametrize(
    ("fixture", "catalog_id"),
    [("llama-3-8b", "llama-3-8b"), ("mixtral-8x7b", "mixtral-8x7b"), ("qwen2.5-7b", "qwen2.5-7b")],
)
def test_hf_import_matches_catalog(client: TestClient, fixture: str, catalog_id: str) -> None:
    config = json.loads((FIXTURES / f"{fixture}.json").read_text())
    response = client.post(
        "/v1/models/hf-import",
        params={"id": f"imported-{fixture}", "hf_repo": "org/repo"},
        json=config,
        headers=AUTH,
    )
    assert response.status_code == 201, response.text
    imported = response.json()
    catalog = client.get(f"/v1/models/{catalog_id}").json()
    for field in ("num_layers", "hidden_size", "num_kv_heads", "head_dim", "moe", "params_total"):
        assert imported[field] == catalog[field], field
    assert imported["sources"][0]["url"] == "https://huggingface.co/org/repo/blob/main/config.json"


def test_hf_import_unsupported_architecture(client: TestClient) -> None:
    response = client.post(
        "/v1/models/hf-import",
        params={"id": "gpt2"},
        json={"architectures": ["GPT2LMHeadModel"], "n_layer": 12},
        headers=AUTH,
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "config.architectures"
    assert "LlamaForCausalLM" in response.json()["errors"][0]["message"]


def test_hf_import_missing_field(client: TestClient) -> None:
    config = json.loads((FIXTURES / "llama-3-8b.json").read_text())
    del config["num_hidden_layers"]
    response = client.post(
        "/v1/models/hf-import", params={"id": "broken"}, json=config, headers=AUTH
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "config.num_hidden_layers"
    assert client.get("/v1/models/broken").status_code == 404


@pytest.mark.parametrize(
    ("fixture", "key", "value", "field"),
    [
        # Within what the config parser takes, beyond the catalog's bound (1,000 layers): the
        # import is checked as a POST is, so no entry is stored that its read schema refuses.
        ("llama-3-8b", "num_hidden_layers", 5000, "config.num_hidden_layers"),
        ("llama-3-8b", "max_position_embeddings", 10**12, "config.max_position_embeddings"),
        ("mixtral-8x7b", "num_local_experts", 10**6, "config.num_local_experts"),
        # Refused before the parser walks the layers (a Qwen3-MoE config walks each one).
        ("qwen3-30b-a3b", "num_hidden_layers", 10**30, "config.num_hidden_layers"),
    ],
)
def test_hf_import_is_bounded_as_the_catalog_is(
    client: TestClient, fixture: str, key: str, value: int, field: str
) -> None:
    config = json.loads((FIXTURES / f"{fixture}.json").read_text()) | {key: value}
    response = client.post(
        "/v1/models/hf-import", params={"id": "too-big"}, json=config, headers=AUTH
    )
    assert response.status_code == 422, response.text
    assert [error["field"] for error in response.json()["errors"]] == [field]
    assert client.get("/v1/models/too-big").status_code == 404


def test_hf_import_keeps_the_checkpoint_format_and_its_sliding_window(
    client: TestClient,
) -> None:
    config = json.loads((FIXTURES / "mistral-7b-v0.3.json").read_text())
    config |= {"sliding_window": 4096, "torch_dtype": "float16"}
    response = client.post(
        "/v1/models/hf-import", params={"id": "windowed"}, json=config, headers=AUTH
    )
    assert response.status_code == 201, response.text
    imported = response.json()
    assert imported["checkpoint_dtype"] == "fp16"
    assert imported["notes"] == []
    assert (imported["sliding_window"], imported["window_layers"]) == (4096, 32)
    assert client.get("/v1/models/windowed").json()["checkpoint_dtype"] == "fp16"


def test_a_recreated_model_continues_its_version_count(client: TestClient) -> None:
    """Deleted and created again under the same id, an entry never reuses a version (an ETag):
    a client or a plan holding `"2"` of the old entry must not match the new one."""
    created = client.post("/v1/models", json=new_model(), headers=AUTH)
    assert created.status_code == 201 and created.headers["etag"] == '"1"'
    patched = client.patch("/v1/models/test-model-1b", json={"num_layers": 32}, headers=AUTH)
    assert patched.headers["etag"] == '"2"'
    assert client.delete("/v1/models/test-model-1b", headers=AUTH).status_code == 204
    again = client.post("/v1/models", json=new_model(), headers=AUTH)
    assert again.status_code == 201, again.text
    assert again.headers["etag"] == '"3"'
    assert client.get("/v1/models/test-model-1b").headers["etag"] == '"3"'
    # A bundled entry deleted and re-created likewise.
    bundled = client.get("/v1/models/llama-3-8b")
    version = int(bundled.headers["etag"].strip('"'))
    fields = {k: v for k, v in bundled.json().items() if k in new_model()}
    assert client.delete("/v1/models/llama-3-8b", headers=AUTH).status_code == 204
    back = client.post("/v1/models", json=fields | {"id": "llama-3-8b"}, headers=AUTH)
    assert back.status_code == 201, back.text
    assert back.headers["etag"] == f'"{version + 1}"'


def test_a_models_history_names_who_wrote_it(settings: Settings, heavy_work: HeavyWork) -> None:
    """Catalog writes stay shared between keys, and each is attributed in the entry's history
    (`GET /v1/models/{id}/history`, newest first): the principal's name, never its key; the
    bundled catalog's load by nobody."""
    keys = ["alice:write:alice-key-0123456789abcdef", "bob:write:bob-key-0123456789abcdef"]
    app = create_app(settings.model_copy(update={"api_keys": keys}), heavy_work)
    alice = {"Authorization": "Bearer alice-key-0123456789abcdef"}
    bob = {"Authorization": "Bearer bob-key-0123456789abcdef"}
    with TestClient(app) as client:
        assert client.post("/v1/models", json=new_model(), headers=alice).status_code == 201
        patched = client.patch("/v1/models/test-model-1b", json={"num_layers": 32}, headers=bob)
        assert patched.status_code == 200
        assert client.delete("/v1/models/test-model-1b", headers=alice).status_code == 204
        assert client.get("/v1/models/test-model-1b/history").status_code == 401
        history = client.get("/v1/models/test-model-1b/history", headers=bob)
        assert history.status_code == 200, history.text
        rows = [(r["action"], r["version"], r["principal"]) for r in history.json()["items"]]
        assert rows == [("deleted", 2, "alice"), ("patched", 2, "bob"), ("created", 1, "alice")]
        assert "key-0123456789abcdef" not in history.text
        client.patch("/v1/models/llama-3-8b", json={"name": "Llama 3 8B (ours)"}, headers=bob)
        bundled = client.get("/v1/models/llama-3-8b/history", headers=alice).json()["items"]
        assert bundled[0]["principal"] == "bob"
