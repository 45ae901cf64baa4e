"""Read a Hugging Face `config.json` into Ridgeline's model spec.

`parse_hf_config` maps the keys of a published `config.json` onto a `ModelSpec` and the
catalog's `family`, for the decoder-only architectures whose weights `app.engine.params` can
count. Both the service's `POST /v1/models/hf-import` and the benchmark job's `--config PATH`
call it.

Errors: one exception, `HfConfigError(field, message)`, a `ValueError` whose `field` is the
`config.json` key that is missing, ill-typed or not representable (`"architectures"` for an
unsupported architecture, `"config"` when the document is not a JSON object at all).

Pure: no I/O, no database, no web framework; the caller reads and decodes the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from app.engine.specs import FfnType, ModelSpec, SpecError
from app.formats.specs import build_spec, spec_document

__all__ = [
    "MAPPED_FIELDS",
    "MAX_LAYERS",
    "SUPPORTED_ARCHITECTURES",
    "HfConfigError",
    "HfModel",
    "config_key",
    "parse_hf_config",
]


class HfConfigError(SpecError):
    """A `config.json` that cannot be read as a supported model; `field` is the offending key."""


@dataclass(frozen=True, slots=True)
class _Architecture:
    """How one Hugging Face architecture's config keys map onto Ridgeline's fields."""

    family: str
    model_type: str
    tie_word_embeddings_default: bool  # the transformers config class's default for the key
    attention_bias: bool | None  # fixed by the architecture; None: read `attention_bias`
    moe_keys: str | None = None  # "mixtral", "qwen3_moe", "deepseek", "gpt_oss", "llama4"
    windows: str = "uniform"  # how layers are windowed: see `_windows`
    mla: bool = False  # DeepSeek's multi-head latent attention keys
    text_config: bool = False  # a multimodal wrapper: the language model is `text_config`


# Every architecture here has a gated FFN (SwiGLU, or GeGLU for Gemma), RMSNorm and a
# Llama-shaped attention block, which is what `app.engine.params` counts. Defaults follow the
# config classes of Hugging Face transformers (LlamaConfig, Gemma2Config, ...).
_ARCHITECTURES: dict[str, _Architecture] = {
    "LlamaForCausalLM": _Architecture("llama", "llama", False, None),
    "MistralForCausalLM": _Architecture("mistral", "mistral", False, False),
    "MixtralForCausalLM": _Architecture("mixtral", "mixtral", False, False, "mixtral"),
    "Qwen2ForCausalLM": _Architecture("qwen2", "qwen2", False, True),
    "Qwen3ForCausalLM": _Architecture("qwen3", "qwen3", False, None),
    "Qwen3MoeForCausalLM": _Architecture("qwen3_moe", "qwen3_moe", False, None, "qwen3_moe"),
    "Gemma2ForCausalLM": _Architecture("gemma2", "gemma2", True, None, windows="alternate"),
    "Gemma3ForCausalLM": _Architecture("gemma3", "gemma3_text", True, None, windows="pattern"),
    "Phi3ForCausalLM": _Architecture("phi3", "phi3", False, False),
    "DeepseekV3ForCausalLM": _Architecture(
        "deepseek_v3", "deepseek_v3", False, False, "deepseek", windows="none", mla=True
    ),
    "GptOssForCausalLM": _Architecture(
        "gpt_oss", "gpt_oss", False, True, "gpt_oss", windows="layer_types"
    ),
    "Llama4ForConditionalGeneration": _Architecture(
        "llama4", "llama4", False, False, "llama4", windows="llama4", text_config=True
    ),
    "Llama4ForCausalLM": _Architecture(
        "llama4", "llama4_text", False, False, "llama4", windows="llama4"
    ),
}
_BY_MODEL_TYPE = {arch.model_type: name for name, arch in _ARCHITECTURES.items()}
_BY_MODEL_TYPE["kimi_k2"] = "DeepseekV3ForCausalLM"  # Kimi K2 declares its own model_type

SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(sorted(_ARCHITECTURES))
MAX_LAYERS = 10_000
"""Most decoder layers a config may have; far above any published model, and it bounds the
work of reading one."""


@dataclass(frozen=True, slots=True)
class HfModel:
    """What a `config.json` says: the model's `ModelSpec` (id "inline"), its catalog family, and
    notes on what it declares that is not modelled (and what that means)."""

    family: str
    spec: ModelSpec
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The catalog entry's fields this config determines: `family` and the architecture."""
        return {"family": self.family, **spec_document(self.spec)}

    def to_model_spec(self, model_id: str = "inline") -> ModelSpec:
        return replace(self.spec, id=model_id)


def parse_hf_config(config: Mapping[str, Any]) -> HfModel:
    """Map a decoded Hugging Face `config.json` onto Ridgeline's model fields.

    `architectures[0]` selects the mapping, or `model_type` when `architectures` is absent.
    `head_dim` is the config's when present, else `hidden_size / num_attention_heads`;
    `num_kv_heads` is `num_key_value_heads`, defaulting to `num_attention_heads` (MHA);
    `max_context_tokens` is `max_position_embeddings` as published (any RoPE scaling is already
    reflected there). Sliding windows and chunked local attention are read per architecture
    (`_windows`); multi-head latent attention from DeepSeek's `kv_lora_rank` keys; a multimodal
    wrapper's language model from its `text_config`. Keys that do not change weights, work or
    KV-cache shapes (dropout, RoPE base, soft-capping, routing groups, token ids) are ignored.

    Raises `HfConfigError` naming the offending `config.json` key.
    """
    if not isinstance(config, Mapping):
        raise HfConfigError("config", "must be a JSON object (the contents of config.json)")
    arch_name = _architecture_name(config)
    arch = _ARCHITECTURES[arch_name]
    outer = config
    if arch.text_config:
        text = config.get("text_config")
        if not isinstance(text, Mapping):
            raise HfConfigError("text_config", "missing: the language model's configuration")
        config = text

    hidden_size = _positive_int(config, "hidden_size")
    num_layers = _positive_int(config, "num_hidden_layers")
    if num_layers > MAX_LAYERS:  # before anything walks the layers
        raise HfConfigError("num_hidden_layers", f"{num_layers} layers; at most {MAX_LAYERS}")
    num_heads = _positive_int(config, "num_attention_heads")
    num_kv_heads = _positive_int(config, "num_key_value_heads", default=num_heads)
    head_dim = _positive_int(config, "head_dim", default=0)
    if head_dim == 0:
        if hidden_size % num_heads:
            raise HfConfigError(
                "head_dim",
                f"absent, and hidden_size {hidden_size} is not a multiple of "
                f"num_attention_heads {num_heads} to derive it from",
            )
        head_dim = hidden_size // num_heads
    intermediate_size = _positive_int(config, "intermediate_size")
    if arch.moe_keys == "llama4":
        # Llama 4: `intermediate_size` is the experts' width, the dense layers' is `_mlp`.
        intermediate_size = _positive_int(config, "intermediate_size_mlp")
    vocab_size = _positive_int(config, "vocab_size")
    max_context_tokens = _positive_int(config, "max_position_embeddings")
    tie = _bool(config, "tie_word_embeddings", default=arch.tie_word_embeddings_default)
    if arch.attention_bias is None:
        attention_bias = _bool(config, "attention_bias", default=False)
    else:
        attention_bias = arch.attention_bias

    moe = _moe(config, arch, num_layers, intermediate_size)
    mla = _mla(config) if arch.mla else None
    if mla is not None:
        # The query/key width, and one decompressed key and value per head.
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        num_kv_heads = num_heads
    window, window_layers, window_kind = _windows(config, arch, num_layers)

    # Every field of ModelSpec but its id, each said (tests/catalog/test_hf_config.py holds
    # this list to the spec, so a field added there is mapped here or defaulted on purpose).
    values = {
        "num_layers": num_layers,
        "hidden_size": hidden_size,
        "num_attention_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "intermediate_size": intermediate_size,
        "ffn_type": FfnType.GATED,
        "vocab_size": vocab_size,
        "max_context_tokens": max_context_tokens,
        "tie_word_embeddings": tie,
        "attention_bias": attention_bias,
        "moe": moe,
        "mla": mla,
        "sliding_window": window,
        "window_layers": window_layers,
        "window_kind": window_kind,
        "attention_sinks": arch.moe_keys == "gpt_oss",
        "mtp_layers": _non_negative_int(config, "num_nextn_predict_layers", default=0),
        **_checkpoint_formats(outer),
        "checkpoint_kv_dtype": _checkpoint_kv_dtype(outer),
    }
    try:
        spec = build_spec(ModelSpec, values)
    except SpecError as exc:
        raise HfConfigError(_config_key(exc.field, arch), exc.message) from exc
    return HfModel(family=arch.family, spec=spec, notes=_unmodelled(config, arch))


MAPPED_FIELDS = (
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
    "mla",
    "sliding_window",
    "window_layers",
    "window_kind",
    "attention_sinks",
    "mtp_layers",
    "checkpoint_dtype",
    "expert_checkpoint_dtype",
    "checkpoint_kv_dtype",
)
"""The `ModelSpec` fields `parse_hf_config` sets."""


# torch_dtype names (and their newer `dtype` key) in the catalog's formats. A float32 checkpoint
# is served in 16 bits (vLLM's dtype=auto for Gemma does bf16).
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "bf16", "half": "fp16"}
_QUANT_METHODS = {"fp8": "fp8", "fbgemm_fp8": "fp8", "mxfp4": "mxfp4", "modelopt_fp4": "nvfp4"}
_MODELOPT_ALGOS = {"fp8": "fp8", "nvfp4": "nvfp4"}
"""ModelOpt's `quant_algo` (NVIDIA's checkpoints: `quant_method` `modelopt`) as a format."""
_KV_ALGOS = {"fp8": "fp8", "int8": "int8"}
"""ModelOpt's `kv_cache_quant_algo` as a KV-cache format."""


def _checkpoint_dtype(config: Mapping[str, Any]) -> str:
    """The format of the published weights: a quantisation's (`quantization_config`; FP8 with
    a `weight_block_size` is the block-scaled fp8-block), else `torch_dtype` (or `dtype`), else
    bf16."""
    quantization = config.get("quantization_config")
    if isinstance(quantization, Mapping):
        method = str(quantization.get("quant_method", "")).lower()
        if method == "fp8" and quantization.get("weight_block_size"):
            return "fp8-block"
        algo = str(quantization.get("quant_algo", "")).lower()
        if method == "modelopt" and algo in _MODELOPT_ALGOS:
            return _MODELOPT_ALGOS[algo]
        if method in _QUANT_METHODS:
            return _QUANT_METHODS[method]
        bits = quantization.get("bits") or quantization.get("w_bit")
        if method in {"awq", "gptq", "compressed-tensors"} and bits in (4, 8):
            return "int4" if bits == 4 else "int8"
    declared = config.get("torch_dtype", config.get("dtype"))
    return _TORCH_DTYPES.get(str(declared).lower(), "bf16")


def _checkpoint_kv_dtype(config: Mapping[str, Any]) -> str | None:
    """The KV-cache format a checkpoint's quantisation config declares: ModelOpt's
    `kv_cache_quant_algo` (`FP8` in NVIDIA's FP8 and NVFP4 exports), or a compressed-tensors
    `kv_cache_scheme` of 8-bit floats (int: int8); None when it declares none."""
    quantization = config.get("quantization_config")
    if not isinstance(quantization, Mapping):
        return None
    nested = quantization.get("quantization")  # hf_quant_config.json's layout, kept as is
    if isinstance(nested, Mapping):
        quantization = nested
    algo = quantization.get("kv_cache_quant_algo")
    if isinstance(algo, str):
        return _KV_ALGOS.get(algo.lower())
    scheme = quantization.get("kv_cache_scheme")
    if isinstance(scheme, Mapping) and scheme.get("num_bits") == 8:
        return "int8" if str(scheme.get("type", "float")).lower() == "int" else "fp8"
    return None


def _checkpoint_formats(config: Mapping[str, Any]) -> dict[str, str | None]:
    """`checkpoint_dtype` and `expert_checkpoint_dtype`: a quantisation that leaves attention
    unconverted (`modules_to_not_convert` naming `self_attn`, as gpt-oss's MXFP4 does) applies
    to the experts only, and the rest is in `torch_dtype`."""
    quantised = _checkpoint_dtype(config)
    quantization = config.get("quantization_config")
    skipped = (
        quantization.get("modules_to_not_convert") if isinstance(quantization, Mapping) else None
    )
    if isinstance(skipped, list) and any("self_attn" in str(name) for name in skipped):
        declared = config.get("torch_dtype", config.get("dtype"))
        return {
            "checkpoint_dtype": _TORCH_DTYPES.get(str(declared).lower(), "bf16"),
            "expert_checkpoint_dtype": quantised,
        }
    return {"checkpoint_dtype": quantised, "expert_checkpoint_dtype": None}


def _unmodelled(config: Mapping[str, Any], arch: _Architecture) -> tuple[str, ...]:
    """Notes on what the config declares that Ridgeline does not model (and what that means)."""
    notes = []
    if arch.moe_keys == "gpt_oss":
        notes.append(
            "expert, router and o_proj biases are not counted (0.03 % of gpt-oss's weights)"
        )
    if arch.text_config:
        notes.append(
            "the vision encoder is not counted: parameters, memory and work are the language "
            "model's (text prompts)"
        )
    return tuple(notes)


def _moe(
    config: Mapping[str, Any], arch: _Architecture, num_layers: int, intermediate_size: int
) -> dict[str, int] | None:
    """The MoE fields of an architecture with experts, from where it keeps them."""
    if arch.moe_keys in ("mixtral", "gpt_oss"):
        return _mixtral_moe(config, intermediate_size)
    if arch.moe_keys == "qwen3_moe":
        return _qwen3_moe(config, num_layers)
    if arch.moe_keys == "deepseek":
        return _deepseek_moe(config, num_layers)
    if arch.moe_keys == "llama4":
        return _llama4_moe(config, num_layers)
    return None


def _mla(config: Mapping[str, Any]) -> dict[str, int]:
    """DeepSeek's multi-head latent attention keys."""
    return {
        "kv_lora_rank": _positive_int(config, "kv_lora_rank"),
        "qk_rope_head_dim": _positive_int(config, "qk_rope_head_dim"),
        "qk_nope_head_dim": _positive_int(config, "qk_nope_head_dim"),
        "v_head_dim": _positive_int(config, "v_head_dim"),
        "q_lora_rank": _non_negative_int(config, "q_lora_rank", default=0),
    }


def _windows(
    config: Mapping[str, Any], arch: _Architecture, num_layers: int
) -> tuple[int, int, str]:
    """(window, windowed layers, kind) as each architecture declares them:
    `layer_types` (gpt-oss, newer configs) counts the `sliding_attention` entries; Gemma 2
    windows every even layer; Gemma 3 all but every `sliding_window_pattern`-th; Llama 4
    chunks the RoPE layers (`no_rope_layers`, by default all but every 4th) by
    `attention_chunk_size`; elsewhere `sliding_window` applies to every layer unless
    `use_sliding_window` is false (Qwen2: from `max_window_layers` on)."""
    none = (0, 0, "sliding")
    if arch.windows == "llama4":
        chunk = _non_negative_int(config, "attention_chunk_size", default=0)
        rope = config.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(num_layers)]
        if not isinstance(rope, list) or len(rope) != num_layers:
            raise HfConfigError("no_rope_layers", f"must list {num_layers} layers")
        return (chunk, sum(1 for r in rope if r), "chunked") if chunk else none
    declared = config.get("sliding_window")
    if arch.windows == "none" or declared is None or config.get("use_sliding_window") is False:
        return none
    window = _positive_int(config, "sliding_window")
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list):
        if len(layer_types) != num_layers:
            raise HfConfigError("layer_types", f"must list {num_layers} layers")
        return window, sum(1 for t in layer_types if t == "sliding_attention"), "sliding"
    if arch.windows == "layer_types":
        raise HfConfigError("layer_types", "missing: which layers attend within the window")
    if arch.windows == "alternate":
        windowed = (num_layers + 1) // 2
    elif arch.windows == "pattern":
        pattern = _positive_int(config, "sliding_window_pattern", default=6)
        windowed = sum(1 for i in range(num_layers) if (i + 1) % pattern)
    else:
        start = _non_negative_int(config, "max_window_layers", default=0)
        windowed = num_layers - min(start, num_layers)
    return window, windowed, "sliding"


def config_key(config: Mapping[str, Any], field: str) -> str:
    """The `config.json` key behind the model field `field` (dotted: `moe.num_experts`) of a
    config `parse_hf_config` accepts, for naming it in an error."""
    return _config_key(field, _ARCHITECTURES[_architecture_name(config)])


def _architecture_name(config: Mapping[str, Any]) -> str:
    supported = ", ".join(SUPPORTED_ARCHITECTURES)
    architectures = config.get("architectures")
    if architectures is None:
        model_type = config.get("model_type")
        if model_type is None:
            raise HfConfigError(
                "architectures", f"missing (and no model_type either); supported: {supported}"
            )
        if not isinstance(model_type, str) or model_type not in _BY_MODEL_TYPE:
            raise HfConfigError(
                "model_type",
                f"unsupported model_type {model_type!r} and no architectures; "
                f"supported: {supported}",
            )
        return _BY_MODEL_TYPE[model_type]
    if (
        not isinstance(architectures, list)
        or not architectures
        or not isinstance(architectures[0], str)
    ):
        raise HfConfigError("architectures", "must be a non-empty list of architecture names")
    name = architectures[0]
    if name not in _ARCHITECTURES:
        raise HfConfigError(
            "architectures", f"unsupported architecture {name!r}; supported: {supported}"
        )
    return name


def _positive_int(config: Mapping[str, Any], key: str, *, default: int | None = None) -> int:
    """`config[key]` as a positive integer; `default` when absent or null (required if None)."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise HfConfigError(key, "missing")
        return default
    # bool is an int subclass in Python; JSON true/false are not sizes.
    if isinstance(value, bool) or not isinstance(value, int):
        raise HfConfigError(key, f"must be an integer, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise HfConfigError(key, f"must be positive, got {value}")
    return value


def _non_negative_int(config: Mapping[str, Any], key: str, *, default: int) -> int:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HfConfigError(key, f"must be a non-negative integer, got {value!r}")
    return value


def _bool(config: Mapping[str, Any], key: str, *, default: bool) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise HfConfigError(key, f"must be true or false, got {value!r}")
    return value


def _moe_fields(num_experts: int, experts_per_token: int, width: int, dense: int) -> dict[str, int]:
    return {
        "num_experts": num_experts,
        "experts_per_token": experts_per_token,
        "expert_intermediate_size": width,
        "num_shared_experts": 0,
        "shared_expert_intermediate_size": 0,
        "num_dense_layers": dense,
    }


def _mixtral_moe(config: Mapping[str, Any], intermediate_size: int) -> dict[str, int]:
    """Mixtral: every layer is MoE; each expert is a SwiGLU FFN of `intermediate_size`."""
    return _moe_fields(
        num_experts=_positive_int(config, "num_local_experts"),
        experts_per_token=_positive_int(config, "num_experts_per_tok"),
        width=intermediate_size,
        dense=0,
    )


def _qwen3_moe(config: Mapping[str, Any], num_layers: int) -> dict[str, int]:
    """Qwen3-MoE: layer i is MoE unless listed in `mlp_only_layers` or `(i + 1)` is not a multiple
    of `decoder_sparse_step` (transformers `Qwen3MoeDecoderLayer`); the others are dense FFNs of
    `intermediate_size`; only their number matters to the counts."""
    num_experts = _positive_int(config, "num_experts")
    experts_per_token = _positive_int(config, "num_experts_per_tok")
    width = _positive_int(config, "moe_intermediate_size")
    step = _positive_int(config, "decoder_sparse_step", default=1)
    mlp_only = config.get("mlp_only_layers")
    if mlp_only is None:
        mlp_only = []
    if not isinstance(mlp_only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in mlp_only
    ):
        raise HfConfigError(
            "mlp_only_layers", f"must be a list of layer indices in [0, {num_layers})"
        )
    dense = {i for i in range(num_layers) if i in mlp_only or (i + 1) % step}
    return _moe_fields(num_experts, experts_per_token, width, dense=len(dense))


def _deepseek_moe(config: Mapping[str, Any], num_layers: int) -> dict[str, int]:
    """DeepSeek-V3 (and Kimi K2): the first `first_k_dense_replace` layers are dense FFNs of
    `intermediate_size`, then every `moe_layer_freq`-th layer routes `num_experts_per_tok` of
    `n_routed_experts` experts of `moe_intermediate_size`, plus `n_shared_experts` of that width.
    Grouped top-k routing (`n_group`, `topk_group`) picks which experts, not how many."""
    first = _non_negative_int(config, "first_k_dense_replace", default=0)
    frequency = _positive_int(config, "moe_layer_freq", default=1)
    moe_layers = sum(1 for i in range(first, num_layers) if i % frequency == 0)
    return {
        **_moe_fields(
            num_experts=_positive_int(config, "n_routed_experts"),
            experts_per_token=_positive_int(config, "num_experts_per_tok"),
            width=_positive_int(config, "moe_intermediate_size"),
            dense=num_layers - moe_layers,
        ),
        "num_shared_experts": _non_negative_int(config, "n_shared_experts", default=0),
    }


def _llama4_moe(config: Mapping[str, Any], num_layers: int) -> dict[str, int]:
    """Llama 4: `moe_layers` (default every `interleave_moe_layer_step`-th layer) route
    `num_experts_per_tok` of `num_local_experts` experts of `intermediate_size` beside one shared
    expert of the same width; the other layers are dense FFNs of `intermediate_size_mlp`
    (transformers `Llama4TextConfig`)."""
    step = _positive_int(config, "interleave_moe_layer_step", default=1)
    layers = config.get("moe_layers")
    if layers is None:
        layers = list(range(step - 1, num_layers, step))
    if not isinstance(layers, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in layers
    ):
        raise HfConfigError("moe_layers", f"must be a list of layer indices in [0, {num_layers})")
    return {
        **_moe_fields(
            num_experts=_positive_int(config, "num_local_experts"),
            experts_per_token=_positive_int(config, "num_experts_per_tok"),
            width=_positive_int(config, "intermediate_size"),
            dense=num_layers - len(set(layers)),
        ),
        "num_shared_experts": 1,
    }


def _config_key(spec_field: str, arch: _Architecture) -> str:
    """The `config.json` key behind a `ModelSpec`/`MoeSpec` field, for error messages."""
    keys = {
        "num_layers": "num_hidden_layers",
        "num_kv_heads": "num_key_value_heads",
        "max_context_tokens": "max_position_embeddings",
        "mtp_layers": "num_nextn_predict_layers",
        "window_layers": "layer_types",
        "moe.experts_per_token": "num_experts_per_tok",
        "moe.num_dense_layers": "mlp_only_layers",
    }
    if arch.moe_keys in ("mixtral", "gpt_oss", "llama4"):
        keys |= {
            "moe.num_experts": "num_local_experts",
            "moe.expert_intermediate_size": "intermediate_size",
        }
    elif arch.moe_keys == "deepseek":
        keys |= {
            "moe.num_experts": "n_routed_experts",
            "moe.expert_intermediate_size": "moe_intermediate_size",
            "moe.num_dense_layers": "first_k_dense_replace",
            "moe.num_shared_experts": "n_shared_experts",
        }
    else:
        keys |= {
            "moe.num_experts": "num_experts",
            "moe.expert_intermediate_size": "moe_intermediate_size",
        }
    return keys.get(spec_field, spec_field)
