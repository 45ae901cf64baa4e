"""The bundled catalog load: idempotent, and never over a user's edit, entry or deletion."""

from __future__ import annotations

from collections import Counter

from fastapi.testclient import TestClient

from app.bundled import load_bundled_catalog
from app.catalog.loader import bundled_gpus, bundled_models
from app.catalog.service import LoadOutcome
from app.db.session import make_engine, make_session_factory
from app.settings import Settings
from tests.api.catalog_helpers import new_gpu
from tests.conftest import AUTH


def _load(url: str) -> dict[str, Counter[LoadOutcome]]:
    engine = make_engine(url)
    try:
        with make_session_factory(engine).begin() as session:
            return load_bundled_catalog(session)
    finally:
        engine.dispose()


def test_second_load_changes_nothing(settings: Settings) -> None:
    report = _load(settings.database_url)
    assert report["gpus"] == {LoadOutcome.UNCHANGED: len(bundled_gpus())}
    assert report["models"] == {LoadOutcome.UNCHANGED: len(bundled_models())}


def test_load_keeps_user_edits_entries_and_deletions(
    client: TestClient, settings: Settings
) -> None:
    client.patch("/v1/gpus/l4-24gb", json={"price_per_gpu_hour_usd": 0.42}, headers=AUTH)
    client.delete("/v1/models/llama-2-13b", headers=AUTH)
    client.post("/v1/gpus", json=new_gpu(), headers=AUTH)

    report = _load(settings.database_url)
    assert report["gpus"][LoadOutcome.KEPT_USER_EDIT] == 1
    assert report["models"][LoadOutcome.SKIPPED_DELETED] == 1
    assert client.get("/v1/gpus/l4-24gb").json()["price_per_gpu_hour_usd"] == 0.42
    assert client.get("/v1/models/llama-2-13b").status_code == 404
    assert client.get("/v1/gpus/test-gpu-96gb").json()["origin"] == "user"


def test_recreated_entry_is_the_users(client: TestClient, settings: Settings) -> None:
    client.delete("/v1/models/llama-2-13b", headers=AUTH)
    body = client.get("/v1/models/llama-2-7b").json()
    recreated = {
        k: body[k]
        for k in (
            "name",
            "family",
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "ffn_type",
            "vocab_size",
            "max_context_tokens",
        )
    }
    assert (
        client.post("/v1/models", json={**recreated, "id": "llama-2-13b"}, headers=AUTH).status_code
        == 201
    )
    report = _load(settings.database_url)
    assert report["models"][LoadOutcome.KEPT_USER_ENTRY] == 1
    assert client.get("/v1/models/llama-2-13b").json()["num_layers"] == body["num_layers"]
