"""The bundled model catalog, app/catalog/data/models.json: shape, required ids, sources."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from app.catalog.service import MODEL_FIELDS
from app.engine.specs import MlaSpec, ModelSpec, MoeSpec
from app.formats.specs import build_spec, spec_fields


def _catalog() -> list[dict[str, Any]]:
    text = resources.files("app.catalog").joinpath("data/models.json").read_text("utf-8")
    document = json.loads(text)
    assert set(document) == {"models"}
    models: list[dict[str, Any]] = document["models"]
    return models


MODELS = _catalog()
BY_ID = {entry["id"]: entry for entry in MODELS}

CLIENT_IDS = [
    "llama-2-7b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.1-405b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen3-32b",
]
REQUIRED_IDS = [
    *CLIENT_IDS,
    "llama-2-13b",
    "mistral-7b-v0.3",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "gemma-2-9b",
    "deepseek-v3",
    "deepseek-r1",
    "kimi-k2",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "llama-4-scout",
    "llama-4-maverick",
    "qwen3-235b-a22b",
    "llama-3.3-70b",
]
# A bundled entry is its id, the catalog's own fields and every field of the architecture.
ENTRY_KEYS = {"id", *MODEL_FIELDS, *(set(spec_fields(ModelSpec)) - {"id"})}
MOE_KEYS = set(spec_fields(MoeSpec))
SOURCE_KEYS = {"title", "url", "covers", "note"}
FAMILIES = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "gemma2",
    "gemma3",
    "phi3",
    "deepseek_v3",
    "gpt_oss",
    "llama4",
}
IDS = [entry["id"] for entry in MODELS]


def test_ids_are_unique() -> None:
    assert len(IDS) == len(set(IDS))


@pytest.mark.parametrize("model_id", REQUIRED_IDS)
def test_required_id_present(model_id: str) -> None:
    assert model_id in BY_ID


@pytest.mark.parametrize("model_id", IDS)
def test_entry_has_exactly_the_catalog_keys(model_id: str) -> None:
    entry = BY_ID[model_id]
    assert set(entry) == ENTRY_KEYS
    assert entry["family"] in FAMILIES
    assert entry["name"]
    assert isinstance(entry["published_params"], int)
    assert entry["published_params"] > 0
    if entry["moe"] is not None:
        assert set(entry["moe"]) == MOE_KEYS
    if entry["mla"] is not None:
        assert set(entry["mla"]) == set(spec_fields(MlaSpec))


@pytest.mark.parametrize("model_id", IDS)
def test_entry_builds_a_valid_model_spec(model_id: str) -> None:
    entry = BY_ID[model_id]
    spec = build_spec(ModelSpec, {**entry, "id": model_id})
    assert spec.id == model_id


@pytest.mark.parametrize("model_id", IDS)
def test_entry_cites_architecture_and_published_params(model_id: str) -> None:
    entry = BY_ID[model_id]
    sources = entry["sources"]
    for source in sources:
        assert set(source) == SOURCE_KEYS
        assert source["title"]
        assert source["url"].startswith("https://")
        assert source["covers"]
        assert set(source["covers"]) <= {"architecture", "published_params"}
        assert source["note"] is None or isinstance(source["note"], str)
    architecture = [s["url"] for s in sources if "architecture" in s["covers"]]
    # The architecture comes from the repository's own config.json.
    assert f"https://huggingface.co/{entry['hf_repo']}/blob/main/config.json" in architecture
    assert any("published_params" in s["covers"] for s in sources)


def test_spot_values_match_published_configs() -> None:
    # meta-llama/Meta-Llama-3-8B config.json: 32 layers, 4096 hidden, 8 KV heads, 128256 vocab.
    llama = BY_ID["llama-3-8b"]
    assert (llama["num_layers"], llama["num_kv_heads"], llama["vocab_size"]) == (32, 8, 128256)
    # Qwen/Qwen3-32B config.json sets head_dim 128 although 5120 / 64 = 80.
    assert BY_ID["qwen3-32b"]["head_dim"] == 128
    # google/gemma-2-9b ties its LM head to the embedding and uses 256-wide heads.
    gemma = BY_ID["gemma-2-9b"]
    assert (gemma["tie_word_embeddings"], gemma["head_dim"]) == (True, 256)
    # Qwen2 models carry Q/K/V biases.
    assert BY_ID["qwen2.5-72b"]["attention_bias"] is True
