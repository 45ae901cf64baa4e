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
    "llama-3.3-70b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "deepseek-r1",
    "kimi-k2",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "llama-4-scout",
    "llama-4-maverick",
]
ARCHITECTURE_KEYS = ["family", *MAPPED_FIELDS]


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


def test_interleaved_moe_layers_are_counted_wherever_they_are() -> None:
    # decoder_sparse_step 2: layers 1, 3, ... are MoE, the 24 even ones dense.
    config = _config("qwen3-30b-a3b") | {"decoder_sparse_step": 2}
    moe = parse_hf_config(config).spec.moe
    assert moe is not None
    assert moe.num_dense_layers == 24
    middle = parse_hf_config(_config("qwen3-30b-a3b") | {"mlp_only_layers": [5, 9]}).spec.moe
    assert middle is not None
    assert middle.num_dense_layers == 2


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
    assert parse_hf_config(fp8).spec.checkpoint_dtype == "fp8-block"
    per_tensor = base | {"quantization_config": {"quant_method": "fp8"}}
    assert parse_hf_config(per_tensor).spec.checkpoint_dtype == "fp8"
    # gpt-oss quantises its experts only (modules_to_not_convert: attention, router, ...).
    oss = parse_hf_config(_config("gpt-oss-20b")).spec
    assert (oss.checkpoint_dtype, oss.expert_checkpoint_dtype) == ("bf16", "mxfp4")
    nvfp4 = base | {"quantization_config": {"quant_method": "modelopt_fp4"}}
    assert parse_hf_config(nvfp4).spec.checkpoint_dtype == "nvfp4"
    awq = base | {"quantization_config": {"quant_method": "awq", "bits": 4}}
    assert parse_hf_config(awq).spec.checkpoint_dtype == "int4"


def test_the_kv_cache_format_a_checkpoint_declares() -> None:
    """ModelOpt exports (NVIDIA's FP8 and NVFP4 checkpoints) declare their KV cache: in
    config.json as a compressed-tensors style `kv_cache_scheme`, in hf_quant_config.json's layout
    as `kv_cache_quant_algo`. A checkpoint that declares none (DeepSeek-V3's block FP8) has
    none."""
    base = _config("llama-3-8b")
    modelopt = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "ignore": ["lm_head"],
        "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
    }
    spec = parse_hf_config(base | {"quantization_config": modelopt}).spec
    assert (spec.checkpoint_dtype, spec.checkpoint_kv_dtype) == ("nvfp4", "fp8")
    legacy = {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    spec = parse_hf_config(base | {"quantization_config": legacy}).spec
    assert spec.checkpoint_kv_dtype == "fp8"
    fp8_weights_only = modelopt | {"quant_algo": "FP8", "kv_cache_scheme": None}
    spec = parse_hf_config(base | {"quantization_config": fp8_weights_only}).spec
    assert (spec.checkpoint_dtype, spec.checkpoint_kv_dtype) == ("fp8", None)
    assert parse_hf_config(_config("deepseek-v3")).spec.checkpoint_kv_dtype is None
    assert parse_hf_config(base).spec.checkpoint_kv_dtype is None


def test_sliding_windows_per_architecture() -> None:
    """Mistral: every layer; Gemma 2: the even layers; Gemma 3: all but every 6th; gpt-oss:
    its `layer_types`; Llama 4: the RoPE layers, chunked; Qwen2: none while
    `use_sliding_window` is false, else from `max_window_layers` on."""
    mistral = parse_hf_config(_config("mistral-7b-v0.3") | {"sliding_window": 4096}).spec
    assert (mistral.sliding_window, mistral.window_layers) == (4096, 32)
    gemma = parse_hf_config(_config("gemma-2-9b")).spec
    assert (gemma.sliding_window, gemma.window_layers, gemma.full_attention_layers) == (
        4096,
        21,
        21,
    )
    gemma3 = _config("gemma-2-9b") | {
        "architectures": ["Gemma3ForCausalLM"],
        "num_hidden_layers": 48,
        "sliding_window": 1024,
    }
    assert parse_hf_config(gemma3).spec.window_layers == 40
    oss = parse_hf_config(_config("gpt-oss-120b")).spec
    assert (oss.sliding_window, oss.window_layers, oss.attention_sinks) == (128, 18, True)
    scout = parse_hf_config(_config("llama-4-scout")).spec
    assert (scout.sliding_window, scout.window_layers, scout.window_kind) == (
        8192,
        36,
        "chunked",
    )
    qwen = _config("qwen2.5-7b")
    assert parse_hf_config(qwen).spec.window_layers == 0
    windowed = qwen | {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 21}
    assert parse_hf_config(windowed).spec.window_layers == 28 - 21
    assert parse_hf_config(_config("llama-3-8b")).notes == ()


def test_deepseek_mla_and_moe_from_config() -> None:
    spec = parse_hf_config(_config("deepseek-v3")).spec
    assert spec.mla is not None
    assert (spec.mla.kv_lora_rank, spec.mla.qk_rope_head_dim, spec.mla.q_lora_rank) == (
        512,
        64,
        1536,
    )
    assert (spec.head_dim, spec.num_kv_heads) == (192, 128)
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.num_shared_experts, spec.moe.num_dense_layers) == (
        256,
        1,
        3,
    )
    assert spec.mtp_layers == 1
    kimi = parse_hf_config(_config("kimi-k2"))
    assert kimi.family == "deepseek_v3"
    assert kimi.spec.moe is not None
    assert (kimi.spec.moe.num_experts, kimi.spec.moe.num_dense_layers) == (384, 1)
    assert parse_hf_config({k: v for k, v in _config("kimi-k2").items() if k != "architectures"})


def test_llama4_text_config_and_interleaved_moe() -> None:
    maverick = parse_hf_config(_config("llama-4-maverick"))
    spec = maverick.spec
    assert spec.intermediate_size == 16384  # intermediate_size_mlp: the dense layers
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.expert_intermediate_size) == (128, 8192)
    assert (spec.moe.num_dense_layers, spec.moe.num_shared_experts) == (24, 1)
    assert any("vision encoder" in note for note in maverick.notes)
    assert _error({"architectures": ["Llama4ForConditionalGeneration"]}).field == "text_config"


def test_the_mapping_says_what_it_does_with_every_spec_field() -> None:
    """Every field of ModelSpec (its id aside) is set by the parser: a field added to the spec
    fails here until the Hugging Face mapping reads it from config.json or defaults it."""
    assert set(MAPPED_FIELDS) == set(spec_fields(ModelSpec)) - {"id"}
    parsed = parse_hf_config(_config("mixtral-8x7b")).as_dict()
    assert set(parsed) - {"family"} == set(MAPPED_FIELDS)
