"""A Llama-style decoder stack with random weights, built to an exact architecture.

Per layer: RMSNorm, fused Q/K/V projection (with biases when the spec says so), rotary position
embedding, causal attention with grouped KV heads, output projection, residual; RMSNorm, FFN
(gated SiLU, or a plain GELU MLP), residual. Then a final RMSNorm and the LM head, on the last
position at prefill and on the one new token at decode. The projections are fused the way
serving engines fuse them (one Q/K/V GEMM, one gate/up GEMM), so the GEMM shapes match theirs.

Weights are allocated once, straight on the device in the run's format, with no autograd; call
everything under `torch.inference_mode()`. Values are random (never zeros, which some hardware
multiplies faster), scaled so activations stay finite in 16-bit formats. The job times prefill
without writing a KV cache (serving engines write one, a few percent of the layer's memory
traffic); `prefill` can write one, which is how the tests check decode against prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention

from app.bench.attention import AttentionKernel, decode_attention, prefill_attention
from app.engine.specs import FfnType
from app.formats.run_document import RunModelSpec

__all__ = ["Decoder", "KvCache"]

_WEIGHT_STD = 0.02  # Hugging Face's Llama initialiser_range
_RMS_EPS = 1e-5
_ROPE_THETA = 500_000.0  # Llama 3's base; the value does not change the work done


@dataclass(slots=True)
class _Layer:
    attn_norm: torch.Tensor  # [d]
    qkv: torch.Tensor  # [(H + 2K) h, d]
    qkv_bias: torch.Tensor | None  # [(H + 2K) h]
    out: torch.Tensor  # [d, H h]
    ffn_norm: torch.Tensor  # [d]
    up: torch.Tensor  # gated: [2f, d], gate rows then up rows; mlp: [f, d]
    down: torch.Tensor  # [d, f]


@dataclass(slots=True)
class KvCache:
    """Keys and values of every layer: `tensor[layer, 0]` keys, `tensor[layer, 1]` values, each
    [B, K, c, h]. Filled with random values, as if `c - 1` tokens had been processed."""

    tensor: torch.Tensor

    @property
    def context_tokens(self) -> int:
        return int(self.tensor.shape[4])


class Decoder:
    """The stack of `spec` on `device` in `dtype`; rotary tables cover `max_positions` tokens."""

    def __init__(
        self,
        spec: RunModelSpec,
        *,
        device: torch.device,
        dtype: torch.dtype,
        kernel: AttentionKernel,
        max_positions: int,
        generator: torch.Generator,
    ) -> None:
        if spec.moe is not None:
            raise ValueError("moe: the benchmark job does not run mixture-of-experts models yet")
        if spec.head_dim % 2:
            raise ValueError(f"head_dim: rotary embedding needs an even width, got {spec.head_dim}")
        self.spec = spec
        self.device = device
        self.dtype = dtype
        self.kernel = kernel
        self._generator = generator
        d, h, f = spec.hidden_size, spec.head_dim, spec.intermediate_size
        qkv_rows = (spec.num_attention_heads + 2 * spec.num_kv_heads) * h
        up_rows = 2 * f if spec.ffn_type is FfnType.GATED else f
        self.embedding = self._random((spec.vocab_size, d))
        self.layers = [
            _Layer(
                attn_norm=self._norm_weight(d),
                qkv=self._random((qkv_rows, d)),
                qkv_bias=self._random((qkv_rows,)) if spec.attention_bias else None,
                out=self._random((d, spec.num_attention_heads * h)),
                ffn_norm=self._norm_weight(d),
                up=self._random((up_rows, d)),
                down=self._random((d, f)),
            )
            for _ in range(spec.num_layers)
        ]
        self.final_norm = self._norm_weight(d)
        self.lm_head = (
            self.embedding if spec.tie_word_embeddings else self._random((spec.vocab_size, d))
        )
        self._cos, self._sin = self._rotary_tables(max_positions)

    def _random(self, shape: tuple[int, ...], std: float = _WEIGHT_STD) -> torch.Tensor:
        tensor = torch.empty(shape, device=self.device, dtype=self.dtype)
        return tensor.normal_(0.0, std, generator=self._generator)

    def _norm_weight(self, width: int) -> torch.Tensor:
        return self._random((width,)).add_(1.0)

    def _rotary_tables(self, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        half = self.spec.head_dim // 2
        exponents = torch.arange(half, device=self.device, dtype=torch.float32) / half
        inv_freq = _ROPE_THETA**-exponents  # RoFormer: theta_i = base^(-2i/h)
        angles = torch.outer(
            torch.arange(positions, device=self.device, dtype=torch.float32), inv_freq
        )
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    @property
    def num_parameters(self) -> int:
        """Weights and biases allocated, the LM head counted once when tied to the embedding."""
        tensors = [self.embedding, self.final_norm]
        if self.lm_head is not self.embedding:
            tensors.append(self.lm_head)
        for layer in self.layers:
            tensors += [layer.attn_norm, layer.qkv, layer.out, layer.ffn_norm, layer.up, layer.down]
            if layer.qkv_bias is not None:
                tensors.append(layer.qkv_bias)
        return sum(tensor.numel() for tensor in tensors)

    @property
    def max_positions(self) -> int:
        return int(self._cos.shape[0])

    def random_tokens(self, batch: int, tokens: int) -> torch.Tensor:
        """Token ids [batch, tokens], uniform over the vocabulary."""
        return torch.randint(
            0,
            self.spec.vocab_size,
            (batch, tokens),
            device=self.device,
            generator=self._generator,
        )

    def new_kv_cache(self, batch: int, context_tokens: int) -> KvCache:
        """A filled cache for `batch` sequences of `context_tokens` (the new token's slot last)."""
        if context_tokens > self.max_positions:
            raise ValueError(
                f"context_tokens: {context_tokens} exceeds the {self.max_positions} positions "
                "the rotary tables were built for"
            )
        spec = self.spec
        shape = (spec.num_layers, 2, batch, spec.num_kv_heads, context_tokens, spec.head_dim)
        return KvCache(self._random(shape, std=1.0))

    def prefill(self, tokens: torch.Tensor, cache: KvCache | None = None) -> torch.Tensor:
        """Logits [B, V] of the last position after a forward pass over `tokens` [B, n].

        With `cache` (B sequences, at least n positions) the keys and values of the prompt are
        written to its first n positions, as a serving engine does; the job times prefill
        without it.
        """
        length = tokens.shape[1]
        if length > self.max_positions:
            raise ValueError(
                f"prompt_tokens: {length} exceeds the {self.max_positions} positions "
                "the rotary tables were built for"
            )
        cos, sin = self._cos[:length], self._sin[:length]
        hidden = F.embedding(tokens, self.embedding)
        with self.kernel.pinned():
            for index, layer in enumerate(self.layers):
                query, key, value = self._project_qkv(hidden, layer, cos, sin)
                if cache is not None:
                    cache.tensor[index, 0, :, :, :length] = key
                    cache.tensor[index, 1, :, :, :length] = value
                attended = prefill_attention(query, key, value, self.kernel)
                hidden = self._finish_layer(hidden, attended, layer)
        return self._lm_head(hidden[:, -1])

    def decode_step(self, tokens: torch.Tensor, cache: KvCache) -> torch.Tensor:
        """Logits [B, V] of one new token per sequence (`tokens` [B, 1]) at the cache's last
        position, whose keys and values it writes before attending over the whole cache."""
        position = cache.context_tokens - 1
        cos, sin = self._cos[position : position + 1], self._sin[position : position + 1]
        hidden = F.embedding(tokens, self.embedding)
        with self.kernel.pinned():
            for index, layer in enumerate(self.layers):
                query, key, value = self._project_qkv(hidden, layer, cos, sin)
                keys, values = cache.tensor[index, 0], cache.tensor[index, 1]
                keys[:, :, position] = key[:, :, 0]
                values[:, :, position] = value[:, :, 0]
                attended = decode_attention(query, keys, values)
                hidden = self._finish_layer(hidden, attended, layer)
        return self._lm_head(hidden[:, -1])

    def _project_qkv(
        self, hidden: torch.Tensor, layer: _Layer, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q [B, H, n, h] and K, V [B, K, n, h] of `hidden` [B, n, d]; Q and K rotated."""
        spec = self.spec
        batch, length, _ = hidden.shape
        h = spec.head_dim
        normed = F.rms_norm(hidden, (spec.hidden_size,), layer.attn_norm, _RMS_EPS)
        qkv = F.linear(normed, layer.qkv, layer.qkv_bias)
        heads = qkv.view(batch, length, spec.num_attention_heads + 2 * spec.num_kv_heads, h)
        kv_start = spec.num_attention_heads
        v_start = kv_start + spec.num_kv_heads
        query = heads[:, :, :kv_start].transpose(1, 2)
        key = heads[:, :, kv_start:v_start].transpose(1, 2)
        value = heads[:, :, v_start:].transpose(1, 2)
        return _rotate(query, cos, sin), _rotate(key, cos, sin), value

    def _finish_layer(
        self, hidden: torch.Tensor, attended: torch.Tensor, layer: _Layer
    ) -> torch.Tensor:
        """Output projection and FFN, each with its residual; `attended` is [B, H, n, h]."""
        batch, length, width = hidden.shape
        merged = attended.transpose(1, 2).reshape(batch, length, -1)
        hidden = hidden + F.linear(merged, layer.out)
        normed = F.rms_norm(hidden, (width,), layer.ffn_norm, _RMS_EPS)
        up = F.linear(normed, layer.up)
        if self.spec.ffn_type is FfnType.GATED:
            gate, lifted = up.chunk(2, dim=-1)
            activated = F.silu(gate) * lifted  # SwiGLU (Shazeer 2020), as in Llama
        else:
            activated = F.gelu(up, approximate="tanh")
        return hidden + F.linear(activated, layer.down)

    def _lm_head(self, last: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(last, (self.spec.hidden_size,), self.final_norm, _RMS_EPS)
        return F.linear(normed, self.lm_head)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in the rotate-half layout (Hugging Face Llama): `x` [B, heads, n, h],
    tables [n, h/2]."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
