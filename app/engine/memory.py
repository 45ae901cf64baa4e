"""Memory on one GPU: weights, the KV cache per token and per sequence, the activation reserve,
and the KV pool that is left.

Parameters are counted from the architecture directly (embedding, attention, FFN or experts,
norms, LM head). Under tensor parallelism everything shards by `tp` except the norms, and the K/V
projections once `tp` exceeds the KV heads: each GPU then holds whole (replicated) KV heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.engine.counting import LOGIT_BYTES, kv_heads_per_gpu, validate_tp
from app.engine.dtypes import BYTES_PER_ELEMENT
from app.engine.specs import Deployment, FfnType, GpuSpec, ModelSpec, SpecError

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "MemoryPlan",
    "ParamCounts",
    "activation_reserve_bytes",
    "kv_bytes_per_sequence",
    "kv_bytes_per_token",
    "memory_plan",
    "param_counts",
    "weight_bytes_per_gpu",
]

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default
DEFAULT_BLOCK_TOKENS = 16  # vLLM's default KV-cache block size on CUDA
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # DESIGN decision: the step whose activations we reserve
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default --max-num-seqs


@dataclass(frozen=True, slots=True)
class ParamCounts:
    """Parameters of the model by role (whole model, not sharded)."""

    embedding: int
    lm_head: int
    attention_qo: int
    """Q and O projections (and Q biases)."""
    attention_kv: int
    """K and V projections (and their biases): the part replicated when tp > KV heads."""
    ffn: int
    """Dense FFN layers."""
    experts: int
    """Routed and shared experts of the MoE layers."""
    router: int
    norms: int

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.attention_qo
            + self.attention_kv
            + self.ffn
            + self.experts
            + self.router
            + self.norms
        )

    @property
    def quantised(self) -> int:
        """Parameters stored in the weight format (the decoder's linear layers)."""
        return self.attention_qo + self.attention_kv + self.ffn + self.experts


def param_counts(model: ModelSpec) -> ParamCounts:
    """Parameters counted from `model`'s architecture."""
    d, h, layers = model.hidden_size, model.head_dim, model.num_layers
    heads, kv_heads = model.num_attention_heads, model.num_kv_heads
    matrices = 3 if model.ffn_type is FfnType.GATED else 2
    bias = 1 if model.attention_bias else 0
    moe = model.moe
    dense_layers = layers if moe is None else moe.num_dense_layers
    moe_layers = layers - dense_layers
    experts = router = 0
    if moe is not None:
        routed = moe.num_experts * matrices * d * moe.expert_intermediate_size
        shared = moe.num_shared_experts * matrices * d * moe.shared_width
        experts = (routed + shared) * moe_layers
        router = d * moe.num_experts * moe_layers
    return ParamCounts(
        embedding=model.vocab_size * d,
        lm_head=0 if model.tie_word_embeddings else model.vocab_size * d,
        # Q: d x H h (+ bias), O: H h x d per layer.
        attention_qo=(2 * d * heads * h + bias * heads * h) * layers,
        # K and V: d x K h each (+ biases) per layer.
        attention_kv=(2 * d * kv_heads * h + 2 * bias * kv_heads * h) * layers,
        ffn=matrices * d * model.intermediate_size * dense_layers,
        experts=experts,
        router=router,
        norms=2 * d * layers + d,  # two RMSNorms per layer and the final norm
    )


def weight_bytes_per_gpu(model: ModelSpec, deployment: Deployment) -> float:
    """Bytes of weights one GPU holds.

    Linear layers in the weight format, sharded by tp; K/V projections hold max(1, K/tp) heads
    per GPU (replicated beyond K); embedding, LM head and router in the activation format,
    sharded by tp (vocab-parallel); norms replicated.
    """
    tp = deployment.tp
    validate_tp(model, tp)
    params = param_counts(model)
    weight_b = BYTES_PER_ELEMENT[deployment.weight_dtype]
    act_b = BYTES_PER_ELEMENT[deployment.activation_dtype]
    # K/V projections: each GPU holds max(1, K/tp) of the K heads' weights.
    kv_share = kv_heads_per_gpu(model, tp) / model.num_kv_heads
    sharded = (params.attention_qo + params.ffn + params.experts) / tp
    return (
        (sharded + params.attention_kv * kv_share) * weight_b
        + (params.embedding + params.lm_head + params.router) / tp * act_b
        + params.norms * act_b
    )


def kv_bytes_per_token(model: ModelSpec, deployment: Deployment) -> float:
    """KV-cache bytes one token takes on one GPU: 2 * L * max(1, K/tp) * h * kv bytes."""
    validate_tp(model, deployment.tp)
    heads = kv_heads_per_gpu(model, deployment.tp)
    # K and V, each heads x head_dim elements per layer (seed 002 erratum, DESIGN.md 3).
    return 2.0 * model.num_layers * heads * model.head_dim * BYTES_PER_ELEMENT[deployment.kv_dtype]


def kv_bytes_per_sequence(
    model: ModelSpec,
    deployment: Deployment,
    context_tokens: int,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> float:
    """KV bytes of one sequence on one GPU, rounded up to whole paged blocks (PagedAttention)."""
    if block_tokens <= 0:
        raise SpecError("block_tokens", f"must be positive, got {block_tokens}")
    if context_tokens <= 0:
        raise SpecError("context_tokens", f"must be positive, got {context_tokens}")
    blocks = math.ceil(context_tokens / block_tokens)
    return blocks * block_tokens * kv_bytes_per_token(model, deployment)


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
    if max_num_batched_tokens <= 0:
        raise SpecError("max_num_batched_tokens", "must be positive")
    if max_num_seqs <= 0:
        raise SpecError("max_num_seqs", "must be positive")
    tp = deployment.tp
    validate_tp(model, tp)
    tokens = float(max_num_batched_tokens)
    act_b = BYTES_PER_ELEMENT[deployment.activation_dtype]
    d, h = model.hidden_size, model.head_dim
    heads = model.num_attention_heads / tp
    attention_width = (2 * heads + 2 * kv_heads_per_gpu(model, tp)) * h
    ffn_matrices = 3 if model.ffn_type is FfnType.GATED else 2
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

    @property
    def fits_weights(self) -> bool:
        return self.weights_bytes + self.activation_reserve_bytes <= self.usable_bytes


def memory_plan(
    model: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment,
    *,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> MemoryPlan:
    """Usable memory (utilisation * capacity) minus weights and activation reserve = KV pool."""
    if not 0 < gpu_memory_utilization <= 1:
        raise SpecError(
            "gpu_memory_utilization", f"must be in (0, 1], got {gpu_memory_utilization}"
        )
    usable = gpu_memory_utilization * gpu.memory_bytes
    weights = weight_bytes_per_gpu(model, deployment)
    reserve = activation_reserve_bytes(model, deployment, max_num_batched_tokens, max_num_seqs)
    return MemoryPlan(
        memory_bytes=gpu.memory_bytes,
        usable_bytes=usable,
        weights_bytes=weights,
        activation_reserve_bytes=reserve,
        kv_pool_bytes=usable - weights - reserve,
        kv_bytes_per_token=kv_bytes_per_token(model, deployment),
    )
