"""The decoder stack: its attention against the textbook formula, decode against prefill, and
its weights against a hand count."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from app.bench.attention import (  # noqa: E402 - after the importorskip
    AttentionKernel,
    choose_kernel,
    decode_attention,
    prefill_attention,
)
from app.bench.memory import parameter_count  # noqa: E402
from app.bench.model import Decoder  # noqa: E402
from app.formats.run_document import AttentionBackend, RunModelSpec  # noqa: E402

from .conftest import TINY_ENTRY  # noqa: E402

CPU = torch.device("cpu")
FP32_TOL = {"rtol": 1e-4, "atol": 1e-5}  # fp32 sums in a different order: a few ulps of 1e-1


def _reference_attention(query: Any, key: Any, value: Any, *, causal: bool) -> Any:
    """softmax(Q K^T / sqrt(h)) V with KV heads repeated per group (Vaswani et al., 2017)."""
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    scores = query @ key.transpose(-1, -2) / math.sqrt(query.shape[-1])
    if causal:
        q_len, k_len = scores.shape[-2:]
        allowed = torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(dim=-1) @ value


def _kernel(native_gqa: bool = True) -> AttentionKernel:
    chosen = choose_kernel(CPU, torch.float32, heads=4, kv_heads=2, head_dim=64)
    return AttentionKernel(chosen.backend, chosen.name, native_gqa=native_gqa)


def test_cpu_runs_the_fused_cpu_kernel() -> None:
    kernel = choose_kernel(CPU, torch.float32, heads=4, kv_heads=2, head_dim=64)
    assert kernel.name is AttentionBackend.CPU


@pytest.mark.parametrize("native_gqa", [True, False], ids=["enable_gqa", "repeat_kv"])
def test_prefill_attention_is_causal_grouped_attention(native_gqa: bool) -> None:
    generator = torch.Generator().manual_seed(1)
    query = torch.randn(2, 4, 12, 64, generator=generator)
    key = torch.randn(2, 2, 12, 64, generator=generator)
    value = torch.randn(2, 2, 12, 64, generator=generator)
    kernel = _kernel(native_gqa)
    with kernel.pinned():
        out = prefill_attention(query, key, value, kernel)
    torch.testing.assert_close(
        out, _reference_attention(query, key, value, causal=True), **FP32_TOL
    )


def test_decode_attention_reads_the_whole_cache_per_group() -> None:
    generator = torch.Generator().manual_seed(2)
    query = torch.randn(3, 4, 1, 64, generator=generator)
    keys = torch.randn(3, 2, 20, 64, generator=generator)
    values = torch.randn(3, 2, 20, 64, generator=generator)
    out = decode_attention(query, keys, values)
    torch.testing.assert_close(
        out, _reference_attention(query, keys, values, causal=False), **FP32_TOL
    )


VARIANTS = {
    "llama": {},
    "mlp-ffn": {"ffn_type": "mlp"},
    "tied-embeddings": {"tie_word_embeddings": True},
    "qkv-bias": {"attention_bias": True},
    "mha": {"num_kv_heads": 4},
}


def _decoder(overrides: dict[str, Any], seed: int = 0) -> Decoder:
    spec = RunModelSpec.model_validate(TINY_ENTRY | overrides)
    kernel = choose_kernel(
        CPU, torch.float32, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
    )
    return Decoder(
        spec,
        device=CPU,
        dtype=torch.float32,
        kernel=kernel,
        max_positions=64,
        generator=torch.Generator().manual_seed(seed),
    )


@pytest.mark.parametrize("overrides", VARIANTS.values(), ids=VARIANTS.keys())
def test_decode_step_continues_prefill_exactly(overrides: dict[str, Any]) -> None:
    """Prefill 8 tokens into a cache, decode the 9th: the logits must be those of a prefill over
    all 9, which checks rotary positions, head grouping, the causal mask and the cache layout."""
    with torch.inference_mode():
        decoder = _decoder(overrides)
        tokens = decoder.random_tokens(2, 9)
        cache = decoder.new_kv_cache(2, 9)
        decoder.prefill(tokens[:, :8], cache)
        stepped = decoder.decode_step(tokens[:, 8:], cache)
        full = decoder.prefill(tokens)
    assert stepped.shape == (2, 1000)
    assert torch.isfinite(stepped).all()
    torch.testing.assert_close(stepped, full, **FP32_TOL)


def test_every_earlier_token_reaches_the_last_position() -> None:
    with torch.inference_mode():
        decoder = _decoder({})
        tokens = decoder.random_tokens(1, 16)
        changed = tokens.clone()
        changed[0, 0] = (tokens[0, 0] + 1) % 1000
        difference = (decoder.prefill(tokens) - decoder.prefill(changed)).abs().max()
    assert difference > 1e-4


def test_weights_match_a_hand_count() -> None:
    # Per layer: QKV (4 + 2 + 2) * 64 * 256 = 131,072; O 256 * 256 = 65,536; gate and up
    # 2 * 512 * 256 = 262,144; down 256 * 512 = 131,072; two norms 512: 590,336.
    # Two layers, embedding and LM head 1000 * 256 each, final norm 256: 1,692,928.
    assert _decoder({}).num_parameters == 1_692_928
    assert _decoder({"tie_word_embeddings": True}).num_parameters == 1_692_928 - 256_000
    assert _decoder({"attention_bias": True}).num_parameters == 1_692_928 + 2 * 512
    # Plain MLP: up 512 * 256 instead of 2 * 512 * 256, per layer.
    assert _decoder({"ffn_type": "mlp"}).num_parameters == 1_692_928 - 2 * 131_072


@pytest.mark.parametrize("overrides", VARIANTS.values(), ids=VARIANTS.keys())
def test_memory_prediction_counts_the_weights_the_decoder_allocates(
    overrides: dict[str, Any],
) -> None:
    decoder = _decoder(overrides)
    assert parameter_count(decoder.spec) == decoder.num_parameters


def test_weights_are_random_not_zero() -> None:
    decoder = _decoder({})
    layer = decoder.layers[0]
    for weight in (decoder.embedding, layer.qkv, layer.up, layer.down):
        assert weight.std().item() == pytest.approx(0.02, rel=0.05)  # N(0, 0.02), >= 65k draws


def test_decoder_refuses_what_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="moe: the benchmark job does not run"):
        _decoder(
            {"moe": {"num_experts": 4, "experts_per_token": 2, "expert_intermediate_size": 128}}
        )
    with pytest.raises(ValueError, match="head_dim: rotary embedding needs an even width"):
        _decoder({"head_dim": 63})


def test_lengths_beyond_the_rotary_tables_are_refused() -> None:
    with torch.inference_mode():
        decoder = _decoder({})
        with pytest.raises(ValueError, match="prompt_tokens: 65 exceeds the 64 positions"):
            decoder.prefill(decoder.random_tokens(1, 65))
        with pytest.raises(ValueError, match="context_tokens: 65 exceeds"):
            decoder.new_kv_cache(1, 65)
