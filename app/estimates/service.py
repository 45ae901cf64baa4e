"""Estimate use cases: resolve the target once, ask the engine, attach how far to trust it.

Each function returns the resolved `Target` beside the engine's result, so the HTTP layer can
echo what was estimated. Engine `SpecError`s become 422s naming the request field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from app.catalog.spec_cache import SpecCache
from app.catalog.specs import invalid_spec
from app.engine.batch_ceiling import BatchCeiling, estimate_batch_ceiling
from app.engine.chunking import ChunkRecommendation, recommend_chunk_size
from app.engine.estimates import (
    DecodeEstimate,
    PrefillCurve,
    PrefillEstimate,
    RequestEstimate,
    estimate_decode,
    estimate_prefill,
    estimate_request,
    prefill_curve,
)
from app.engine.parallelism import TpFeasibility, assess_tp
from app.engine.roofline import Roofline, roofline
from app.engine.specs import Deployment, SpecError
from app.targets.service import Target, resolve_gpu_spec, resolve_target, storage_format

__all__ = [
    "batch_ceiling",
    "chunk_size",
    "decode",
    "expected_error",
    "prefill",
    "prefill_points",
    "request",
    "roofline_of",
    "tp_feasibility",
]

R = TypeVar("R")
TargetArgs = Mapping[str, Any]


def _run(call: Callable[[], R]) -> R:
    try:
        return call()
    except SpecError as error:
        raise invalid_spec(error) from None


def expected_error(target: Target, *phases: str) -> dict[str, float]:
    """The spread of validation residuals for these phases, where runs exist for the GPU."""
    return {p: target.expected_error_pct[p] for p in phases if p in target.expected_error_pct}


def _timed(
    cache: SpecCache, target: TargetArgs, estimate: Callable[..., R], *args: Any, **workload: Any
) -> tuple[Target, R]:
    """Resolve `target` and call `estimate(cost, *args, **workload)`."""
    resolved = resolve_target(cache, **target)
    return resolved, _run(lambda: estimate(resolved.cost, *args, **workload))


def prefill(
    cache: SpecCache, target: TargetArgs, **workload: Any
) -> tuple[Target, PrefillEstimate]:
    return _timed(cache, target, estimate_prefill, **workload)


def prefill_points(
    cache: SpecCache, target: TargetArgs, prompt_tokens: Sequence[int], **workload: Any
) -> tuple[Target, PrefillCurve]:
    return _timed(cache, target, prefill_curve, prompt_tokens, **workload)


def decode(cache: SpecCache, target: TargetArgs, **workload: Any) -> tuple[Target, DecodeEstimate]:
    return _timed(cache, target, estimate_decode, **workload)


def request(
    cache: SpecCache, target: TargetArgs, **workload: Any
) -> tuple[Target, RequestEstimate]:
    return _timed(cache, target, estimate_request, **workload)


def batch_ceiling(
    cache: SpecCache, target: TargetArgs, **workload: Any
) -> tuple[Target, BatchCeiling]:
    return _timed(cache, target, estimate_batch_ceiling, **workload)


def chunk_size(
    cache: SpecCache, target: TargetArgs, **workload: Any
) -> tuple[Target, ChunkRecommendation]:
    return _timed(cache, target, recommend_chunk_size, **workload)


def tp_feasibility(
    cache: SpecCache, target: TargetArgs, **workload: Any
) -> tuple[Target, TpFeasibility]:
    """Each of `workload["candidates"]` assessed; the target's own `tp` plays no part (it is
    resolved at tp 1, so a tp the heads cannot take is no 422 here)."""
    resolved = resolve_target(cache, **{**target, "tp": 1})
    return resolved, _run(
        lambda: assess_tp(
            resolved.model,
            resolved.gpu,
            resolved.deployment,
            resolved.efficiency,
            **workload,
        )
    )


def roofline_of(
    cache: SpecCache,
    *,
    gpu: str | Mapping[str, Any],
    model: str | Mapping[str, Any] | None,
    tp: int,
    weight_dtype: str,
    kv_dtype: str,
    **workload: Any,
) -> tuple[str, str | None, Roofline]:
    """Roofline of a GPU, and where a model's phases sit on it when a model is given; with the
    GPU's and model's ids (`inline` for inline specs)."""
    if model is not None:
        resolved = resolve_target(
            cache,
            model=model,
            gpu=gpu,
            tp=tp,
            weight_dtype=weight_dtype,
            kv_dtype=kv_dtype,
            efficiency="ideal",
        )
        result = _run(
            lambda: roofline(
                resolved.gpu, model=resolved.model, deployment=resolved.deployment, **workload
            )
        )
        return resolved.gpu_id, resolved.model_id, result
    spec, gpu_id, _ = resolve_gpu_spec(cache, gpu)
    deployment = _run(
        lambda: Deployment(
            tp=tp,
            weight_dtype=storage_format("weight_dtype", weight_dtype),
            kv_dtype=storage_format("kv_dtype", kv_dtype),
        )
    )
    return gpu_id, None, _run(lambda: roofline(spec, deployment=deployment, **workload))
