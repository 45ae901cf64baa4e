"""The bundled model catalog, app/catalog/data/models.json: shape, required ids, sources."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from app.catalog.service import MODEL_FIELDS
from app.engine.specs import FfnType, ModelSpec, MoeSpec
from app.formats.specs import spec_fields


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


@pytest.mark.parametrize("model_id", IDS)
def test_entry_builds_a_valid_model_spec(model_id: str) -> None:
    entry = BY_ID[model_id]
    moe = entry["moe"]
    spec = ModelSpec(
        num_layers=entry["num_layers"],
        hidden_size=entry["hidden_size"],
        num_attention_heads=entry["num_attention_heads"],
        num_kv_heads=entry["num_kv_heads"],
        head_dim=entry["head_dim"],
        intermediate_size=entry["intermediate_size"],
        ffn_type=FfnType(entry["ffn_type"]),
        vocab_size=entry["vocab_size"],
        max_context_tokens=entry["max_context_tokens"],
        tie_word_embeddings=entry["tie_word_embeddings"],
        attention_bias=entry["attention_bias"],
        moe=MoeSpec(**moe) if moe is not None else None,
        id=model_id,
    )
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
