"""Tensor-parallel feasibility: which TP degrees can split the model, which fit in memory, what
each costs in latency and communication, and what to do when tp would have to exceed the KV heads.

A TP degree is feasible when it splits the query heads, splits or replicates the KV heads evenly
and splits the FFN width (the constraints vLLM and TensorRT-LLM enforce). It fits when weights,
the activation reserve and `batch_size` sequences of `context_tokens` fit in the usable memory of
each GPU. Beyond K GPUs each KV head is replicated tp/K times (article C).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import NamedTuple

from app.engine.counting import kv_slots, validate_layout
from app.engine.memory import (
    DEFAULT_BLOCK_TOKENS,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    MemoryPlan,
    kv_tokens_per_sequence,
    memory_plan,
    weight_bytes_per_gpu,
)
from app.engine.params import ParamCount, count_params
from app.engine.specs import (
    IDEAL_EFFICIENCY,
    Deployment,
    Efficiency,
    GpuSpec,
    ModelSpec,
    SpecError,
    positive,
    within_context,
)
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from app.engine.units import GB, MS_PER_S

__all__ = [
    "DEFAULT_TP_CANDIDATES",
    "Alternative",
    "AlternativeKind",
    "TpCandidate",
    "TpFeasibility",
    "assess_tp",
]

DEFAULT_TP_CANDIDATES = (1, 2, 4, 8, 16)


class AlternativeKind(StrEnum):
    ATTENTION_DATA_PARALLEL = "attention_data_parallel"
    CONTEXT_PARALLEL = "context_parallel"
    PIPELINE_PARALLEL = "pipeline_parallel"
    EXPERT_PARALLEL = "expert_parallel"


@dataclass(frozen=True, slots=True)
class Alternative:
    kind: AlternativeKind
    why: str


class TpCandidate(NamedTuple):
    """One TP degree. Byte figures are per GPU; times are None when tp cannot split the model.

    A named tuple rather than a frozen dataclass: as immutable, and built in a fifth of the time
    (a frozen dataclass sets its 18 fields one `object.__setattr__` at a time, and TP
    feasibility builds one per candidate on every request)."""

    tp: int
    splits_evenly: bool
    """tp splits the query heads, splits or replicates the KV heads, and splits the FFN."""
    kv_head_replication: float
    """tp/K when tp exceeds the KV heads, else 1."""
    fits_memory: bool
    weights_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    kv_pool_bytes_per_gpu: float
    max_batch_by_memory: int
    ttft_ms: float | None
    tpot_ms: float | None
    communication_share_prefill: float | None
    communication_share_decode: float | None
    meets_latency_goal: bool | None
    """None when no goal was given or tp is infeasible."""
    reasons: tuple[str, ...]
    pp: int = 1
    dp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        """GPUs of one replica: tp x dp x pp."""
        return self.tp * self.dp * self.pp

    @property
    def feasible(self) -> bool:
        """Deployable: it splits evenly and fits in memory."""
        return self.splits_evenly and self.fits_memory


@dataclass(frozen=True, slots=True)
class TpFeasibility:
    candidates: tuple[TpCandidate, ...]
    recommended_tp: int | None
    recommendation: str
    alternatives: tuple[Alternative, ...]
    warnings: tuple[str, ...] = ()


def _infeasible(deployment: Deployment, model: ModelSpec, reason: str) -> TpCandidate:
    tp = deployment.tp
    replication = tp / model.num_kv_heads if tp > model.num_kv_heads else 1.0
    return TpCandidate(
        tp=tp,
        pp=deployment.pp,
        dp=deployment.dp,
        ep=deployment.ep,
        splits_evenly=False,
        kv_head_replication=replication,
        fits_memory=False,
        weights_bytes_per_gpu=0.0,
        kv_bytes_per_token_per_gpu=0.0,
        kv_pool_bytes_per_gpu=0.0,
        max_batch_by_memory=0,
        ttft_ms=None,
        tpot_ms=None,
        communication_share_prefill=None,
        communication_share_decode=None,
        meets_latency_goal=None,
        reasons=(reason,),
    )


@dataclass(frozen=True, slots=True)
class _Layout:
    """What one layout fixes whatever the workload: its memory plan and cost model, and the
    reasons that depend on them alone (`_layout`)."""

    plan: MemoryPlan
    cost: StepCostModel
    replication: float
    weights_reason: str | None
    """Why the weights do not fit; None when they do."""
    reasons: tuple[str, ...]
    """Said after the memory reason: KV-head replication, MLA, and the layout's own."""


def _layout(
    model: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment,
    efficiency: Efficiency,
    *,
    params: ParamCount,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
) -> _Layout | TpCandidate:
    """A layout's workload-free part, or its infeasible candidate when it cannot split the
    model."""
    try:
        validate_layout(model, deployment)
    except SpecError as error:
        return _infeasible(deployment, model, error.message)
    plan = memory_plan(
        model,
        gpu,
        deployment,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        params=params,
    )
    tp, kv_heads = deployment.tp, model.num_kv_heads
    replication = tp / kv_heads if tp > kv_heads else 1.0
    weights_reason = None
    if not plan.fits_weights:
        weights_reason = (
            f"weights do not fit: {plan.weights_bytes / GB:.1f} GB of weights and "
            f"{plan.activation_reserve_bytes / GB:.1f} GB of activations per GPU exceed the "
            f"{plan.usable_bytes / GB:.1f} GB usable"
        )
    reasons: list[str] = []
    if replication > 1:
        extra = plan.kv_bytes_per_token * (1.0 - 1.0 / replication)
        reasons.append(
            f"tp {tp} exceeds the {kv_heads} KV heads: each KV head is replicated "
            f"{replication:g} times, so every GPU stores and reads {replication:g}x the KV "
            f"cache it would with tp {kv_heads} ({extra:.0f} extra bytes per token per GPU)"
        )
    if model.mla is not None and tp > 1:
        reasons.append(
            f"MLA: the latent KV cache ({plan.kv_bytes_per_token:.0f} bytes per token) is "
            f"the same on every GPU at any tp (tp splits heads; the latent belongs to none), "
            f"so tp {tp} holds {tp}x the cache of one copy; attention data parallelism (dp) "
            "splits the sequences instead and each GPU caches only its own"
        )
    reasons.extend(layout_reasons(model, deployment))
    cost = StepCostModel(model, gpu, deployment, efficiency)
    return _Layout(plan, cost, replication, weights_reason, tuple(reasons))


def _candidate(
    deployment: Deployment,
    layout: _Layout,
    *,
    prefill: StepLoad,
    decode: StepLoad,
    context_tokens: int,
    kv_tokens: float,
    batch_size: int,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
) -> TpCandidate:
    """One layout that splits the model, for this workload: the `prefill` and `decode` steps
    whose times are TTFT and TPOT, and `kv_tokens`, the cache slots one sequence of
    `context_tokens` takes (`kv_tokens_per_sequence`)."""
    plan, cost = layout.plan, layout.cost
    per_sequence = kv_tokens * plan.kv_bytes_per_token
    # Each attention data-parallel rank caches its own share of the batch.
    per_rank = -(-batch_size // deployment.dp)
    needed = plan.weights_bytes + plan.activation_reserve_bytes + per_rank * per_sequence
    fits = needed <= plan.usable_bytes
    per_pool = max(0, math.floor(plan.kv_pool_bytes / per_sequence))
    if layout.weights_reason is not None:
        memory_reason = layout.weights_reason
    elif not fits:
        memory_reason = (
            f"{batch_size} sequence(s) of {context_tokens} tokens need "
            f"{per_rank * per_sequence / GB:.2f} GB of KV cache per GPU; only "
            f"{plan.kv_pool_bytes / GB:.2f} GB is left after weights and activations"
        )
    else:
        memory_reason = (
            f"fits: {plan.weights_bytes / GB:.1f} GB of weights per GPU leaves a "
            f"{plan.kv_pool_bytes / GB:.1f} GB KV pool ({per_pool} sequences of {context_tokens} "
            "tokens)"
        )
    step_seconds = cost.step_seconds
    prefill_s, decode_s = step_seconds(*prefill.fields()), step_seconds(*decode.fields())
    ttft_ms, tpot_ms = prefill_s * MS_PER_S, decode_s * MS_PER_S
    meets: bool | None = None
    if ttft_slo_ms is not None or tpot_slo_ms is not None:
        meets = (ttft_slo_ms is None or ttft_ms <= ttft_slo_ms) and (
            tpot_slo_ms is None or tpot_ms <= tpot_slo_ms
        )
    return TpCandidate(
        tp=deployment.tp,
        pp=deployment.pp,
        dp=deployment.dp,
        ep=deployment.ep,
        splits_evenly=True,
        kv_head_replication=layout.replication,
        fits_memory=fits,
        weights_bytes_per_gpu=plan.weights_bytes,
        kv_bytes_per_token_per_gpu=plan.kv_bytes_per_token,
        kv_pool_bytes_per_gpu=plan.kv_pool_bytes,
        max_batch_by_memory=per_pool * plan.kv_pools,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        communication_share_prefill=cost.communication_seconds(prefill) / prefill_s,
        communication_share_decode=cost.communication_seconds(decode) / decode_s,
        meets_latency_goal=meets,
        reasons=(memory_reason, *layout.reasons),
    )


def _weighed(
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    base: Deployment,
    *,
    candidates: Sequence[int],
    layouts: bool,
    gpus_per_node: int,
    params: ParamCount,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
    kept: StepCostModel | None,
) -> tuple[tuple[Deployment, _Layout | TpCandidate], ...]:
    """The layouts `assess_tp` weighs, in `base`'s formats, smallest replica first, each with
    its workload-free part (`_layout`); kept on `kept` (`StepCostModel.derived`) when given, so
    that a service asking about the same target builds them once."""

    def make() -> tuple[tuple[Deployment, _Layout | TpCandidate], ...]:
        formats = Deployment(1, base.weight_dtype, base.kv_dtype, base.activation_dtype)
        deployments = [replace(formats, tp=tp) for tp in sorted(set(candidates))]
        if layouts:
            deployments += _layouts(
                model,
                gpu,
                formats,
                candidates=candidates,
                gpus_per_node=gpus_per_node,
                params=params,
            )
        deployments.sort(key=lambda d: (d.gpus, d.tp, d.ep))
        return tuple(
            (
                deployment,
                _layout(
                    model,
                    gpu,
                    deployment,
                    efficiency,
                    params=params,
                    gpu_memory_utilization=gpu_memory_utilization,
                    max_num_batched_tokens=max_num_batched_tokens,
                ),
            )
            for deployment in deployments
        )

    if kept is None:
        return make()
    formats_key = (base.weight_dtype, base.kv_dtype, base.activation_dtype)
    settings = (gpus_per_node, gpu_memory_utilization, max_num_batched_tokens)
    return kept.derived(("tp_layouts", formats_key, tuple(candidates), layouts, settings), make)


def _alternatives(
    model: ModelSpec,
    deployment: Deployment,
    params: ParamCount,
    usable: float,
) -> tuple[Alternative, ...]:
    kv_heads = model.num_kv_heads
    weights = weight_bytes_per_gpu(
        model,
        Deployment(1, deployment.weight_dtype, deployment.kv_dtype, deployment.activation_dtype),
        params=params,
    )
    stages = max(2, math.ceil(weights / usable))
    alternatives = [
        Alternative(
            AlternativeKind.ATTENTION_DATA_PARALLEL,
            f"keep attention at tp <= {kv_heads} (one KV head or more per GPU) and run "
            "independent attention replicas for separate requests (attention data "
            "parallelism), sharding only the FFN across all GPUs: no KV head is replicated",
        ),
        Alternative(
            AlternativeKind.CONTEXT_PARALLEL,
            "split each sequence's KV cache along the context across GPUs (KV / context "
            "parallelism, e.g. Helix): decode reads of long contexts divide across GPUs "
            "instead of every GPU reading replicated KV heads",
        ),
        Alternative(
            AlternativeKind.PIPELINE_PARALLEL,
            f"split the {model.num_layers} layers into pipeline stages (about {stages} for the "
            f"{weights / GB:.0f} GB of weights): weights per GPU fall without replicating KV "
            "heads, at the cost of pipeline bubbles and a longer per-token path",
        ),
    ]
    if model.moe is not None:
        alternatives.append(
            Alternative(
                AlternativeKind.EXPERT_PARALLEL,
                f"place whole experts on GPUs (expert parallelism over {model.moe.num_experts} "
                "experts) with attention data-parallel (wide EP): expert weights divide across "
                "GPUs and attention needs no more than the KV heads allow",
            )
        )
    return tuple(alternatives)


def assess_tp(
    model: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment | None = None,
    efficiency: Efficiency = IDEAL_EFFICIENCY,
    *,
    candidates: Sequence[int] = DEFAULT_TP_CANDIDATES,
    prompt_tokens: int = 2048,
    context_tokens: int = 2048,
    batch_size: int = 1,
    ttft_slo_ms: float | None = None,
    tpot_slo_ms: float | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    layouts: bool = False,
    gpus_per_node: int = 8,
    cost: StepCostModel | None = None,
) -> TpFeasibility:
    """Assess each TP degree in `candidates` (`deployment.tp` is ignored), and with `layouts`
    an MoE model's dp x tp (experts sliced or expert-parallel) within a node and, where no tp
    of a node holds the model, two and four pipeline stages of the widest: a layout
    feasibility, smallest replica first.

    Recommends the smallest feasible tp that fits memory, or, given latency goals, the smallest
    that fits and meets them. Alternatives come back when no tp <= K (KV heads) would do.

    `cost`: a cost model of `model` on `gpu` at `efficiency` (any deployment) that the caller
    keeps across calls: the layouts weighed and each one's memory plan and cost model are kept
    on it (`StepCostModel.derived`). None, or one of another model, GPU or efficiency, keeps
    nothing.
    """
    base = deployment or Deployment()
    if not candidates:
        raise SpecError("candidates", "needs at least one tp")
    for tp in candidates:
        if tp <= 0:
            raise SpecError("candidates", f"tp must be positive, got {tp}")
    positive("prompt_tokens", prompt_tokens)
    positive("context_tokens", context_tokens)
    positive("batch_size", batch_size)
    within_context(model, "prompt_tokens", prompt_tokens)
    within_context(model, "context_tokens", context_tokens)
    for name, slo in (("ttft_slo_ms", ttft_slo_ms), ("tpot_slo_ms", tpot_slo_ms)):
        if slo is not None and slo <= 0:
            raise SpecError(name, f"must be positive, got {slo}")
    # What every candidate shares.
    kept = None
    if cost is not None and (cost.model, cost.gpu, cost.efficiency) == (model, gpu, efficiency):
        kept = cost
    params = (
        count_params(model) if kept is None else kept.derived("params", lambda: count_params(model))
    )
    prefill = prefill_load(prompt_tokens, batch_size=batch_size)
    decode = decode_load(batch_size, context_tokens)
    kv_tokens_per_sequence(context_tokens, block_tokens)  # validates the sizes
    kv_tokens = kv_slots(model, context_tokens, block_tokens)

    weighed = _weighed(
        model,
        gpu,
        efficiency,
        base,
        candidates=candidates,
        layouts=layouts,
        gpus_per_node=gpus_per_node,
        params=params,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        kept=kept,
    )
    results = tuple(
        layout
        if isinstance(layout, TpCandidate)
        else _candidate(
            deployment,
            layout,
            prefill=prefill,
            decode=decode,
            context_tokens=context_tokens,
            kv_tokens=kv_tokens,
            batch_size=batch_size,
            ttft_slo_ms=ttft_slo_ms,
            tpot_slo_ms=tpot_slo_ms,
        )
        for deployment, layout in weighed
    )
    usable = [c for c in results if c.feasible]
    goal = ttft_slo_ms is not None or tpot_slo_ms is not None
    chosen = [c for c in usable if c.meets_latency_goal] if goal else usable
    recommended = chosen[0].tp if chosen else None
    if chosen and (chosen[0].dp, chosen[0].pp, chosen[0].ep) != (1, 1, 1):
        best = chosen[0]
        label = layout_label(Deployment(tp=best.tp, pp=best.pp, dp=best.dp, ep=best.ep))
        recommendation = f"{label}: the smallest layout that fits" + (
            " and meets the latency goal" if goal else ""
        )
    elif recommended is not None:
        recommendation = f"tp {recommended}: the smallest degree that fits" + (
            " and meets the latency goal" if goal else ""
        )
    elif usable and goal:
        recommendation = "no candidate meets the latency goal; the fastest that fits is tp " + str(
            min(usable, key=lambda c: c.tpot_ms or math.inf).tp
        )
    else:
        recommendation = "no candidate tp both splits the model and fits in memory"
    kv_heads = model.num_kv_heads
    needs_more = recommended is None or recommended > kv_heads
    alternatives = (
        _alternatives(model, base, params, gpu_memory_utilization * gpu.memory_bytes)
        if needs_more
        else ()
    )
    warnings: list[str] = []
    if needs_more:
        warnings.append(
            f"no tp <= {kv_heads} (the KV heads) works; tp beyond it replicates KV heads: "
            "see alternatives"
        )
    return TpFeasibility(results, recommended, recommendation, alternatives, tuple(warnings))


def moe_layouts(
    formats: Deployment, tp_candidates: Sequence[int], gpus_per_node: int
) -> list[Deployment]:
    """An MoE model's layouts beyond plain tp within a node: dp x tp with experts sliced or
    expert-parallel, and tp with ep."""
    found = []
    for tp in tp_candidates:
        dp = 2
        while tp * dp <= gpus_per_node:
            found += [replace(formats, tp=tp, dp=dp, ep=ep) for ep in (1, tp * dp)]
            dp *= 2
        if 1 < tp <= gpus_per_node:
            found.append(replace(formats, tp=tp, ep=tp))
    return found


def layout_label(deployment: Deployment) -> str:
    """`tp 8`, `tp 1 x dp 8 (ep 8)`, `tp 8 x pp 2`."""
    label = f"tp {deployment.tp}"
    if deployment.dp > 1:
        label += f" x dp {deployment.dp}"
    if deployment.pp > 1:
        label += f" x pp {deployment.pp}"
    if deployment.ep > 1:
        label += f" (ep {deployment.ep})"
    return label


def layout_reasons(model: ModelSpec, deployment: Deployment) -> list[str]:
    """What a layout beyond plain tp does, said once per candidate."""
    reasons = []
    if deployment.dp > 1:
        cache = (
            "caches only its own sequences' latents (MLA's latent does not split by tp)"
            if model.mla is not None
            else "caches only its own sequences"
        )
        reasons.append(
            f"attention data-parallel: {deployment.dp} ranks of tp {deployment.tp}, each "
            f"{cache}; the replica has {deployment.dp} KV pools"
        )
    if deployment.ep > 1:
        moe = model.moe
        per_gpu = moe.num_experts // deployment.ep if moe is not None else 0
        reasons.append(
            f"expert-parallel: {per_gpu} whole experts per GPU over ep {deployment.ep}, tokens "
            "exchanged all-to-all each MoE layer; the busiest GPU sets the pace (imbalance "
            f"{deployment.imbalance:g})"
        )
    elif deployment.expert_shards > deployment.tp:
        reasons.append(
            f"experts sliced over all tp x dp = {deployment.expert_shards} GPUs, an all-reduce "
            "across them each MoE layer"
        )
    if deployment.pp > 1:
        reasons.append(
            f"pipeline: {deployment.pp} stages of tp {deployment.tp} ({deployment.gpus} GPUs), "
            "the model does not fit one node at this tp; micro-batch overlap is not credited, "
            "so its throughput is a lower bound"
        )
    return reasons


def _layouts(
    model: ModelSpec,
    gpu: GpuSpec,
    formats: Deployment,
    *,
    candidates: Sequence[int],
    gpus_per_node: int,
    params: ParamCount,
) -> list[Deployment]:
    """The layouts beyond plain tp that `assess_tp(layouts=True)` weighs."""
    found = moe_layouts(formats, candidates, gpus_per_node) if model.moe is not None else []
    widest, pipelines, _ = beyond_a_node(model, formats, candidates, gpus_per_node)
    try:
        at_widest = weight_bytes_per_gpu(model, widest, params=params)
    except SpecError:
        return found
    if at_widest > gpu.memory_bytes:
        found += pipelines
    return found


def beyond_a_node(
    model: ModelSpec, formats: Deployment, tp_candidates: Sequence[int], gpus_per_node: int
) -> tuple[Deployment, list[Deployment], list[Deployment]]:
    """For a model that may not fit one node: the widest tp within a node, two and four
    pipeline stages of it, and (an MoE model) dp x ep over two and four nodes."""
    widest = max((tp for tp in tp_candidates if tp <= gpus_per_node), default=1)
    pipelines = [replace(formats, tp=widest, pp=pp) for pp in (2, 4)]
    nodes = (
        [replace(formats, tp=1, dp=gpus_per_node * n, ep=gpus_per_node * n) for n in (2, 4)]
        if model.moe is not None
        else []
    )
    return replace(formats, tp=widest), pipelines, nodes
