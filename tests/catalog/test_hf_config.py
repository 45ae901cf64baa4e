"""The Hugging Face config.json importer against real published configs and broken ones."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from app.engine.params import count_params
from app.engine.specs import ModelSpec
from app.formats.hf_config import (
    MAPPED_FIELDS,
    SUPPORTED_ARCHITECTURES,
    HfConfigError,
    HfModel,
    parse_hf_config,
)
from app.formats.specs import spec_fields

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
# Fixture file stem == catalog id; each file is the repository's published config.json.
FIXTURE_IDS = [
    "llama-3-8b",
    "mistral-7b-v0.3",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "gemma-2-9b",
]
ARCHITECTURE_KEYS = [
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
    "tie_word_embeddings",
    "attention_bias",
    "moe",
    "checkpoint_dtype",
]


def _config(model_id: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{model_id}.json").read_text("utf-8"))
    return loaded


def _catalog_entry(model_id: str) -> dict[str, Any]:
    text = resources.files("app.catalog").joinpath("data/models.json").read_text("utf-8")
    (entry,) = [m for m in json.loads(text)["models"] if m["id"] == model_id]
    return dict(entry)


def _error(config: Any) -> HfConfigError:
    with pytest.raises(HfConfigError) as caught:
        parse_hf_config(config)
    return caught.value


@pytest.mark.parametrize("model_id", FIXTURE_IDS)
def test_published_config_parses_to_catalog_entry(model_id: str) -> None:
    fields = parse_hf_config(_config(model_id))
    entry = _catalog_entry(model_id)
    assert fields.as_dict() == {key: entry[key] for key in ARCHITECTURE_KEYS}
    assert fields.to_model_spec(model_id).id == model_id


def test_llama_head_dim_derived_and_kv_heads_read() -> None:
    fields = parse_hf_config(_config("llama-3-8b"))
    # No head_dim key: 4096 / 32; num_key_value_heads 8 (GQA).
    assert (fields.spec.head_dim, fields.spec.num_kv_heads) == (128, 8)
    assert fields.family == "llama"
    assert fields.spec.moe is None


def test_qwen3_explicit_head_dim_wins() -> None:
    # Qwen3-32B: head_dim 128 although hidden_size / heads = 5120 / 64 = 80.
    assert parse_hf_config(_config("qwen3-32b")).spec.head_dim == 128


def test_qwen2_has_attention_bias_without_a_key() -> None:
    config = _config("qwen2.5-7b")
    assert "attention_bias" not in config
    assert parse_hf_config(config).spec.attention_bias is True


def test_gemma2_ties_embeddings_by_default() -> None:
    config = _config("gemma-2-9b")
    assert "tie_word_embeddings" not in config
    fields = parse_hf_config(config)
    assert fields.spec.tie_word_embeddings is True
    assert fields.spec.head_dim == 256


def test_mixtral_experts() -> None:
    fields = parse_hf_config(_config("mixtral-8x7b"))
    assert fields.as_dict()["moe"] == {
        "num_experts": 8,
        "experts_per_token": 2,
        "expert_intermediate_size": 14336,
        "num_shared_experts": 0,
        "shared_expert_intermediate_size": 0,
        "num_dense_layers": 0,
    }
    # Hand count of the published checkpoint (see tests/engine/test_params.py): 46,702,792,704.
    assert count_params(fields.to_model_spec()).total == 46_702_792_704


def test_qwen3_moe_experts() -> None:
    fields = parse_hf_config(_config("qwen3-30b-a3b"))
    moe = fields.spec.moe
    assert moe is not None
    assert (moe.num_experts, moe.experts_per_token) == (128, 8)
    assert moe.expert_intermediate_size == 768
    assert moe.num_dense_layers == 0


def test_qwen3_moe_leading_mlp_only_layers_become_dense_layers() -> None:
    config = _config("qwen3-30b-a3b") | {"mlp_only_layers": [1, 0]}
    fields = parse_hf_config(config)
    assert fields.spec.moe is not None
    assert fields.as_dict()["moe"]["num_dense_layers"] == 2


def test_model_type_selects_the_mapping_without_architectures() -> None:
    config = _config("mistral-7b-v0.3")
    del config["architectures"]
    assert parse_hf_config(config) == parse_hf_config(_config("mistral-7b-v0.3"))


def test_kv_heads_default_to_query_heads() -> None:
    config = _config("llama-3-8b")
    del config["num_key_value_heads"]
    assert parse_hf_config(config).spec.num_kv_heads == 32


def test_result_is_a_frozen_dataclass() -> None:
    fields = parse_hf_config(_config("llama-3-8b"))
    assert isinstance(fields, HfModel)
    with pytest.raises(AttributeError):
        fields.spec.hidden_size = 1  # type: ignore[misc]


def test_unsupported_architecture_lists_the_supported_ones() -> None:
    config = _config("llama-3-8b") | {"architectures": ["BertForMaskedLM"]}
    error = _error(config)
    assert isinstance(error, ValueError)
    assert error.field == "architectures"
    assert "BertForMaskedLM" in error.message
    for name in SUPPORTED_ARCHITECTURES:
        assert name in error.message
    assert {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Gemma2ForCausalLM",
    } <= set(SUPPORTED_ARCHITECTURES)


def test_unknown_model_type_without_architectures() -> None:
    config = _config("llama-3-8b")
    del config["architectures"]
    config["model_type"] = "bert"
    assert _error(config).field == "model_type"


@pytest.mark.parametrize(
    ("model_id", "key"),
    [
        ("llama-3-8b", "hidden_size"),
        ("llama-3-8b", "num_hidden_layers"),
        ("llama-3-8b", "num_attention_heads"),
        ("llama-3-8b", "intermediate_size"),
        ("llama-3-8b", "vocab_size"),
        ("llama-3-8b", "max_position_embeddings"),
        ("mixtral-8x7b", "num_local_experts"),
        ("mixtral-8x7b", "num_experts_per_tok"),
        ("qwen3-30b-a3b", "num_experts"),
        ("qwen3-30b-a3b", "moe_intermediate_size"),
    ],
)
def test_missing_field_is_named(model_id: str, key: str) -> None:
    config = _config(model_id)
    del config[key]
    error = _error(config)
    assert error.field == key
    assert "missing" in error.message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hidden_size", "4096"),
        ("num_hidden_layers", 32.0),
        ("vocab_size", True),
        ("num_key_value_heads", -8),
        ("head_dim", 0),
        ("tie_word_embeddings", "no"),
        ("attention_bias", 1),
        ("architectures", "LlamaForCausalLM"),
        ("architectures", []),
    ],
)
def test_ill_typed_field_is_named(key: str, value: Any) -> None:
    config = _config("llama-3-8b") | {key: value}
    assert _error(config).field == key


def test_heads_not_divisible_into_kv_groups() -> None:
    config = _config("llama-3-8b") | {"num_key_value_heads": 5}
    error = _error(config)
    assert error.field == "num_key_value_heads"
    assert "divisible" in error.message


def test_head_dim_cannot_be_derived() -> None:
    config = _config("llama-3-8b") | {"num_attention_heads": 30, "num_key_value_heads": 30}
    assert _error(config).field == "head_dim"


def test_more_experts_per_token_than_experts() -> None:
    config = _config("mixtral-8x7b") | {"num_experts_per_tok": 9}
    assert _error(config).field == "num_experts_per_tok"


def test_interleaved_moe_layers_are_rejected() -> None:
    config = _config("qwen3-30b-a3b") | {"decoder_sparse_step": 2}
    error = _error(config)
    assert error.field == "decoder_sparse_step"
    assert "leading block" in error.message


def test_dense_layer_in_the_middle_is_rejected() -> None:
    config = _config("qwen3-30b-a3b") | {"mlp_only_layers": [5]}
    assert _error(config).field == "mlp_only_layers"


def test_mlp_only_layers_out_of_range() -> None:
    config = _config("qwen3-30b-a3b") | {"mlp_only_layers": [48]}
    assert _error(config).field == "mlp_only_layers"


def test_not_a_json_object() -> None:
    assert _error([1, 2, 3]).field == "config"


def test_parser_does_not_mutate_its_input() -> None:
    config = _config("qwen3-30b-a3b")
    before = copy.deepcopy(config)
    parse_hf_config(config)
    assert config == before


def test_checkpoint_format_from_torch_dtype_or_quantisation() -> None:
    """bf16 and fp16 as declared; a float32 checkpoint is served in bf16; a quantised one is
    its quantisation's format."""
    base = _config("llama-3-8b")
    assert parse_hf_config(base).spec.checkpoint_dtype == "bf16"
    assert parse_hf_config(base | {"torch_dtype": "float16"}).spec.checkpoint_dtype == "fp16"
    assert parse_hf_config(_config("gemma-2-9b")).spec.checkpoint_dtype == "bf16"  # float32
    fp8 = base | {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    assert parse_hf_config(fp8).spec.checkpoint_dtype == "fp8"
    awq = base | {"quantization_config": {"quant_method": "awq", "bits": 4}}
    assert parse_hf_config(awq).spec.checkpoint_dtype == "int4"


def test_a_declared_sliding_window_is_noted_not_dropped() -> None:
    mistral = parse_hf_config(_config("mistral-7b-v0.3") | {"sliding_window": 4096})
    assert len(mistral.notes) == 1
    assert "sliding_window 4096" in mistral.notes[0]
    assert parse_hf_config(_config("llama-3-8b")).notes == ()
    qwen = _config("qwen2.5-7b") | {"sliding_window": 131072, "use_sliding_window": False}
    assert parse_hf_config(qwen).notes == ()


def test_the_mapping_says_what_it_does_with_every_spec_field() -> None:
    """Every field of ModelSpec (its id aside) is set by the parser: a field added to the spec
    fails here until the Hugging Face mapping reads it from config.json or defaults it."""
    assert set(MAPPED_FIELDS) == set(spec_fields(ModelSpec)) - {"id"}
    parsed = parse_hf_config(_config("mixtral-8x7b")).as_dict()
    assert set(parsed) - {"family"} == set(MAPPED_FIELDS)
