"""What a point needs in device memory, worked out before anything is allocated. Torch-free.

The job allocates the weights once, then, per point, the prompt's activations (prefill) or a KV
cache of `batch x context` tokens plus one step's activations (decode). A point whose bytes exceed
the free memory is skipped with the reason *before* it allocates: a KV cache of 128 x 16K tokens
of Llama-3-8B (256 GiB) on a 141 GB H200 is known not to fit without spending minutes to find
out, and without leaving the allocator fragmented by a failed giant allocation.

The activation figure is a lower bound of the peak (the tensors live together at the widest
point of one layer), so a predicted skip is certain; a point predicted to fit may still run out
of memory, and the runner catches that too (`is_out_of_memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.bench.config import PointPlan
from app.engine.params import count_params
from app.engine.specs import FfnType
from app.formats.run_document import Phase, RunModelSpec

__all__ = [
    "GIB",
    "PointBytes",
    "PredictedOutOfMemory",
    "check_fits",
    "format_bytes",
    "interrupted_during",
    "is_out_of_memory",
    "kv_cache_bytes",
    "out_of_memory_error",
    "parameter_count",
    "point_bytes",
    "weight_bytes",
]

GIB = 2**30
_OOM_MARKERS = ("out of memory", "can't allocate memory")  # CUDA/HIP; PyTorch's CPU allocator


class PredictedOutOfMemory(MemoryError):
    """The weights or a point cannot fit in the free memory; raised before allocating them."""


def out_of_memory_error(error: BaseException) -> BaseException | None:
    """The allocation failure behind `error`: `error` itself or its cause or context (an
    out-of-memory inside a CUDA-graph capture surfaces as the capture's own error); None when
    `error` is no allocation failure. Those are `MemoryError` (this module's prediction too),
    PyTorch's `torch.OutOfMemoryError` (a `RuntimeError` whose message says "out of memory") and
    the CPU allocator's refusal."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError):
            return current
        if isinstance(current, RuntimeError):
            message = str(current).lower()
            if any(marker in message for marker in _OOM_MARKERS):
                return current
        current = current.__cause__ or current.__context__
    return None


def interrupted_during(error: BaseException) -> bool:
    """True when `error` was raised while a `KeyboardInterrupt` (Ctrl-C, or the job's SIGTERM)
    was propagating, as when a CUDA-graph capture is cut short: the run must stop, not go on."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return True
        current = current.__cause__ or current.__context__
    return False


def is_out_of_memory(error: BaseException) -> bool:
    """True for the allocation failures the job skips a point for (see `out_of_memory_error`)."""
    return out_of_memory_error(error) is not None


def parameter_count(spec: RunModelSpec) -> int:
    """Weights and biases the job allocates for `spec` (the LM head once when tied): exactly the
    engine's count of the same architecture (`app.engine.params.count_params`)."""
    return count_params(spec.to_model_spec()).total


def weight_bytes(spec: RunModelSpec, element_bytes: int, max_positions: int) -> int:
    """The model's allocation: its parameters and the rotary cos/sin tables."""
    rotary = 2 * max_positions * (spec.to_model_spec().head_dim // 2) * element_bytes
    return parameter_count(spec) * element_bytes + rotary


def kv_cache_bytes(spec: RunModelSpec, batch: int, context_tokens: int, element_bytes: int) -> int:
    """Keys and values of every layer for `batch` sequences of `context_tokens`:
    `2 * L * B * K * c * h * bytes` (Llama-3-8B in bf16: 131,072 bytes per token)."""
    model = spec.to_model_spec()
    per_token = 2 * model.num_layers * model.num_kv_heads * model.head_dim * element_bytes
    return batch * context_tokens * per_token


def _activation_bytes(
    spec: RunModelSpec,
    *,
    batch: int,
    tokens: int,
    keys: int,
    element_bytes: int,
    materialised_scores: bool,
) -> int:
    """A lower bound of the peak live activations of one forward pass over `tokens` new tokens
    per sequence that attend over `keys` keys each.

    Per token at the widest point of a layer: gated FFN, the gate/up product (2f), the SiLU of the
    gate (f) and its product with up (f) beside the residual, its norm and the layer output (3d);
    attention, the fused Q/K/V output with the rotated Q and K and their temporaries. Plus the
    last position's logits and, for the unfused attention kernel, one score matrix.
    """
    model = spec.to_model_spec()
    d, f, h = model.hidden_size, model.intermediate_size, model.head_dim
    heads, kv_heads = model.num_attention_heads, model.num_kv_heads
    ffn = (4 * f if model.ffn_type is FfnType.GATED else 2 * f) + 3 * d
    attention = 3 * d + 2 * (heads + 2 * kv_heads) * h
    total = batch * tokens * max(ffn, attention) + batch * model.vocab_size
    if materialised_scores:
        total += batch * heads * tokens * keys
    return total * element_bytes


@dataclass(frozen=True, slots=True)
class PointBytes:
    """What one point allocates: its KV cache (decode) and at least this much activation."""

    kv_cache: int
    activations: int

    @property
    def total(self) -> int:
        return self.kv_cache + self.activations


def point_bytes(
    spec: RunModelSpec, plan: PointPlan, element_bytes: int, *, materialised_scores: bool = False
) -> PointBytes:
    """The bytes `plan` needs beside the weights; `materialised_scores` for the unfused (math)
    attention kernel, which writes the score matrix out."""
    if plan.phase is Phase.PREFILL:
        tokens = plan.prompt_tokens or 0
        activations = _activation_bytes(
            spec,
            batch=plan.batch_size,
            tokens=tokens,
            keys=tokens,
            element_bytes=element_bytes,
            materialised_scores=materialised_scores,
        )
        return PointBytes(kv_cache=0, activations=activations)
    context = plan.context_tokens or 0
    activations = _activation_bytes(
        spec,
        batch=plan.batch_size,
        tokens=1,
        keys=context,
        element_bytes=element_bytes,
        materialised_scores=materialised_scores,
    )
    return PointBytes(
        kv_cache=kv_cache_bytes(spec, plan.batch_size, context, element_bytes),
        activations=activations,
    )


def format_bytes(size: int) -> str:
    """`256.0 GiB`, `4.2 MiB`: binary units, one decimal."""
    if size >= GIB:
        return f"{size / GIB:.1f} GiB"
    return f"{size / 2**20:.1f} MiB"


def check_fits(plan: PointPlan, needed: PointBytes, free_bytes: int | None) -> None:
    """Raise `PredictedOutOfMemory` when `needed` exceeds `free_bytes` (None: unknown, no check).
    The message is the skip reason's detail."""
    if free_bytes is None or needed.total <= free_bytes:
        return
    if plan.phase is Phase.DECODE:
        cache, activations = format_bytes(needed.kv_cache), format_bytes(needed.activations)
        what = (
            f"the KV cache of {plan.batch_size} x {plan.context_tokens} tokens takes {cache}, "
            f"plus at least {activations} of activations"
        )
    else:
        what = (
            f"{plan.batch_size} x {plan.prompt_tokens} prompt tokens need at least "
            f"{format_bytes(needed.activations)} of activations"
        )
    raise PredictedOutOfMemory(
        f"predicted before allocating: {what}; {format_bytes(free_bytes)} free beside the weights"
    )
