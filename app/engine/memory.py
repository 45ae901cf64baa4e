"""Memory on one GPU: weights, the KV cache per token and per sequence, the activation reserve,
and the KV pool that is left.

Weights are `app.engine.params.count_params`'s components (embedding, attention Q/O and K/V,
dense FFN, router, experts, norms, LM head) at their formats' sizes. Under tensor parallelism
everything shards by `tp` except the norms, and the K/V projections once `tp` exceeds the KV
heads: each GPU then holds whole (replicated) KV heads. The KV cache per token is
`app.engine.counting.kv_bytes_per_token`, the figure the step-time model reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.engine.counting import (
    LOGIT_BYTES,
    kv_bytes_per_token,
    kv_heads_per_gpu,
    kv_slots,
    mla_replicated_params,
    stage_share,
    validate_layout,
    validate_tp,
)
from app.engine.dtypes import BYTES_PER_ELEMENT
from app.engine.params import ParamCount, count_params
from app.engine.specs import Deployment, GpuSpec, ModelSpec, SpecError, expert_dtype_for

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "MemoryPlan",
    "activation_reserve_bytes",
    "kv_bytes_per_sequence",
    "kv_bytes_per_token",
    "kv_tokens_per_sequence",
    "memory_plan",
    "weight_bytes_per_gpu",
    "weight_fit_warnings",
]

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default
DEFAULT_BLOCK_TOKENS = 16  # vLLM's default KV-cache block size on CUDA
DEFAULT_MAX_NUM_BATCHED_TOKENS = (
    8192  # a choice (docs/model.md, section 4): the step whose activations we reserve
)
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default --max-num-seqs


def weight_bytes_per_gpu(
    model: ModelSpec, deployment: Deployment, *, params: ParamCount | None = None
) -> float:
    """Bytes of weights one GPU holds; `params` is `count_params(model)` when the caller has it.

    Linear layers in the weight format, sharded by tp; K/V projections hold max(1, K/tp) heads
    per GPU (replicated beyond K); embedding, LM head and router in the activation format,
    sharded by tp (vocab-parallel); norms replicated.
    """
    validate_tp(model, deployment.tp)
    return _weight_bytes(model, deployment, count_params(model) if params is None else params)


def _weight_bytes(model: ModelSpec, deployment: Deployment, params: ParamCount) -> float:
    tp = deployment.tp
    weight_b = BYTES_PER_ELEMENT[deployment.weight_dtype]
    act_b = BYTES_PER_ELEMENT[deployment.activation_dtype]
    # K/V projections: each GPU holds max(1, K/tp) of the K heads' weights.
    kv_share = kv_heads_per_gpu(model, tp) / model.num_kv_heads
    # Attention and dense FFNs split by tp (replicated across dp ranks); the experts spread
    # over the tp x dp GPUs of a stage, by slices or, under ep, whole.
    expert_b = BYTES_PER_ELEMENT[expert_dtype_for(model, deployment)]
    sharded = (params.attention_qo + params.dense_ffn) / tp
    experts = params.experts / deployment.expert_shards * expert_b
    # MLA: q_a and kv_a (d -> the bottlenecks) are replicated on every GPU (vLLM's
    # ReplicatedLinear); the rest of attention splits by heads.
    replicated = mla_replicated_params(model) * (1.0 - 1.0 / tp)
    layers = (
        (sharded + params.attention_kv * kv_share + replicated) * weight_b
        + experts
        + (params.router / tp + params.norms) * act_b
    )
    if deployment.pp == 1:
        return layers + (params.embedding + params.lm_head) / tp * act_b
    # The largest stage's layers, and the embedding (first stage) or the head (last).
    ends = max(params.embedding, params.lm_head or params.embedding) / tp * act_b
    return layers * stage_share(model, deployment.pp) + ends


def kv_bytes_per_sequence(
    model: ModelSpec,
    deployment: Deployment,
    context_tokens: int,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> float:
    """KV bytes of one sequence on one GPU, rounded up to whole paged blocks (PagedAttention);
    windowed layers hold only the blocks their window touches (`counting.kv_slots`)."""
    kv_tokens_per_sequence(context_tokens, block_tokens)  # validates the sizes
    return kv_slots(model, context_tokens, block_tokens) * kv_bytes_per_token(model, deployment)


def kv_tokens_per_sequence(context_tokens: int, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> int:
    """Token slots one sequence of `context_tokens` occupies in a paged KV cache: whole blocks
    of `block_tokens` (PagedAttention)."""
    if block_tokens <= 0:
        raise SpecError("block_tokens", f"must be positive, got {block_tokens}")
    if context_tokens <= 0:
        raise SpecError("context_tokens", f"must be positive, got {context_tokens}")
    return math.ceil(context_tokens / block_tokens) * block_tokens


def activation_reserve_bytes(
    model: ModelSpec,
    deployment: Deployment,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> float:
    """Peak activation workspace of one GPU for a `max_num_batched_tokens`-token step.

    vLLM measures this by profiling a dummy forward of that many tokens before it sizes the KV
    pool. We estimate the same peak: the hidden state and the residual (2*T*d) stay live while
    the widest intermediate of a layer exists, which is either attention's Q, K, V and its
    output (T*(H/tp + 2*max(1, K/tp) + H/tp)*h) or the FFN's gate/up output plus its activated
    product (gated: 3*T*f/tp; plain: 2*T*f/tp; MoE: over the k routed and the shared experts'
    widths), all in the activation format; plus the sampler's fp32 logits and probabilities for
    `max_num_seqs` sequences over the full vocabulary (2 * S * V * 4 bytes).
    """
    validate_tp(model, deployment.tp)
    return _activation_reserve(model, deployment, max_num_batched_tokens, max_num_seqs)


def _activation_reserve(
    model: ModelSpec, deployment: Deployment, max_num_batched_tokens: int, max_num_seqs: int
) -> float:
    if max_num_batched_tokens <= 0:
        raise SpecError("max_num_batched_tokens", "must be positive")
    if max_num_seqs <= 0:
        raise SpecError("max_num_seqs", "must be positive")
    tp = deployment.tp
    tokens = float(max_num_batched_tokens)
    act_b = BYTES_PER_ELEMENT[deployment.activation_dtype]
    d, h = model.hidden_size, model.head_dim
    heads = model.num_attention_heads / tp
    attention_width = (2 * heads + 2 * kv_heads_per_gpu(model, tp)) * h
    ffn_matrices = model.ffn_type.matrices
    ffn_width = float(model.intermediate_size)
    if model.moe is not None:
        moe = model.moe
        moe_width = moe.experts_per_token * moe.expert_intermediate_size + (
            moe.num_shared_experts * moe.shared_width
        )
        ffn_width = moe_width if moe.num_dense_layers == 0 else max(ffn_width, moe_width)
    ffn_live = ffn_matrices * ffn_width / tp
    workspace = tokens * (2 * d + max(attention_width, ffn_live)) * act_b
    # The sampler holds fp32 logits and probabilities over the whole vocabulary.
    logits = 2.0 * max_num_seqs * model.vocab_size * LOGIT_BYTES
    return workspace + logits


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """How one GPU's memory divides (bytes). `kv_pool_bytes` may be negative: nothing fits."""

    memory_bytes: int
    usable_bytes: float
    """gpu_memory_utilization * memory_bytes."""
    weights_bytes: float
    activation_reserve_bytes: float
    kv_pool_bytes: float
    kv_bytes_per_token: float
    kv_pools: int = 1
    """Independent KV pools of the replica: one per attention data-parallel rank, each of
    `kv_pool_bytes` on every GPU of its rank."""

    @property
    def replica_kv_tokens(self) -> int:
        """Tokens of KV cache the replica holds: every rank's pool."""
        if self.kv_pool_bytes <= 0:
            return 0
        return math.floor(self.kv_pool_bytes / self.kv_bytes_per_token) * self.kv_pools

    @property
    def fits_weights(self) -> bool:
        return self.weights_bytes + self.activation_reserve_bytes <= self.usable_bytes


def weight_fit_warnings(
    model: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment,
    *,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
) -> list[str]:
    """What every estimate says when the deployment could not be loaded: the weights one GPU
    holds exceed its memory, or leave nothing of the `gpu_memory_utilization` share for a KV
    cache. Names the sizes and the smallest power-of-two tp that would hold them. Empty when
    the weights fit."""
    params = count_params(model)
    weights = _weight_bytes(model, deployment, params)
    usable = gpu_memory_utilization * gpu.memory_bytes
    if weights < usable:
        return []
    advice = "no tp up to 128 holds them"
    for tp in (2**k for k in range(1, 8)):
        if tp > deployment.tp and _splits(model, tp):
            left = usable - _weight_bytes(model, deployment.with_tp(tp), params)
            if left > 0:
                advice = f"tp {tp} holds them with {left / 1e9:.1f} GB per GPU left for the rest"
                break
    what = "exceed its memory" if weights > gpu.memory_bytes else "leave no room for a KV cache"
    return [
        f"does not fit: the weights take {weights / 1e9:.1f} GB per GPU at tp "
        f"{deployment.tp} in {deployment.weight_dtype}, which {what} ({gpu.memory_bytes / 1e9:.1f}"
        f" GB, {usable / 1e9:.1f} GB usable at gpu_memory_utilization "
        f"{gpu_memory_utilization:g}); the figures are what it would take if it loaded. "
        f"{advice}, or a smaller weight format"
    ]


def _splits(model: ModelSpec, tp: int) -> bool:
    try:
        validate_tp(model, tp)
    except SpecError:
        return False
    return True


def memory_plan(
    model: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment,
    *,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    params: ParamCount | None = None,
) -> MemoryPlan:
    """Usable memory (utilisation * capacity) minus weights and activation reserve = KV pool.

    `params` is `count_params(model)` when the caller has it (it does not depend on tp)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise SpecError(
            "gpu_memory_utilization", f"must be in (0, 1], got {gpu_memory_utilization}"
        )
    validate_layout(model, deployment)
    usable = gpu_memory_utilization * gpu.memory_bytes
    weights = _weight_bytes(model, deployment, count_params(model) if params is None else params)
    reserve = _activation_reserve(model, deployment, max_num_batched_tokens, max_num_seqs)
    return MemoryPlan(
        memory_bytes=gpu.memory_bytes,
        usable_bytes=usable,
        weights_bytes=weights,
        activation_reserve_bytes=reserve,
        kv_pool_bytes=usable - weights - reserve,
        kv_bytes_per_token=kv_bytes_per_token(model, deployment),
        kv_pools=deployment.dp,
    )
