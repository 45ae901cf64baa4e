"""Causal attention for prefill and decode through PyTorch's scaled_dot_product_attention, pinned
to one kernel so that the run document can say which kernel ran.

`choose_kernel` tries the fused kernels in the order serving stacks prefer them (FlashAttention,
memory-efficient, cuDNN) and falls back to the unfused math kernel, probing each on tiny tensors
with the run's dtype, head width and head grouping. Grouped-query attention uses SDPA's native
`enable_gqa` where the kernel has it; otherwise prefill repeats the KV heads (as Hugging Face's
`repeat_kv` does). Decode needs neither: one new token per sequence lets the query heads of a
group stand in the query-length axis (the flash-decoding layout), a plain multi-head call.
"""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention
from torch.nn.attention import SDPBackend, sdpa_kernel

from app.formats.run_document import AttentionBackend

__all__ = ["AttentionKernel", "choose_kernel", "decode_attention", "prefill_attention"]

_CUDA_ORDER = (
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.CUDNN_ATTENTION,
)
_CUDA_NAMES = {
    SDPBackend.FLASH_ATTENTION: AttentionBackend.FLASH,
    SDPBackend.EFFICIENT_ATTENTION: AttentionBackend.EFFICIENT,
    SDPBackend.CUDNN_ATTENTION: AttentionBackend.CUDNN,
    SDPBackend.MATH: AttentionBackend.MATH,
}
_PROBE_TOKENS = 16


@dataclass(frozen=True, slots=True)
class AttentionKernel:
    """The SDPA kernel a run is pinned to, and whether it takes grouped KV heads natively."""

    backend: SDPBackend
    name: AttentionBackend
    native_gqa: bool

    def pinned(self) -> AbstractContextManager[None]:
        """A context in which SDPA may use this kernel only (a call it cannot serve fails)."""
        return sdpa_kernel([self.backend])


def prefill_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kernel: AttentionKernel
) -> torch.Tensor:
    """Causal self-attention of a whole prompt.

    Shapes: `query` [B, H, n, h], `key` and `value` [B, K, n, h] with K dividing H; returns
    [B, H, n, h]. Query head i reads KV head i // (H / K).
    """
    groups = query.shape[1] // key.shape[1]
    if groups == 1:
        return F.scaled_dot_product_attention(query, key, value, is_causal=True)
    if kernel.native_gqa:
        return F.scaled_dot_product_attention(query, key, value, is_causal=True, enable_gqa=True)
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(query, key, value, is_causal=True)


def decode_attention(
    query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor
) -> torch.Tensor:
    """One new token per sequence attending over its whole KV cache (itself included).

    Shapes: `query` [B, H, 1, h], caches [B, K, c, h]; returns [B, H, 1, h]. No mask: the new
    token is the last position, so every cached key precedes it.
    """
    batch, heads, _, head_dim = query.shape
    kv_heads = key_cache.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, head_dim)
    out = F.scaled_dot_product_attention(grouped, key_cache, value_cache)
    return out.reshape(batch, heads, 1, head_dim)


def _candidates(device: torch.device) -> list[tuple[SDPBackend, bool]]:
    fused = _CUDA_ORDER if device.type == "cuda" else (SDPBackend.FLASH_ATTENTION,)
    pairs = [(backend, native) for backend in fused for native in (True, False)]
    return [*pairs, (SDPBackend.MATH, True)]


def _name(backend: SDPBackend, device: torch.device) -> AttentionBackend:
    if device.type != "cuda" and backend is not SDPBackend.MATH:
        return AttentionBackend.CPU
    return _CUDA_NAMES[backend]


def _works(
    kernel: AttentionKernel,
    *,
    device: torch.device,
    dtype: torch.dtype,
    heads: int,
    kv_heads: int,
    head_dim: int,
) -> bool:
    shape = (1, heads, _PROBE_TOKENS, head_dim)
    kv_shape = (1, kv_heads, _PROBE_TOKENS, head_dim)
    query = torch.randn(shape, device=device, dtype=dtype)
    key = torch.randn(kv_shape, device=device, dtype=dtype)
    value = torch.randn(kv_shape, device=device, dtype=dtype)
    try:
        # PyTorch warns about every kernel it cannot use; a refused probe is expected here.
        with warnings.catch_warnings(), kernel.pinned():
            warnings.simplefilter("ignore")
            prefill_attention(query, key, value, kernel)
            decode_attention(query[:, :, -1:], key, value)
    except (RuntimeError, TypeError):
        return False
    return True


def choose_kernel(
    device: torch.device, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int
) -> AttentionKernel:
    """The first kernel, in serving preference, that runs this head layout in `dtype`."""
    with torch.inference_mode():
        for backend, native in _candidates(device):
            kernel = AttentionKernel(backend, _name(backend, device), native_gqa=native)
            if _works(
                kernel,
                device=device,
                dtype=dtype,
                heads=heads,
                kv_heads=kv_heads,
                head_dim=head_dim,
            ):
                return kernel
    raise RuntimeError(
        f"no scaled_dot_product_attention kernel runs {heads} heads over {kv_heads} KV heads "
        f"of width {head_dim} in {dtype} on {device}"
    )
