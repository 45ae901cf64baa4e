"""Parameter counts of a decoder-only transformer, by component, from its `ModelSpec` alone.

The counts are those of the weight tensors a Hugging Face checkpoint stores for the Llama family
and its relatives (Mistral, Mixtral, Qwen2/3, Gemma 2): token embedding, per-layer attention and
FFN projections, RMSNorm weights, final norm and LM head. They reproduce the published totals of
Llama 2 and 3 exactly; the few weights `ModelSpec` does not describe (Qwen3's per-head q/k norms,
Gemma 2's extra pre/post-FFN norms, an O-projection bias) are under 0.01 % of any catalog model.

Everything is closed-form integer arithmetic over the spec, with no per-layer loop, because the
service recounts on every catalog write.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.specs import ModelSpec

__all__ = ["ParamCount", "count_params"]


@dataclass(frozen=True, slots=True)
class ParamCount:
    """Parameters (weights, a count, not bytes) of one model, by component.

    `attention` is `attention_qo + attention_kv`; `ffn` holds every FFN weight,
    `dense_ffn + router + experts`: dense FFN layers, MoE routers, routed and shared experts.
    The split is the one memory needs: quantised formats store the attention projections, dense
    FFN and experts; K/V projections are replicated once tensor parallelism exceeds the KV heads.
    `lm_head` is 0 when the model ties its output projection to the input embedding, so that
    `total` counts the shared matrix once.

    `active` is what one token passes through: only `experts_per_token` of the routed experts in
    each MoE layer; shared experts and routers always count. For a dense model it equals `total`.

    `non_embedding` and `active_non_embedding` are the weights that take part in matrix
    multiplies (the input embedding is a table look-up): everything but the input embedding, with
    the LM head counted even when tied, because the tied matrix still does the output matmul. For a
    tied model, `embedding + non_embedding` therefore exceeds `total` by `vocab_size * hidden_size`.
    Forward FLOPs per token are about `2 * active_non_embedding` plus attention.
    """

    embedding: int
    attention: int
    attention_qo: int
    """Q and O projections, with the Q biases."""
    attention_kv: int
    """K and V projections, with their biases."""
    ffn: int
    dense_ffn: int
    """FFN layers of `intermediate_size`: every layer of a dense model, the leading dense layers
    of an MoE."""
    router: int
    """MoE routers."""
    experts: int
    """Routed and shared experts of the MoE layers."""
    norms: int
    lm_head: int
    mtp: int
    """Multi-token-prediction layers (`ModelSpec.mtp_layers`), outside `total`: each is one MoE
    decoder layer, a 2d x d projection and three norms, sharing the model's embedding and LM head
    (DeepSeek-V3's `model.layers.61`)."""
    total: int
    active: int
    non_embedding: int
    active_non_embedding: int


def count_params(model: ModelSpec) -> ParamCount:
    """Count `model`'s parameters by component; see `ParamCount` for what each field holds."""
    d = model.hidden_size
    layers = model.num_layers
    vocab = model.vocab_size

    # Token embedding table, vocab x hidden (nn.Embedding(vocab_size, hidden_size)).
    embedding = vocab * d
    attention_qo, attention_kv, attention_norms = _attention(model)
    attention_qo *= layers
    attention_kv *= layers

    # Dense FFN of `intermediate_size`: d x f per matrix (gate, up, down or up, down).
    matrices = model.ffn_type.matrices
    moe = model.moe
    if moe is None:
        dense_ffn = layers * matrices * d * model.intermediate_size
        router = experts = active_experts = 0
    else:
        moe_layers = layers - moe.num_dense_layers
        dense_ffn = moe.num_dense_layers * matrices * d * model.intermediate_size
        # Router: a d x E linear that scores every expert (Mixtral `gate`, no bias).
        router = moe_layers * d * moe.num_experts
        # One expert is a gated/plain FFN of `expert_intermediate_size` (Fedus et al. 2021).
        expert = matrices * d * moe.expert_intermediate_size
        # Always-on shared experts (DeepSeekMoE, Dai et al. 2024), of `shared_width` each.
        shared = moe_layers * moe.num_shared_experts * matrices * d * moe.shared_width
        experts = shared + moe_layers * moe.num_experts * expert
        # A token passes through only its top-k routed experts in each MoE layer.
        active_experts = shared + moe_layers * moe.experts_per_token * expert
    attention = attention_qo + attention_kv
    ffn = dense_ffn + router + experts
    inactive = experts - active_experts

    # RMSNorm weights of d: before attention and before the FFN in each layer, plus the final norm
    # (and MLA's norms inside the latent bottlenecks).
    norms = layers * (2 * d + attention_norms) + d
    # Output projection hidden -> vocab; stored only when not tied to the embedding.
    output_matmul = vocab * d
    lm_head = 0 if model.tie_word_embeddings else output_matmul

    mtp = 0
    if model.mtp_layers:
        layer_attention = sum(_attention(model))
        if moe is None:
            layer_ffn = matrices * d * model.intermediate_size
        else:
            layer_ffn = (moe.num_experts + moe.num_shared_experts) * matrices * d * (
                moe.expert_intermediate_size
            ) + d * moe.num_experts
        mtp = model.mtp_layers * (layer_attention + layer_ffn + 2 * d + 2 * d * d + 3 * d)

    total = embedding + attention + ffn + norms + lm_head
    non_embedding = attention + ffn + norms + output_matmul
    return ParamCount(
        embedding=embedding,
        attention=attention,
        attention_qo=attention_qo,
        attention_kv=attention_kv,
        ffn=ffn,
        dense_ffn=dense_ffn,
        router=router,
        experts=experts,
        norms=norms,
        lm_head=lm_head,
        mtp=mtp,
        total=total,
        active=total - inactive,
        non_embedding=non_embedding,
        active_non_embedding=non_embedding - inactive,
    )


def _attention(model: ModelSpec) -> tuple[int, int, int]:
    """One layer's attention weights: (Q and O, K and V, norms inside the block)."""
    d = model.hidden_size
    heads = model.num_attention_heads
    sinks = heads if model.attention_sinks else 0  # gpt-oss: one learned logit per head
    mla = model.mla
    if mla is not None:
        # DeepSeek-V3 `DeepseekV3Attention`: q_a (d -> q_lora), its norm, q_b (q_lora -> H qk),
        # or q_proj (d -> H qk); kv_a_proj_with_mqa (d -> latent + rope), its norm, kv_b
        # (latent -> H (nope + v)); o_proj (H v -> d).
        if mla.q_lora_rank:
            q = d * mla.q_lora_rank + mla.q_lora_rank * heads * mla.qk_head_dim
        else:
            q = d * heads * mla.qk_head_dim
        o = heads * mla.v_head_dim * d
        kv = d * mla.latent_width + mla.kv_lora_rank * heads * (
            mla.qk_nope_head_dim + mla.v_head_dim
        )
        return q + o + sinks, kv, mla.q_lora_rank + mla.kv_lora_rank
    # Q and O: hidden -> H*h and back; K and V: hidden -> K*h each (GQA, Ainslie et al. 2023).
    qo = 2 * d * model.q_width + sinks
    kv = 2 * d * model.kv_width
    if model.attention_bias:
        # Q/K/V projection biases, one per output feature (Qwen2 `Qwen2Attention`, bias=True).
        qo += model.q_width
        kv += 2 * model.kv_width
    return qo, kv, 0
