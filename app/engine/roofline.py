"""The roofline: where a GPU turns from memory- to compute-bound, and where each phase sits.

`roofline(...)` answers `POST /v1/roofline`. Phases:

- `prefill` and `decode`: the whole step of the model (all op classes, weights, KV cache and
  activations) from `app.engine.counting`; without a model, article B's idealisation
  (FLOPs 2*N per token, weights read once, KV ignored) gives intensity `2 * tokens / weight bytes
  per parameter`: the prompt length at prefill, the batch at decode, in bf16.
- `prefill_attention` and `decode_attention`: the attention kernel alone, as article C counts it:
  Q, K, V and O streamed once in the KV format, no score matrix written, non-causal unless
  `causal=True`. Per KV head: prefill `4*G*n^2*h` FLOPs over `(2*G*n + 2*n)*h` elements, so
  intensity `2*G*n/(G+1)` per byte of fp8; decode `4*G*c*h` over `(2*G + 2*c)*h`, so
  `2*G*c/(G+c)`. Attention runs at the fp8 rate when the KV cache is fp8 and the GPU has fp8.

Attainable FLOP/s is the datasheet roofline `min(peak, bandwidth * intensity)` (efficiency does
not enter: this is the shape of the machine, not a latency estimate).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.engine.counting import pairs_for_chunk
from app.engine.dtypes import BYTES_PER_ELEMENT, DType, compute_dtype_for
from app.engine.specs import Deployment, GpuSpec, ModelSpec, positive, within_context
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.timing import Bound

__all__ = [
    "Bound",
    "PhasePoint",
    "Roofline",
    "RooflinePhase",
    "attainable_flops_per_s",
    "roofline",
]


class RooflinePhase(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    PREFILL_ATTENTION = "prefill_attention"
    DECODE_ATTENTION = "decode_attention"


def attainable_flops_per_s(
    arithmetic_intensity: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float
) -> float:
    """The roofline: min(peak, bandwidth * intensity) (Williams, Waterman, Patterson 2009)."""
    return min(peak_flops_per_s, bandwidth_bytes_per_s * arithmetic_intensity)


@dataclass(frozen=True, slots=True)
class PhasePoint:
    """One phase on the roofline. Intensities in FLOP/byte, rates in FLOP/s."""

    phase: RooflinePhase
    arithmetic_intensity: float
    attainable_flops_per_s: float
    bound: Bound
    compute_dtype: DType
    ridge_intensity: float
    """Ridge of the format this phase computes in (attention may run at the fp8 rate)."""


@dataclass(frozen=True, slots=True)
class Roofline:
    """The GPU's ridge point for the weights' compute format, and each phase's position."""

    ridge_intensity: float
    compute_dtype: DType
    peak_flops_per_s: float
    memory_bandwidth_bytes_per_s: float
    phases: tuple[PhasePoint, ...]
    warnings: tuple[str, ...] = ()


def _point(phase: RooflinePhase, intensity: float, gpu: GpuSpec, dtype: DType) -> PhasePoint:
    peak = gpu.peak(dtype)
    bandwidth = gpu.memory_bandwidth_bytes_per_s
    ridge = peak / bandwidth
    return PhasePoint(
        phase=phase,
        arithmetic_intensity=intensity,
        attainable_flops_per_s=attainable_flops_per_s(intensity, peak, bandwidth),
        bound=Bound.COMPUTE if intensity >= ridge else Bound.MEMORY,
        compute_dtype=dtype,
        ridge_intensity=ridge,
    )


def prefill_attention_intensity(
    model: ModelSpec, prompt_tokens: int, kv_dtype: DType, *, causal: bool
) -> float:
    """Article C's prefill attention intensity: FLOPs over Q, K, V, O bytes in `kv_dtype`.

    Non-causal it is 2*G*n/(G+1) per byte of fp8 (divide by the element size otherwise);
    causal halves (about) the FLOPs and keeps the bytes.
    """
    n, group = float(prompt_tokens), float(model.group_size)
    pairs = pairs_for_chunk(prompt_tokens, 0, causal=causal)
    # Per KV head: 4*G*h FLOPs per pair; Q and O G*n*h each, K and V n*h each (article C).
    flops = 4.0 * group * pairs
    elements = 2.0 * group * n + 2.0 * n
    return flops / (elements * BYTES_PER_ELEMENT[kv_dtype])


def decode_attention_intensity(model: ModelSpec, context_tokens: int, kv_dtype: DType) -> float:
    """Article C's decode attention intensity: 2*G*c/(G+c) per byte of fp8 (one query per
    head over c cached keys; Q and O G*h each, K and V c*h each)."""
    c, group = float(context_tokens), float(model.group_size)
    return 4.0 * group * c / ((2.0 * group + 2.0 * c) * BYTES_PER_ELEMENT[kv_dtype])


def roofline(
    gpu: GpuSpec,
    *,
    model: ModelSpec | None = None,
    deployment: Deployment | None = None,
    prompt_tokens: int = 2048,
    context_tokens: int = 2048,
    batch_size: int = 1,
    causal: bool = False,
    cost: StepCostModel | None = None,
) -> Roofline:
    """The roofline of `gpu` and where prefill, decode and their attention kernels sit.

    Without a model only `prefill` and `decode` are placed, under article B's idealisation.
    `cost` is a cost model of `model` on `gpu` under `deployment` the caller keeps (counts do
    not depend on its efficiency); None, or one of anything else, and one is built.
    `SpecError` names the request field at fault (sizes, a dtype the GPU lacks).
    """
    deployment = deployment or Deployment()
    positive("prompt_tokens", prompt_tokens)
    positive("context_tokens", context_tokens)
    positive("batch_size", batch_size)
    gemm_dtype = compute_dtype_for(deployment.weight_dtype, gpu.peak_flops_per_s)
    peak = gpu.peak(gemm_dtype)
    bandwidth = gpu.memory_bandwidth_bytes_per_s
    warnings: list[str] = []
    if model is None:
        weight_bytes = BYTES_PER_ELEMENT[deployment.weight_dtype]
        # Article B: FLOPs 2*N per token, bytes N * bytes per weight -> intensity 2*tokens/b.
        phases: tuple[PhasePoint, ...] = (
            _point(RooflinePhase.PREFILL, 2.0 * prompt_tokens / weight_bytes, gpu, gemm_dtype),
            _point(RooflinePhase.DECODE, 2.0 * batch_size / weight_bytes, gpu, gemm_dtype),
        )
        warnings.append(
            "no model given: prefill and decode placed under article B's idealisation "
            "(FLOPs 2N per token, weights read once, KV cache ignored); attention phases need "
            "a model's head counts"
        )
        return Roofline(
            gpu.ridge_intensity(gemm_dtype), gemm_dtype, peak, bandwidth, phases, tuple(warnings)
        )

    within_context(model, "prompt_tokens", prompt_tokens)
    within_context(model, "context_tokens", context_tokens)
    if cost is None or not (
        cost.model == model and cost.gpu == gpu and cost.deployment == deployment
    ):
        cost = StepCostModel(model, gpu, deployment)
    prefill = cost.count_totals(prefill_load(prompt_tokens, batch_size=batch_size, causal=causal))
    decode = cost.count_totals(decode_load(batch_size, context_tokens))
    attention_dtype = cost.attention_dtype
    phases = (
        _point(RooflinePhase.PREFILL, prefill.arithmetic_intensity, gpu, gemm_dtype),
        _point(RooflinePhase.DECODE, decode.arithmetic_intensity, gpu, gemm_dtype),
        _point(
            RooflinePhase.PREFILL_ATTENTION,
            prefill_attention_intensity(model, prompt_tokens, deployment.kv_dtype, causal=causal),
            gpu,
            attention_dtype,
        ),
        _point(
            RooflinePhase.DECODE_ATTENTION,
            decode_attention_intensity(model, context_tokens, deployment.kv_dtype),
            gpu,
            attention_dtype,
        ),
    )
    if deployment.kv_dtype is DType.FP8 and attention_dtype is not DType.FP8:
        warnings.append(
            f"GPU {gpu.id} has no fp8 tensor cores: the fp8 KV cache is dequantised and "
            f"attention runs at the {attention_dtype} rate"
        )
    return Roofline(
        gpu.ridge_intensity(gemm_dtype), gemm_dtype, peak, bandwidth, phases, tuple(warnings)
    )
