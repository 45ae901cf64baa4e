"""The batch ceiling: how many sequences of a context length one deployment decodes at once.

The smaller of two limits (docs/model.md): what the KV pool holds (memory left after
weights and the activation reserve under `gpu_memory_utilization`, divided by one sequence's KV
rounded up to whole blocks), and the ridge batch, where the decode step turns compute-bound and
a larger batch adds latency rather than throughput. Because KV reads grow with the batch, long
contexts may never get there (`ridge_batch` None, with the reason).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.engine.counting import kv_slots
from app.engine.estimates import default_memory_plan, deployment_warnings
from app.engine.memory import (
    DEFAULT_BLOCK_TOKENS,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    MemoryPlan,
    kv_tokens_per_sequence,
    memory_plan,
)
from app.engine.specs import positive, within_context
from app.engine.step_cost import StepCostModel, decode_load
from app.engine.timing import Bound
from app.engine.units import GB, MS_PER_S

__all__ = ["BatchCeiling", "estimate_batch_ceiling", "ridge_batch"]

_RIDGE_SEARCH_LIMIT = 1 << 24  # batches beyond 16M sequences are not a deployment
_DEFAULT_SIZES = (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
)
"""`memory_plan`'s defaults: the plan a cost model keeps (`default_memory_plan`)."""


@dataclass(frozen=True, slots=True)
class BatchCeiling:
    """How many sequences of `context_tokens` one deployment can decode at once, and why."""

    kv_bytes_per_token: float
    """Per GPU."""
    kv_bytes_per_sequence: float
    """Per GPU, rounded up to whole blocks."""
    max_batch_by_memory: int
    ridge_batch: int | None
    """Smallest batch whose decode step is compute-bound; None when no batch is."""
    ridge_batch_reason: str | None
    batch_ceiling: int
    limited_by: Bound
    memory: MemoryPlan
    tpot_ms_at_ceiling: float | None
    tokens_per_s_at_ceiling: float | None
    context_tokens: int
    warnings: tuple[str, ...] = ()


def _decode_gap_s(cost: StepCostModel, batch: int, context_tokens: int) -> float:
    """Compute time minus memory time of a decode step: >= 0 when it is compute-bound."""
    step = cost.time_totals(decode_load(batch, context_tokens))
    return step.compute_s - step.memory_s


def ridge_batch(cost: StepCostModel, context_tokens: int) -> int | None:
    """Smallest batch whose decode step at `context_tokens` is compute-bound, or None.

    The gap compute_s - memory_s is convex in the batch (compute and KV reads grow linearly, the
    weight read is fixed or, for MoE, concave) and negative at 0, so once it turns non-negative
    it stays so. For a dense model it is affine, and the line through batches 1 and 2 crosses
    zero at the ridge; for MoE that line crosses at or after the ridge (convexity), so it
    brackets a short binary search. If even the largest batch is memory-bound, none is.
    """
    if _decode_gap_s(cost, _RIDGE_SEARCH_LIMIT, context_tokens) < 0:
        return None
    gap_1 = _decode_gap_s(cost, 1, context_tokens)
    if gap_1 >= 0:
        return 1
    slope = _decode_gap_s(cost, 2, context_tokens) - gap_1
    high = _RIDGE_SEARCH_LIMIT
    if slope > 0:
        high = min(high, max(2, math.ceil(1 - gap_1 / slope)))
        if _decode_gap_s(cost, high, context_tokens) < 0:  # rounding: step up to the bracket
            high = min(_RIDGE_SEARCH_LIMIT, 2 * high)
    low = 1  # memory-bound
    if _decode_gap_s(cost, high - 1, context_tokens) < 0:
        return high  # the line was exact (dense models)
    while high - low > 1:
        middle = (low + high) // 2
        if _decode_gap_s(cost, middle, context_tokens) >= 0:
            high = middle
        else:
            low = middle
    return high


def estimate_batch_ceiling(
    cost: StepCostModel,
    *,
    context_tokens: int,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> BatchCeiling:
    """The batch ceiling: the smaller of what memory holds and where decode turns
    compute-bound (beyond which a larger batch adds latency, not throughput)."""
    positive("context_tokens", context_tokens)
    within_context(cost.model, "context_tokens", context_tokens)
    model, deployment = cost.model, cost.deployment
    if (gpu_memory_utilization, max_num_batched_tokens, max_num_seqs) == _DEFAULT_SIZES:
        plan = default_memory_plan(cost)
    else:
        plan = memory_plan(
            model,
            cost.gpu,
            deployment,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
        )
    kv_tokens_per_sequence(context_tokens, block_tokens)  # validates the sizes
    per_sequence = kv_slots(model, context_tokens, block_tokens) * plan.kv_bytes_per_token
    by_memory = max(0, math.floor(plan.kv_pool_bytes / per_sequence))
    warnings = deployment_warnings(cost)
    if by_memory == 0:
        warnings.append(
            f"not one {context_tokens}-token sequence fits: {plan.weights_bytes / GB:.1f} GB of "
            f"weights and {plan.activation_reserve_bytes / GB:.1f} GB of activations per GPU "
            f"leave {plan.kv_pool_bytes / GB:.2f} GB of the {plan.usable_bytes / GB:.1f} GB "
            "usable; raise tp or quantise"
        )
    ridge = ridge_batch(cost, context_tokens)
    reason = None
    if ridge is None:
        reason = (
            f"at {context_tokens} tokens of context each sequence reads "
            f"{cost.coefficients.kv_bytes_per_token * context_tokens / 1e6:.1f} MB of KV cache "
            "per GPU per step, which takes longer than its share of the compute: decode stays "
            "memory-bound at any batch size"
        )
    if ridge is not None and ridge <= by_memory:
        ceiling, limited_by = ridge, Bound.COMPUTE
    else:
        ceiling, limited_by = by_memory, Bound.MEMORY
    tpot_ms = tokens_per_s = None
    if ceiling > 0:
        seconds = cost.seconds(decode_load(ceiling, context_tokens))
        tpot_ms, tokens_per_s = seconds * MS_PER_S, ceiling / seconds
    return BatchCeiling(
        kv_bytes_per_token=plan.kv_bytes_per_token,
        kv_bytes_per_sequence=per_sequence,
        max_batch_by_memory=by_memory,
        ridge_batch=ridge,
        ridge_batch_reason=reason,
        batch_ceiling=ceiling,
        limited_by=limited_by,
        memory=plan,
        tpot_ms_at_ceiling=tpot_ms,
        tokens_per_s_at_ceiling=tokens_per_s,
        context_tokens=context_tokens,
        warnings=tuple(warnings),
    )
