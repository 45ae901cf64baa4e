"""Counting: the FLOPs and bytes of one forward step, per op class, from the architecture alone.

Two layers of API:

- `op_coefficients(model, deployment, attention_dtype)` turns a model into per-GPU *coefficients*:
  the work per unit of whatever drives each op class (a token through the linear layers, a
  query-key pair through attention, a cached token through the KV cache, a sequence through the
  LM head). Everything covers all layers. These coefficients are computed once per (model,
  deployment) and are what `app.engine.step_cost.StepCostModel` turns into seconds.
- `count_step(coefficients, load)` multiplies them by a `StepLoad` and returns a `StepCount`:
  FLOPs, weight bytes, KV-cache bytes read and written, activation bytes per op class, for the
  whole deployment (the per-GPU work times `tp`, so replicated KV heads count as physical work).

Conventions (docs/model.md): a multiply-add is 2 FLOPs; causal attention of q queries after
c cached keys has q*c + q*(q+1)/2 query-key pairs, non-causal q*(c+q); attention FLOPs are
4*H*h per pair (QK^T and AV); the LM head runs once per sequence per step. Flash attention never
writes the score matrix, so attention streams Q, K, V and O only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import NamedTuple

from app.engine.dtypes import BYTES_PER_ELEMENT, DType
from app.engine.specs import Deployment, GpuSpec, ModelSpec, SpecError, expert_dtype_for
from app.engine.step_load import StepLoad

__all__ = [
    "LOGIT_BYTES",
    "CountTotals",
    "OpClass",
    "OpCoefficients",
    "OpCount",
    "StepCount",
    "attention_dtype_for",
    "bounded_by_window",
    "count_step",
    "count_totals",
    "expected_distinct_experts",
    "kv_bytes_per_token",
    "kv_heads_per_gpu",
    "kv_slots",
    "mla_replicated_params",
    "op_coefficients",
    "pairs_for_chunk",
    "stage_share",
    "straggler_factor",
    "validate_layout",
    "validate_tp",
    "window_bounded",
]

LOGIT_BYTES = 4.0
"""Logits are produced in fp32 for sampling (vLLM's LogitsProcessor upcasts)."""


class OpClass(StrEnum):
    """The kinds of work in a forward step; each is timed by its own roofline."""

    QKV_PROJ = "qkv_proj"
    O_PROJ = "o_proj"
    FFN = "ffn"
    MOE_ROUTER = "moe_router"
    MOE_EXPERTS = "moe_experts"
    PREFILL_ATTENTION = "prefill_attention"
    DECODE_ATTENTION = "decode_attention"
    LM_HEAD = "lm_head"
    ELEMENTWISE = "elementwise"


KERNEL_LATENCY_S = 3e-6
"""The fixed time of one memory-bound kernel beside its bytes (launch inside a CUDA graph, the
first wave, the tail): aiconfigurator-core 0.12.0's `mem_empirical_constant_latency`, 3 us on
every GPU it models (systems/*.yaml), which its step models add to each norm and activation."""

KERNEL_LATENCY_MEMORY_EFFICIENCY = 0.8
"""The bandwidth efficiency aiconfigurator-core times those kernels' bytes at
(`mem_bw_empirical_scaling_factor`, the same files) beside that latency."""


LINEAR_OP_CLASSES = frozenset(
    {OpClass.QKV_PROJ, OpClass.O_PROJ, OpClass.FFN, OpClass.MOE_ROUTER, OpClass.MOE_EXPERTS}
)
ATTENTION_OP_CLASSES = frozenset({OpClass.PREFILL_ATTENTION, OpClass.DECODE_ATTENTION})


def validate_tp(model: ModelSpec, tp: int) -> None:
    """`SpecError("tp", ...)` unless `tp` splits the model the way vLLM/TensorRT-LLM require:
    query heads divisible by tp, KV heads divisible by tp or tp a multiple of them (then each
    KV head is replicated tp/K times), FFN widths divisible by tp."""
    heads, kv_heads = model.num_attention_heads, model.num_kv_heads
    if tp < 1:
        raise SpecError("tp", f"must be at least 1, got {tp}")
    if heads % tp:
        raise SpecError("tp", f"{heads} query heads cannot be split evenly across {tp} GPUs")
    if kv_heads % tp and tp % kv_heads:
        raise SpecError(
            "tp",
            f"{kv_heads} KV heads can be neither split across nor replicated onto {tp} GPUs",
        )
    widths = [("intermediate_size", model.intermediate_size)]
    if model.moe is not None:
        widths.append(("moe.expert_intermediate_size", model.moe.expert_intermediate_size))
    for name, width in widths:
        if width % tp:
            raise SpecError("tp", f"{name} {width} cannot be split evenly across {tp} GPUs")


def validate_layout(model: ModelSpec, deployment: Deployment) -> None:
    """`SpecError` naming the field unless the engines can lay `model` out as `deployment`:
    tp splits it (`validate_tp`); dp and ep need experts to share (a dense model's data
    parallelism is replicas: plan more of them); ep divides the experts, and without ep the
    tp x dp GPUs split each expert's width; pp has a layer per stage."""
    validate_tp(model, deployment.tp)
    moe = model.moe
    if deployment.dp > 1 and moe is None:
        raise SpecError(
            "dp",
            f"dp {deployment.dp} needs a mixture-of-experts model: a dense model's data "
            "parallelism is separate replicas (plan replicas instead)",
        )
    if deployment.ep > 1 and moe is None:
        raise SpecError(
            "ep", f"ep {deployment.ep} needs a mixture-of-experts model: this one has no experts"
        )
    if moe is not None and deployment.ep > 1 and moe.num_experts % deployment.ep:
        raise SpecError(
            "ep", f"{moe.num_experts} experts cannot be spread evenly over {deployment.ep} GPUs"
        )
    shards = deployment.expert_shards
    if (
        moe is not None
        and deployment.ep == 1
        and shards > deployment.tp
        and moe.expert_intermediate_size % shards
    ):
        raise SpecError(
            "dp",
            f"without ep the tp x dp = {shards} GPUs split each expert, and its width "
            f"{moe.expert_intermediate_size} does not divide by {shards} (use ep {shards})",
        )
    if deployment.pp > model.num_layers:
        raise SpecError(
            "pp", f"{deployment.pp} stages exceed the model's {model.num_layers} layers"
        )


def stage_share(model: ModelSpec, pp: int) -> float:
    """The share of the layers the largest of `pp` pipeline stages holds: ceil(L/pp)/L."""
    return -(-model.num_layers // pp) / model.num_layers


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> float:
    """KV heads each GPU holds: K/tp, or 1 once tp exceeds K (replication; article C). With MLA
    the heads' keys and values exist only while prefill decompresses them: H/tp."""
    return max(1.0, model.num_kv_heads / tp)


def kv_bytes_per_token(model: ModelSpec, deployment: Deployment) -> float:
    """KV-cache bytes one token takes on one GPU over all layers (windowed layers included: the
    cost of a token within the window; `kv_slots` bounds a whole sequence):
    2 * L * max(1, K/tp) * h * kv bytes, or with MLA L * (kv_lora_rank + qk_rope_head_dim) *
    kv bytes on every GPU, since tensor parallelism splits heads and the latent belongs to none."""
    validate_layout(model, deployment)
    kv_heads = kv_heads_per_gpu(model, deployment.tp)
    per_token = _kv_bytes_per_token(model, kv_heads, deployment.kv_dtype)
    # A pipeline stage caches its own layers only.
    return per_token * stage_share(model, deployment.pp) if deployment.pp > 1 else per_token


def _kv_bytes_per_token(model: ModelSpec, kv_heads_per_gpu: float, kv_dtype: DType) -> float:
    kv_b = BYTES_PER_ELEMENT[kv_dtype]
    if model.mla is not None:
        # One latent and one rotary key per token per layer, shared by all heads (DeepSeek-V3:
        # 61 * (512 + 64) * 2 = 70,272 bytes in bf16), replicated on every GPU of the TP group.
        return float(model.mla.latent_width) * kv_b * model.num_layers
    # K and V, max(1, K/tp) heads of h elements per layer (article B erratum, docs/model.md).
    return 2.0 * kv_heads_per_gpu * model.head_dim * kv_b * model.num_layers


def mla_replicated_params(model: ModelSpec) -> int:
    """MLA weights every GPU of a tensor-parallel group holds whole, all layers: q_a_proj
    (d x q_lora_rank) and kv_a_proj_with_mqa (d x (latent + rope)); 0 without MLA."""
    mla = model.mla
    if mla is None:
        return 0
    return model.num_layers * model.hidden_size * (mla.q_lora_rank + mla.latent_width)


def kv_slots(model: ModelSpec, context_tokens: int, block_tokens: int) -> float:
    """Token slots of all-layer KV (`kv_bytes_per_token` each) a sequence of `context_tokens`
    holds in a paged cache of `block_tokens`-token blocks: whole blocks on the full-attention
    layers; on windowed layers only the blocks the window touches, at most ceil(W/b) + 1 (vLLM's
    hybrid allocator frees the blocks that slide out; a chunked layer keeps its current chunk).
    """
    blocks = -(-context_tokens // block_tokens)
    if not model.window_layers:
        return float(blocks * block_tokens)
    windowed = min(blocks, -(-model.sliding_window // block_tokens) + 1)
    share = model.window_layers / model.num_layers
    return (blocks * (1.0 - share) + windowed * share) * block_tokens


def attention_dtype_for(gpu: GpuSpec, deployment: Deployment) -> DType:
    """The format attention computes in.

    fp8 when the KV cache is fp8 and the GPU has fp8 tensor cores (FlashAttention-3 and
    TensorRT-LLM's FP8 context/generation kernels read Q, K, V in fp8); otherwise the activation
    format (int8/int4/fp8 KV caches are dequantised in the kernel, as vLLM does on A100).
    """
    if deployment.kv_dtype is DType.FP8 and DType.FP8 in gpu.peak_flops_per_s:
        return DType.FP8
    return deployment.activation_dtype


def expected_distinct_experts(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """Expected number of distinct experts `tokens` tokens touch in one MoE layer, under
    uniform top-k routing: E * (1 - (1 - k/E)^tokens) (each expert is missed by one token with
    probability 1 - k/E)."""
    if tokens <= 0:
        return 0.0
    return num_experts * (1.0 - math.pow(1.0 - experts_per_token / num_experts, tokens))


@functools.lru_cache(maxsize=4096)
def straggler_factor(picks: int, gpus: int) -> float:
    """The busiest of `gpus` expert-parallel GPUs' share of `picks` token-expert picks over the
    mean, from the randomness of routing alone: E[max] / mean of `gpus` loads each Poisson with
    mean picks/gpus (balls in bins). 1 for one GPU; about 2.4 for 8 picks over 8 GPUs (one
    decoding token of a top-8 model); tending to 1 as the batch grows."""
    if gpus <= 1 or picks <= 0:
        return 1.0
    mean = picks / gpus
    spread = 12.0 * math.sqrt(mean) + 12.0
    # E[max] = sum over m >= 0 of P(max > m) = 1 - P(one load <= m)^gpus; below `start` every
    # load is almost surely above m (each such term is 1), past `mean + spread` none is.
    start = max(0, math.floor(mean - spread))
    expected = float(start)
    term = math.exp(-mean + start * math.log(mean) - math.lgamma(start + 1))  # P(load = m)
    below, m = 0.0, start
    while m < mean + spread:
        below += term  # P(load <= m)
        expected += 1.0 - min(below, 1.0) ** gpus
        m += 1
        term *= mean / m
    # Some GPU takes at least one pick (the Poisson loads may all be 0 where picks are few).
    return max(1.0, max(expected, 1.0) / mean)


def pairs_for_chunk(query_tokens: int, cached_tokens: int, *, causal: bool) -> float:
    """Query-key pairs of a chunk of q queries after c cached keys: q*c + q*(q+1)/2 causal,
    q*(c+q) non-causal (docs/model.md)."""
    q, c = float(query_tokens), float(cached_tokens)
    if causal:
        return q * c + q * (q + 1.0) / 2.0
    return q * (c + q)


class OpCoefficients(NamedTuple):
    """Per-GPU work of one forward step per unit of its driver, summed over all layers.

    Linear op classes are per token through the layer (plus a weight read once per step); the
    LM head is per sequence; prefill attention is per query-key pair (FLOPs), per new token
    (Q and O streamed, K and V written to the cache) and per KV token streamed; decode attention
    is per context token and per sequence. Units: FLOP and bytes.

    Immutable like the engine's frozen dataclasses, but a NamedTuple: every `StepCostModel`
    builds one (the service one per request, `assess_tp` one per candidate), and a 30-field
    frozen dataclass takes about 2 us to build where a NamedTuple takes 0.3 us.
    """

    tp: int
    kv_heads_per_gpu: float
    # query, key and value projections
    qkv_flops_per_token: float
    qkv_weight_bytes: float
    qkv_activation_bytes_per_token: float
    # attention output projection
    o_flops_per_token: float
    o_weight_bytes: float
    o_activation_bytes_per_token: float
    # dense FFN layers (all layers of a dense model, the leading dense layers of an MoE)
    ffn_flops_per_token: float
    ffn_weight_bytes: float
    ffn_activation_bytes_per_token: float
    # MoE router
    router_flops_per_token: float
    router_weight_bytes: float
    router_activation_bytes_per_token: float
    # MoE experts: routed experts are read only when some token picks them
    expert_flops_per_token: float
    routed_expert_weight_bytes: float
    """One routed expert's weights summed over the MoE layers (per GPU)."""
    shared_expert_weight_bytes: float
    expert_activation_bytes_per_token: float
    num_experts: int
    experts_per_token: int
    expert_shards: int
    """GPUs the experts are spread over (tp x dp): their per-GPU coefficients process the
    whole replica's tokens."""
    moe_layers: int
    # LM head
    lm_head_flops_per_sequence: float
    lm_head_weight_bytes: float
    lm_head_activation_bytes_per_sequence: float
    # attention
    attention_flops_per_pair: float
    attention_qo_bytes_per_token: float
    """Q read and O written, per query token."""
    kv_bytes_per_token: float
    """K and V of one token in the cache (per GPU, all layers), read or written."""
    decode_attention_flops_per_token: float
    """Decode attention FLOPs per cached token: `attention_flops_per_pair`, or with MLA's
    absorbed weights 2 * H * (latent + rope) + 2 * H * latent per layer."""
    decode_qo_bytes_per_sequence: float
    """Q read and O written by one decoding sequence (MLA: in the latent's width)."""
    prefill_expand_flops_per_token: float
    """MLA prefill: decompressing one attended token's latent into every head's key and value
    (kv_b_proj, 2 * latent * H * (nope + v) per layer); 0 without MLA."""
    decode_absorb_flops_per_sequence: float
    """MLA decode: the query's and output's trips through the absorbed kv_b weights (2 * H *
    nope * latent + 2 * H * latent * v per layer); 0 without MLA."""
    window_share: float
    """The fraction of layers that attend within `window_tokens`; 0 without windows."""
    window_tokens: int
    # tensor-parallel communication
    allreduce_bytes_per_token: float
    """Activation bytes all-reduced within the TP group per token per step: after attention
    and after each dense FFN, and after each MoE layer unless its experts span more GPUs (dp or
    ep: `app.engine.step_cost` times those exchanges)."""
    allreduces_per_step: int
    # norms, residual adds and activations: memory-bound kernels of their own
    elementwise_kernels: float
    """Kernels per step on one GPU outside the GEMMs and attention: two fused residual-add +
    RMSNorm per layer, the gated activation of each dense FFN and shared expert, MLA's two
    latent norms, the router's top-k of each MoE layer."""
    elementwise_bytes_per_token: float
    """What those kernels read and write per token through the layer."""
    linear_flops_per_token: float
    """All linear FLOPs per token (QKV, O, FFN, router, experts), excluding the LM head."""


def op_coefficients(
    model: ModelSpec, deployment: Deployment, attention_dtype: DType
) -> OpCoefficients:
    """Per-GPU coefficients of `model` laid out as `deployment` (see `OpCoefficients`).

    Quantised weight formats apply to the decoder's linear layers; the embedding, LM head,
    norms and MoE router stay in the activation format, as vLLM's FP8/AWQ/GPTQ checkpoints keep
    them. Raises `SpecError("tp", ...)` when tp cannot split the model.
    """
    tp = deployment.tp
    validate_layout(model, deployment)
    if model.mla is not None:
        return _mla_coefficients(model, deployment, attention_dtype)
    d, h, layers = model.hidden_size, model.head_dim, model.num_layers
    weight_b = BYTES_PER_ELEMENT[deployment.weight_dtype]
    act_b = BYTES_PER_ELEMENT[deployment.activation_dtype]
    qo_b = BYTES_PER_ELEMENT[attention_dtype]
    heads_gpu = model.num_attention_heads / tp
    kv_heads_gpu = kv_heads_per_gpu(model, tp)
    moe = model.moe
    dense_layers = layers if moe is None else moe.num_dense_layers
    moe_layers = layers - dense_layers
    matrices = model.ffn_type.matrices

    # Q, K, V projections: d -> (H + 2K) h outputs per token; 2 FLOPs per multiply-add.
    qkv_width = (heads_gpu + 2 * kv_heads_gpu) * h
    qkv_bias_bytes = qkv_width * act_b if model.attention_bias else 0.0
    # O projection: H h -> d.
    o_width = heads_gpu * h
    # Dense FFN: matrices * d * f weights, sharded by column/row across tp.
    ffn_width = model.intermediate_size / tp
    # Read d, write the (m-1) f gate/up outputs, read f into the down projection, write d.
    ffn_activation = 2 * d + matrices * ffn_width

    shards = deployment.expert_shards
    if moe is not None:
        expert_b = BYTES_PER_ELEMENT[expert_dtype_for(model, deployment)]
        expert_width = moe.expert_intermediate_size / shards
        shared_width = moe.num_shared_experts * moe.shared_width / shards
        routed_per_token = moe.experts_per_token * matrices * d * expert_width
        shared_per_token = matrices * d * shared_width
        expert_flops = 2.0 * (routed_per_token + shared_per_token) * moe_layers
        routed_expert_bytes = matrices * d * expert_width * expert_b * moe_layers
        shared_bytes = matrices * d * shared_width * expert_b * moe_layers
        expert_activation = (
            (
                (moe.experts_per_token + moe.num_shared_experts) * 2 * d
                + matrices * (moe.experts_per_token * expert_width + shared_width)
            )
            * act_b
            * moe_layers
        )
        router_flops = 2.0 * d * moe.num_experts / tp * moe_layers
        router_bytes = d * moe.num_experts / tp * act_b * moe_layers
        router_activation = (d + moe.num_experts / tp) * act_b * moe_layers
        num_experts, top_k = moe.num_experts, moe.experts_per_token
    else:
        expert_flops = routed_expert_bytes = shared_bytes = expert_activation = 0.0
        router_flops = router_bytes = router_activation = 0.0
        num_experts, top_k = 1, 1

    qkv_flops = 2.0 * d * qkv_width * layers
    o_flops = 2.0 * o_width * d * layers
    ffn_flops = 2.0 * matrices * d * ffn_width * dense_layers
    # Per layer two fused residual-add + RMSNorm kernels (read x and the residual, write
    # both: 4 d), as vLLM's, SGLang's and TensorRT-LLM's decoder layers run them; the gated
    # (or plain) activation of a dense FFN reads the up projection's outputs and writes
    # f / tp (matrices x f / tp in all); an MoE layer's router top-k and its shared experts'
    # activation (the routed experts' is fused into the MoE kernel).
    shared_activation = matrices * shared_width if moe is not None else 0.0
    elementwise_kernels = (
        2.0 * layers + dense_layers + moe_layers * (1.0 + (1.0 if shared_activation else 0.0))
    )
    elementwise_bytes = (
        8.0 * d * layers
        + matrices * ffn_width * dense_layers
        + (num_experts / tp + shared_activation) * moe_layers
    ) * act_b
    # Megatron TP: one all-reduce of d per token after attention and one after each FFN; an
    # MoE layer whose experts span dp or ep exchanges tokens instead (step_cost).
    tp_moe_layers = moe_layers if shards == tp and deployment.ep == 1 else 0
    allreduces = layers + dense_layers + tp_moe_layers if tp > 1 else 0
    return OpCoefficients(
        tp=tp,
        kv_heads_per_gpu=kv_heads_gpu,
        qkv_flops_per_token=qkv_flops,
        qkv_weight_bytes=(d * qkv_width * weight_b + qkv_bias_bytes) * layers,
        qkv_activation_bytes_per_token=(d + qkv_width) * act_b * layers,
        o_flops_per_token=o_flops,
        o_weight_bytes=o_width * d * weight_b * layers,
        o_activation_bytes_per_token=(o_width + d) * act_b * layers,
        ffn_flops_per_token=ffn_flops,
        ffn_weight_bytes=matrices * d * ffn_width * weight_b * dense_layers,
        ffn_activation_bytes_per_token=ffn_activation * act_b * dense_layers,
        router_flops_per_token=router_flops,
        router_weight_bytes=router_bytes,
        router_activation_bytes_per_token=router_activation,
        expert_flops_per_token=expert_flops,
        routed_expert_weight_bytes=routed_expert_bytes,
        shared_expert_weight_bytes=shared_bytes,
        expert_activation_bytes_per_token=expert_activation,
        num_experts=num_experts,
        experts_per_token=top_k,
        expert_shards=shards,
        moe_layers=moe_layers,
        # LM head: d -> V/tp (vocab-parallel), 2 d V FLOPs per sequence; logits in fp32.
        lm_head_flops_per_sequence=2.0 * d * model.vocab_size / tp,
        lm_head_weight_bytes=d * model.vocab_size / tp * act_b,
        lm_head_activation_bytes_per_sequence=d * act_b + model.vocab_size / tp * LOGIT_BYTES,
        # Attention: QK^T and AV, 2 * 2 * h FLOPs per head per query-key pair.
        attention_flops_per_pair=4.0 * heads_gpu * h * layers,
        attention_qo_bytes_per_token=2.0 * heads_gpu * h * qo_b * layers,
        kv_bytes_per_token=_kv_bytes_per_token(model, kv_heads_gpu, deployment.kv_dtype),
        decode_attention_flops_per_token=4.0 * heads_gpu * h * layers,
        decode_qo_bytes_per_sequence=2.0 * heads_gpu * h * qo_b * layers,
        prefill_expand_flops_per_token=0.0,
        decode_absorb_flops_per_sequence=0.0,
        window_share=model.window_layers / layers,
        window_tokens=model.sliding_window,
        allreduce_bytes_per_token=allreduces * d * act_b,
        allreduces_per_step=allreduces,
        elementwise_kernels=elementwise_kernels,
        elementwise_bytes_per_token=elementwise_bytes,
        linear_flops_per_token=qkv_flops + o_flops + ffn_flops + router_flops + expert_flops,
    )


def _mla_coefficients(
    model: ModelSpec, deployment: Deployment, attention_dtype: DType
) -> OpCoefficients:
    """`op_coefficients` of a model with multi-head latent attention, as vLLM and SGLang run it.

    Prefill decompresses: kv_b_proj expands every attended token's latent into per-head keys
    (nope) and values, and attention runs as MHA over H heads of qk = nope + rope (keys) and v
    (values). Decode absorbs kv_b into the query and the output (DeepSeek-V2 section 2.1.3):
    each head attends over the cached latent directly, as MQA with keys of latent + rope and
    values of latent, so a cached token costs 2 * H * (latent + rope) + 2 * H * latent FLOPs and
    is read once for all heads. Under tensor parallelism the heads split and q_a/kv_a_proj and
    the latent cache are replicated on every GPU (vLLM's ReplicatedLinear): the cache does not
    shrink with tp, which is why DeepSeek deployments run attention data-parallel instead.
    The FFN, MoE and LM head are as in `op_coefficients`."""
    mla = model.mla
    assert mla is not None
    base = op_coefficients(replace(model, mla=None), deployment, attention_dtype)
    tp, d, layers = deployment.tp, model.hidden_size, model.num_layers
    weight_b = BYTES_PER_ELEMENT[deployment.weight_dtype]
    act_b = BYTES_PER_ELEMENT[deployment.activation_dtype]
    qo_b = BYTES_PER_ELEMENT[attention_dtype]
    heads = model.num_attention_heads / tp
    latent, rope, nope, v = (
        mla.kv_lora_rank,
        mla.qk_rope_head_dim,
        mla.qk_nope_head_dim,
        mla.v_head_dim,
    )
    qk = nope + rope
    if mla.q_lora_rank:
        q_weights = d * mla.q_lora_rank + mla.q_lora_rank * heads * qk  # q_a replicated, q_b split
        q_outputs = mla.q_lora_rank + heads * qk
    else:
        q_weights, q_outputs = d * heads * qk, heads * qk
    kv_a = d * (latent + rope)
    kv_b = latent * heads * (nope + v)
    qkv_flops = 2.0 * (q_weights + kv_a) * layers
    o_width = heads * v
    o_flops = 2.0 * o_width * d * layers
    return base._replace(
        kv_heads_per_gpu=heads,
        qkv_flops_per_token=qkv_flops,
        qkv_weight_bytes=(q_weights + kv_a + kv_b) * weight_b * layers,
        qkv_activation_bytes_per_token=(d + q_outputs + latent + rope) * act_b * layers,
        o_flops_per_token=o_flops,
        o_weight_bytes=o_width * d * weight_b * layers,
        o_activation_bytes_per_token=(o_width + d) * act_b * layers,
        attention_flops_per_pair=2.0 * heads * (qk + v) * layers,
        attention_qo_bytes_per_token=heads * (qk + v) * qo_b * layers,
        kv_bytes_per_token=_kv_bytes_per_token(model, heads, deployment.kv_dtype),
        decode_attention_flops_per_token=2.0 * heads * (2 * latent + rope) * layers,
        decode_qo_bytes_per_sequence=heads * (2 * latent + rope) * qo_b * layers,
        prefill_expand_flops_per_token=2.0 * latent * heads * (nope + v) * layers,
        decode_absorb_flops_per_sequence=2.0 * heads * latent * (nope + v) * layers,
        # q_a_layernorm (with a query rank) and kv_a_layernorm on the latents, read and written.
        elementwise_kernels=base.elementwise_kernels + (2 if mla.q_lora_rank else 1) * layers,
        elementwise_bytes_per_token=base.elementwise_bytes_per_token
        + 2.0 * (mla.q_lora_rank + latent) * act_b * layers,
        linear_flops_per_token=base.linear_flops_per_token
        - base.qkv_flops_per_token
        - base.o_flops_per_token
        + qkv_flops
        + o_flops,
    )


def window_bounded(c: OpCoefficients, load: StepLoad) -> tuple[float, float, float]:
    """`bounded_by_window` of a step's load: its attention pairs, prefill KV reads and decode
    context tokens."""
    return bounded_by_window(
        c,
        load.prefill_tokens,
        load.prefill_chunks,
        load.prefill_attention_pairs,
        load.prefill_kv_tokens,
        load.decode_seqs,
        load.decode_context_tokens,
    )


def bounded_by_window(  # noqa: PLR0917 - positional: StepLoad's fields, in step loops
    c: OpCoefficients,
    prefill_tokens: float,
    prefill_chunks: float,
    pairs: float,
    kv_tokens: float,
    decode_seqs: float,
    context: float,
) -> tuple[float, float, float]:
    """A step's attention pairs, prefill KV reads and decode context tokens with the windowed
    layers' share bounded by the window: a query sees at most W keys, a chunk reads at most W
    cached tokens and a decode at most W. From aggregates the bound is min(sum, count * W),
    which equals the sum of the per-sequence bounds when every sequence is on the same side of
    the window and exceeds it otherwise: never less work than the engine does."""
    share = c.window_share
    if not share:
        return pairs, kv_tokens, context
    window = c.window_tokens
    keep = 1.0 - share
    return (
        pairs * keep + min(pairs, prefill_tokens * window) * share,
        kv_tokens * keep + min(kv_tokens, prefill_chunks * window) * share,
        context * keep + min(context, decode_seqs * window) * share,
    )


@dataclass(frozen=True, slots=True)
class OpCount:
    """The work of one op class in a step (or a run of steps), whole deployment."""

    op_class: OpClass
    flops: float = 0.0
    weight_bytes: float = 0.0
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0
    activation_bytes: float = 0.0

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes + self.activation_bytes


@dataclass(frozen=True, slots=True)
class StepCount:
    """Per-op-class counts of a step, summed over all GPUs of the deployment."""

    ops: tuple[OpCount, ...]

    def op(self, op_class: OpClass) -> OpCount:
        """The count of `op_class`; zeros when the step has none."""
        for op in self.ops:
            if op.op_class is op_class:
                return op
        return OpCount(op_class)

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def linear_flops(self) -> float:
        """QKV, O, FFN, router and expert FLOPs (article A's 'linear term', LM head excluded)."""
        return sum(op.flops for op in self.ops if op.op_class in LINEAR_OP_CLASSES)

    @property
    def attention_flops(self) -> float:
        return sum(op.flops for op in self.ops if op.op_class in ATTENTION_OP_CLASSES)

    @property
    def lm_head_flops(self) -> float:
        return self.op(OpClass.LM_HEAD).flops

    @property
    def weight_bytes(self) -> float:
        return sum(op.weight_bytes for op in self.ops)

    @property
    def kv_bytes(self) -> float:
        """KV-cache bytes read and written."""
        return sum(op.kv_read_bytes + op.kv_write_bytes for op in self.ops)

    @property
    def activation_bytes(self) -> float:
        return sum(op.activation_bytes for op in self.ops)

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes + self.activation_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOP per byte moved to or from memory."""
        return self.flops / self.bytes if self.bytes > 0 else 0.0


@dataclass(frozen=True, slots=True)
class CountTotals:
    """A step's counts summed by kind, whole deployment: what an estimate reports, without the
    per-op-class records (`count_totals`: the same floats as `count_step`'s `StepCount`)."""

    flops: float
    linear_flops: float
    """QKV, O, FFN, router and expert FLOPs."""
    router_flops: float
    """The MoE router's share of `linear_flops` (it computes in the activation format)."""
    attention_flops: float
    lm_head_flops: float
    weight_bytes: float
    kv_bytes: float
    """KV-cache bytes read and written."""
    activation_bytes: float

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes + self.activation_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOP per byte moved to or from memory."""
        moved = self.bytes
        return self.flops / moved if moved > 0 else 0.0


_OpRow = tuple[OpClass, float, float, float, float, float]
"""An `OpCount`'s fields in order as a plain tuple: the estimates sum these without building
the records (a frozen dataclass costs a microsecond to build)."""


def _totals(rows: tuple[_OpRow, ...]) -> CountTotals:
    """`_op_rows`' rows summed by kind: the same floats as `StepCount`'s properties, which
    sum its ops in this order (the zeros they add change nothing)."""
    qkv, o, ffn, router, experts, prefill, decode, lm_head = rows
    linear = qkv[1] + o[1] + ffn[1] + router[1] + experts[1]
    return CountTotals(
        flops=linear + prefill[1] + decode[1] + lm_head[1],
        linear_flops=linear,
        router_flops=router[1],
        attention_flops=prefill[1] + decode[1],
        lm_head_flops=lm_head[1],
        # Attention reads no weights; only attention touches the KV cache.
        weight_bytes=qkv[2] + o[2] + ffn[2] + router[2] + experts[2] + lm_head[2],
        kv_bytes=(prefill[3] + prefill[4]) + (decode[3] + decode[4]),
        activation_bytes=qkv[5]
        + o[5]
        + ffn[5]
        + router[5]
        + experts[5]
        + prefill[5]
        + decode[5]
        + lm_head[5],
    )


def count_step(coefficients: OpCoefficients, load: StepLoad, *, steps: int = 1) -> StepCount:
    """Counts of `load`, whole deployment (per-GPU work times tp).

    `steps` > 1 means `load` is the sum of that many steps with the same number of tokens
    each (the full chunks of a chunked prefill): FLOPs, KV and activation bytes add up, and the
    weights are read once per step.
    """
    return StepCount(tuple(OpCount(*row) for row in _op_rows(coefficients, load, steps)))


def count_totals(
    coefficients: OpCoefficients, load: StepLoad, *, steps: int = 1, then: StepLoad | None = None
) -> CountTotals:
    """`count_step(coefficients, load, steps=steps)` summed by kind, plus the counts of one more
    step `then` when given (a chunked prefill's remainder chunk), op class by op class."""
    rows = _op_rows(coefficients, load, steps)
    if then is not None:
        rows = tuple(
            (a[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4], a[5] + b[5])
            for a, b in zip(rows, _op_rows(coefficients, then, 1), strict=True)
        )
    return _totals(rows)


def _op_rows(c: OpCoefficients, load: StepLoad, steps: int) -> tuple[_OpRow, ...]:
    """`count_step`'s op counts as `_OpRow`s, in `OpClass` order."""
    if steps < 1:
        raise SpecError("steps", f"must be at least 1, got {steps}")
    tokens = float(load.prefill_tokens + load.decode_seqs)
    sequences = float(load.prefill_chunks + load.decode_seqs)
    reads = float(steps) if tokens > 0 else 0.0
    tokens_per_step = tokens / steps
    distinct = expected_distinct_experts(c.num_experts, c.experts_per_token, tokens_per_step)
    expert_weights = (
        (distinct * c.routed_expert_weight_bytes + c.shared_expert_weight_bytes) * reads
        if c.expert_flops_per_token > 0
        else 0.0
    )
    # Whole deployment: the per-GPU work (coefficients times the load) times tp.
    scale = float(c.tp)
    shards = c.expert_shards
    pairs, kv_tokens, context = window_bounded(c, load)
    attended = kv_tokens  # the cached prefix and the chunk itself
    prefill_tokens, decode_seqs = load.prefill_tokens, load.decode_seqs
    kv_per_token = c.kv_bytes_per_token
    # Each row: op class, FLOPs, weight bytes, KV bytes read, KV bytes written, activation bytes.
    return (
        (
            OpClass.QKV_PROJ,
            tokens * c.qkv_flops_per_token * scale,
            reads * c.qkv_weight_bytes * scale,
            0.0,
            0.0,
            tokens * c.qkv_activation_bytes_per_token * scale,
        ),
        (
            OpClass.O_PROJ,
            tokens * c.o_flops_per_token * scale,
            reads * c.o_weight_bytes * scale,
            0.0,
            0.0,
            tokens * c.o_activation_bytes_per_token * scale,
        ),
        (
            OpClass.FFN,
            tokens * c.ffn_flops_per_token * scale,
            reads * c.ffn_weight_bytes * scale,
            0.0,
            0.0,
            tokens * c.ffn_activation_bytes_per_token * scale,
        ),
        (
            OpClass.MOE_ROUTER,
            tokens * c.router_flops_per_token * scale,
            reads * c.router_weight_bytes * scale,
            0.0,
            0.0,
            tokens * c.router_activation_bytes_per_token * scale,
        ),
        (
            OpClass.MOE_EXPERTS,
            tokens * c.expert_flops_per_token * shards,
            expert_weights * shards,
            0.0,
            0.0,
            tokens * c.expert_activation_bytes_per_token * shards,
        ),
        (
            OpClass.PREFILL_ATTENTION,
            (pairs * c.attention_flops_per_pair + attended * c.prefill_expand_flops_per_token)
            * scale,
            0.0,
            kv_tokens * kv_per_token * scale,
            prefill_tokens * kv_per_token * scale,
            prefill_tokens * c.attention_qo_bytes_per_token * scale,
        ),
        (
            OpClass.DECODE_ATTENTION,
            (
                context * c.decode_attention_flops_per_token
                + decode_seqs * c.decode_absorb_flops_per_sequence
            )
            * scale,
            0.0,
            context * kv_per_token * scale,
            decode_seqs * kv_per_token * scale,
            decode_seqs * c.decode_qo_bytes_per_sequence * scale,
        ),
        (
            OpClass.LM_HEAD,
            sequences * c.lm_head_flops_per_sequence * scale,
            (reads if sequences > 0 else 0.0) * c.lm_head_weight_bytes * scale,
            0.0,
            0.0,
            sequences * c.lm_head_activation_bytes_per_sequence * scale,
        ),
    )
