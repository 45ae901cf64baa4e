"""Estimate requests and responses. Fractions are 0-1, times in ms, sizes in bytes or tokens."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from app.catalog.schemas import GpuHardware, ModelArchitecture
from app.engine.parallelism import DEFAULT_TP_CANDIDATES
from app.estimates.service import (
    BatchCeilingQuery,
    ChunkSizeQuery,
    DecodeQuery,
    PrefillCurveQuery,
    PrefillQuery,
    RequestQuery,
    RooflineQuery,
    TpFeasibilityQuery,
)
from app.targets.schemas import (
    DeploymentFields,
    TargetEcho,
    TargetRequest,
    gpu_query,
    model_query,
)
from app.targets.service import TargetQuery
from app.validation.schemas import ErrorInterval, error_intervals_field
from app.web.schemas import CATALOG_REF, MAX_TOKENS, Input, MemoryShare, SloMs, Tokens

_MAX_CURVE_POINTS = 1000

PrefillBatch = Annotated[int, Field(gt=0, le=4096)]
"""Prompts prefilled together in one step."""
DecodeBatch = Annotated[int, Field(gt=0, le=65536)]
"""Sequences decoding together in one step."""


class _PrefillShape(Input):
    """How a prefill is computed: in one step or in chunks, causal or not."""

    chunk_tokens: Tokens | None = Field(
        default=None, description="Prefill in chunks of this many tokens; null: in one step."
    )
    causal: bool = Field(
        default=True,
        description=(
            "Causal attention (half the n x n work). `false` counts the full n x n, as "
            "article A of docs/model.md does."
        ),
    )


class _CachedPrefix(Input):
    cached_prefix_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_TOKENS,
        description="Leading prompt tokens already in the KV cache (a prefix-cache hit): read, "
        "not recomputed.",
    )


class _KnownTarget:
    """`target_query` kept per process for catalog ids with a named efficiency (what a scheduler
    sends, few distinct): building one (the deployment, its formats, the efficiency) costs a
    tenth of a computed estimate. Pure: the same fields always make the same frozen query. The
    key is every field `TargetRequest` declares (`key_of`), so a field added there keys it too."""

    _KEPT = 1024
    _kept: ClassVar[dict[tuple[Any, ...], TargetQuery]] = {}

    @staticmethod
    def key_of(request: Any) -> tuple[Any, ...] | None:
        """The cache key of `request`'s target: its `TargetRequest` fields in order; None for
        an inline model or GPU or explicit efficiencies (not kept)."""
        if not (
            isinstance(request.model, str)
            and isinstance(request.gpu, str)
            and isinstance(request.efficiency, str)
        ):
            return None
        return tuple(getattr(request, name) for name in _TARGET_FIELDS)

    def target_query(self) -> TargetQuery:
        request: Any = self
        key = _KnownTarget.key_of(request)
        if key is None:
            return TargetRequest.target_query(request)
        kept = _KnownTarget._kept
        query = kept.get(key)
        if query is None:
            query = TargetRequest.target_query(request)
            if len(kept) >= self._KEPT:
                kept.clear()
            kept[key] = query
        return query


_TARGET_FIELDS = tuple(TargetRequest.model_fields)
"""The fields every estimate request shares: what its target is made of."""


# ---- shared response parts


class Flops(BaseModel):
    """FLOPs of the step(s), whole deployment (all GPUs); a multiply-add counts 2."""

    linear: float = Field(description="QKV, O and FFN (or router and experts) projections.")
    attention: float = Field(description="Attention scores and values (QK^T and AV).")
    lm_head: float = Field(description="Output projection to the vocabulary.")
    total: float = Field(description="Sum of the above.")


class Bytes(BaseModel):
    """Bytes moved to and from device memory, whole deployment."""

    weights: float = Field(description="Weights read (once per step).")
    kv_cache: float = Field(description="KV cache read and written.")
    activations: float = Field(description="Activations streamed (Q, K, V, O; no n x n matrix).")
    total: float = Field(description="Sum of the above.")


class EstimateResponse(BaseModel):
    """What every estimate answer carries besides its figures."""

    target: TargetEcho = Field(description="What was estimated, resolved.")
    expected_error_pct: dict[str, float | None] = Field(
        description=(
            "By phase (`prefill`, `decode`), the spread of this GPU's validation residuals "
            "against stored benchmark runs, never below the mean absolute error published "
            "runs of the model's family showed: how far to trust the figures. Null, with the "
            "reason in `warnings`, where no run exists for the GPU and phase, or for ideal and "
            "custom efficiencies."
        )
    )
    error_interval_pct: dict[str, ErrorInterval | None] = error_intervals_field(
        "phase (`prefill`: its TTFT; `decode`: its time per output token)"
    )
    warnings: list[str] = Field(description="Allowed but unwise inputs, and what they cost.")


# ---- prefill


class PrefillRequest(_KnownTarget, TargetRequest, _CachedPrefix, _PrefillShape):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"model": "llama-3-8b", "gpu": "h100-sxm5-80gb", "prompt_tokens": 2048}]
        }
    )

    prompt_tokens: Tokens = Field(description="Prompt length.", examples=[4096])
    batch_size: PrefillBatch = Field(default=1, description="Prompts prefilled together.")

    def query(self) -> PrefillQuery:
        return self.query_of(PrefillQuery)


class PrefillResponse(EstimateResponse):
    ttft_ms: float = Field(description="Time to first token.")
    flops: Flops = Field(description="Work of the prefill.")
    bytes: Bytes = Field(description="Memory traffic of the prefill.")
    bound: str = Field(description="`compute` or `memory`: which roof limits the prefill.")
    arithmetic_intensity: float = Field(description="FLOP per byte of the whole prefill.")
    attention_share: float = Field(description="Attention FLOPs over all FLOPs.")
    crossover_tokens: int = Field(
        description="Prompt length at which attention FLOPs equal linear FLOPs (same `causal`)."
    )
    steps: int = Field(description="Forward steps the prefill takes (chunks).")


class PrefillCurveRequest(_KnownTarget, TargetRequest, _PrefillShape):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "llama-3.1-8b",
                    "gpu": "a100-sxm4-80gb",
                    "prompt_tokens": [1024, 10240, 51200, 102400, 131072],
                }
            ]
        }
    )

    prompt_tokens: list[Tokens] = Field(
        min_length=1,
        max_length=_MAX_CURVE_POINTS,
        description=f"Prompt lengths, in the order to report them (at most {_MAX_CURVE_POINTS}).",
        examples=[[1024, 10240, 51200, 102400, 131072]],
    )
    batch_size: PrefillBatch = Field(default=1, description="Prompts prefilled together.")

    def query(self) -> PrefillCurveQuery:
        return self.query_of(PrefillCurveQuery, prompt_tokens=tuple(self.prompt_tokens))


class CurvePointOut(BaseModel):
    prompt_tokens: int = Field(description="Prompt length.")
    ttft_ms: float = Field(description="Time to first token.")
    attention_share: float = Field(description="Attention FLOPs over all FLOPs.")
    ratio_to_previous: float | None = Field(description="TTFT over the previous point's.")
    loglog_slope: float | None = Field(
        description="d log TTFT / d log n against the previous point: 1 linear, 2 quadratic."
    )


class PrefillCurveResponse(EstimateResponse):
    points: list[CurvePointOut] = Field(description="One per requested length, in order.")
    crossover_tokens: int = Field(description="Where attention FLOPs equal linear FLOPs.")


# ---- decode and whole requests


class DecodeRequest(_KnownTarget, TargetRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "llama-3-70b",
                    "gpu": "h100-sxm5-80gb",
                    "tp": 4,
                    "batch_size": 64,
                    "context_tokens": 4096,
                }
            ]
        }
    )

    batch_size: DecodeBatch = Field(description="Sequences decoding together.", examples=[8])
    context_tokens: Tokens = Field(
        description="Each sequence's context (prompt and tokens so far).", examples=[4096]
    )

    def query(self) -> DecodeQuery:
        return self.query_of(DecodeQuery)


class DecodeResponse(EstimateResponse):
    tpot_ms: float = Field(description="Time per output token: one decode step.")
    flops: Flops = Field(description="Work of one step.")
    bytes: Bytes = Field(description="Memory traffic of one step.")
    arithmetic_intensity: float = Field(description="FLOP per byte of the step.")
    bound: str = Field(description="`compute` or `memory`.")
    compute_utilization: float = Field(description="Achieved FLOP/s over peak FLOP/s.")
    tokens_per_s: float = Field(description="Batch size over TPOT.")
    communication_share: float = Field(description="Share of the step spent in all-reduces.")


class RequestRequest(_KnownTarget, TargetRequest, _CachedPrefix, _PrefillShape):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "llama-3-8b",
                    "gpu": "h100-sxm5-80gb",
                    "prompt_tokens": 2048,
                    "output_tokens": 256,
                    "batch_size": 16,
                }
            ]
        }
    )

    prompt_tokens: Tokens = Field(description="Prompt length.", examples=[2048])
    output_tokens: Tokens = Field(
        description="Tokens generated, the first included.", examples=[256]
    )
    batch_size: DecodeBatch = Field(default=1, description="Requests running together.")

    def query(self) -> RequestQuery:
        return self.query_of(RequestQuery)


class RequestResponse(EstimateResponse):
    ttft_ms: float = Field(description="Time to first token.")
    tpot_ms: float = Field(description="Mean time per output token over the decode.")
    e2e_ms: float = Field(description="`ttft_ms + (output_tokens - 1) * tpot_ms`.")


# ---- batch ceiling


class BatchCeilingRequest(_KnownTarget, TargetRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": "llama-3-70b", "gpu": "h100-sxm5-80gb", "tp": 4, "context_tokens": 8192}
            ]
        }
    )

    context_tokens: Tokens = Field(
        description="Tokens each sequence holds at its longest (prompt + output).", examples=[4096]
    )
    gpu_memory_utilization: MemoryShare = Field(
        default=0.9, description="Share of GPU memory the engine may use."
    )
    block_tokens: int = Field(default=16, gt=0, le=1024, description="Paged KV-cache block size.")
    max_num_batched_tokens: int = Field(
        default=8192, gt=0, le=2**20, description="Largest step, for the activation reserve."
    )
    max_num_seqs: int = Field(
        default=256, gt=0, le=65536, description="Sequences the engine may run at once."
    )

    def query(self) -> BatchCeilingQuery:
        return self.query_of(BatchCeilingQuery)


class MemoryBreakdown(BaseModel):
    """How one GPU's memory divides, bytes."""

    memory_bytes: int = Field(description="The GPU's memory.")
    usable_bytes: float = Field(description="`gpu_memory_utilization` of it.")
    weights_bytes: float = Field(description="Weights this GPU holds.")
    activation_reserve_bytes: float = Field(description="Kept for a step's activations.")
    kv_pool_bytes: float = Field(description="What is left for the KV cache (negative: none).")


class BatchCeilingResponse(EstimateResponse):
    kv_bytes_per_token: float = Field(description="KV cache one token takes on one GPU.")
    kv_bytes_per_sequence: float = Field(description="One sequence, rounded to whole blocks.")
    max_batch_by_memory: int = Field(description="Sequences whose KV cache fits the pool.")
    ridge_batch: int | None = Field(
        description="Smallest batch whose decode step is compute-bound; null when none is."
    )
    ridge_batch_reason: str | None = Field(description="Why there is no ridge batch, if none.")
    batch_ceiling: int = Field(description="The lesser of the memory and compute ceilings.")
    limited_by: str = Field(description="`memory` or `compute`.")
    memory: MemoryBreakdown = Field(description="Memory of one GPU.")
    tpot_ms_at_ceiling: float | None = Field(description="Decode step at the ceiling.")
    tokens_per_s_at_ceiling: float | None = Field(description="Throughput at the ceiling.")


# ---- tensor parallelism


class TpFeasibilityRequest(_KnownTarget, TargetRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "llama-3-70b",
                    "gpu": "h100-sxm5-80gb",
                    "tp_candidates": [1, 2, 4, 8],
                    "prompt_tokens": 2048,
                    "context_tokens": 4096,
                    "batch_size": 32,
                    "ttft_slo_ms": 1000,
                    "tpot_slo_ms": 50,
                }
            ]
        }
    )

    tp_candidates: tuple[int, ...] = Field(
        default=DEFAULT_TP_CANDIDATES,  # a tuple: no copy of a mutable default per request
        min_length=1,
        max_length=16,
        description="TP degrees to assess (`tp` is ignored).",
    )
    prompt_tokens: Tokens = Field(
        default=2048, description="Prompt length for the TTFT of each candidate."
    )
    context_tokens: Tokens = Field(
        default=2048, description="Context for the TPOT and KV cache of each candidate."
    )
    batch_size: DecodeBatch = Field(default=1, description="Sequences decoding together.")
    ttft_slo_ms: SloMs | None = Field(default=None, description="Recommend a tp meeting it.")
    tpot_slo_ms: SloMs | None = Field(default=None, description="Recommend a tp meeting it.")
    layouts: bool = Field(
        default=False,
        description=(
            "Also weigh an MoE model's attention data parallelism and expert parallelism "
            "within a node (dp x tp up to 8 GPUs), and pipeline stages where no tp of a node "
            "holds the model: which (tp, pp, dp, ep) work, what each costs, and why not."
        ),
    )

    def query(self) -> TpFeasibilityQuery:
        return self.query_of(TpFeasibilityQuery, candidates=self.tp_candidates)


class TpCandidateOut(BaseModel):
    tp: int = Field(description="Tensor-parallel degree.")
    pp: int = Field(description="Pipeline stages.")
    dp: int = Field(description="Attention data-parallel ranks.")
    ep: int = Field(description="Expert-parallel degree (1: experts sliced by tensor).")
    gpus: int = Field(description="GPUs of one replica: tp x dp x pp.")
    feasible: bool = Field(
        description="Deployable: it splits evenly and fits in memory (`splits_evenly` and "
        "`fits_memory`)."
    )
    splits_evenly: bool = Field(
        description="It splits the query heads, KV heads (or replicates them) and FFN evenly."
    )
    kv_head_replication: float = Field(description="Copies of each KV head (tp/K when tp > K).")
    fits_memory: bool = Field(description="Weights and activation reserve fit each GPU.")
    weights_bytes_per_gpu: float = Field(description="Weights one GPU holds.")
    kv_bytes_per_token_per_gpu: float = Field(description="KV cache one token takes per GPU.")
    kv_pool_bytes_per_gpu: float = Field(description="Memory left for the KV cache per GPU.")
    max_batch_by_memory: int = Field(
        description="Sequences of `context_tokens` that fit (every data-parallel rank's pool)."
    )
    ttft_ms: float | None = Field(description="TTFT of `prompt_tokens`, when feasible.")
    tpot_ms: float | None = Field(description="TPOT at `batch_size`, when feasible.")
    communication_share_prefill: float | None = Field(description="All-reduce share of TTFT.")
    communication_share_decode: float | None = Field(description="All-reduce share of TPOT.")
    meets_latency_goal: bool | None = Field(description="Against the SLOs given, if any.")
    reasons: list[str] = Field(description="Why it is or is not a good choice, in plain words.")


class AlternativeOut(BaseModel):
    kind: str = Field(description="The other kind of parallelism.")
    why: str = Field(description="When and why it helps here.")


class TpFeasibilityResponse(EstimateResponse):
    candidates: list[TpCandidateOut] = Field(
        description="One per TP degree assessed (and per layout, with `layouts`)."
    )
    recommended_tp: int | None = Field(
        description="Smallest feasible tp that fits (and meets SLOs)."
    )
    recommendation: str = Field(description="The recommendation, in plain words.")
    alternatives: list[AlternativeOut] = Field(
        description="Other parallelism when tp beyond the KV heads would be needed."
    )


# ---- chunked prefill


class ChunkSizeRequest(_KnownTarget, TargetRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "llama-3.1-8b",
                    "gpu": "h100-sxm5-80gb",
                    "itl_slo_ms": 50,
                    "decode_batch_size": 64,
                    "decode_context_tokens": 2048,
                    "long_prompt_tokens": 32768,
                }
            ]
        }
    )

    itl_slo_ms: float = Field(
        gt=0,
        le=60_000,
        description="A step carrying a prefill chunk must not stall running decodes longer.",
        examples=[50],
    )
    short_ttft_slo_ms: SloMs | None = Field(
        default=None, description="TTFT goal for short prompts, for routing and buckets."
    )
    decode_batch_size: int = Field(
        default=0, ge=0, le=65536, description="Decodes running beside each chunk."
    )
    decode_context_tokens: int = Field(
        default=0, ge=0, le=MAX_TOKENS, description="Their context (needed when decodes run)."
    )
    long_prompt_tokens: Tokens | None = Field(
        default=None,
        description="The long prompt whose chunked TTFT is reported; 32,768 or the model's "
        "context, whichever is shorter.",
        examples=[32768],
    )

    def query(self) -> ChunkSizeQuery:
        return self.query_of(ChunkSizeQuery)


class LongPromptOut(BaseModel):
    prompt_tokens: int = Field(description="The long prompt's length.")
    ttft_ms_unchunked: float = Field(description="Its TTFT in one step.")
    ttft_ms_chunked: float = Field(description="Its TTFT in chunks of the recommended size.")
    steps: int = Field(description="Chunks it takes.")


class LengthBucketOut(BaseModel):
    max_prompt_tokens: int = Field(description="Prompts up to this length ...")
    ttft_slo_ms: float = Field(description="... get this TTFT goal, proposed from the estimates.")


class ChunkSizeResponse(EstimateResponse):
    max_chunk_tokens: int = Field(description="Largest chunk whose step fits the ITL SLO.")
    recommended_chunk_tokens: int = Field(description="Rounded down to a multiple of 64.")
    step_ms: float = Field(description="A step with the recommended chunk and the decodes.")
    seed_first_cut_tokens: int = Field(
        description="Article A's first cut, `itl_slo * peak / FLOPs per token`, for comparison."
    )
    long_prompt: LongPromptOut = Field(description="What chunking costs a long prompt.")
    length_buckets: list[LengthBucketOut] = Field(description="Proposed TTFT goals by length.")
    route_long_prompts_above_tokens: int = Field(
        description="Send longer prompts to their own endpoint."
    )
    rationale: list[str] = Field(description="How the figures were reached, in plain words.")


# ---- roofline


class RooflineRequest(DeploymentFields):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "gpu": "h100-sxm5-80gb",
                    "model": "llama-3-8b",
                    "prompt_tokens": 2048,
                    "context_tokens": 4096,
                    "batch_size": 32,
                }
            ]
        }
    )

    gpu: CATALOG_REF | GpuHardware = Field(
        description="A catalog GPU id, or inline hardware figures.", examples=["a100-sxm4-80gb"]
    )
    model: CATALOG_REF | ModelArchitecture | None = Field(
        default=None, description="A catalog model id or inline architecture, to place its phases."
    )
    prompt_tokens: Tokens = Field(
        default=2048, description="Prompt length for the prefill phases.", examples=[32768]
    )
    context_tokens: Tokens = Field(
        default=2048, description="Context for the decode phases.", examples=[32768]
    )
    batch_size: DecodeBatch = Field(default=1, description="Decode batch.")
    causal: bool = Field(
        default=False,
        description="Causal prefill attention; article C's intensities are non-causal (default).",
    )

    def refs(self) -> dict[str, object]:
        """The catalog ids this request names, for `SpecCache.generations`."""
        return {"model": self.model, "gpu": self.gpu}

    def query(self) -> RooflineQuery:
        return RooflineQuery(
            gpu=gpu_query(self.gpu),
            model=model_query(self.model) if self.model is not None else None,
            deployment=self.deployment(),
            prompt_tokens=self.prompt_tokens,
            context_tokens=self.context_tokens,
            batch_size=self.batch_size,
            causal=self.causal,
        )


class PhaseOut(BaseModel):
    name: str = Field(
        validation_alias="phase",
        description="`prefill`, `decode`, `prefill_attention` or `decode_attention`.",
    )
    arithmetic_intensity: float = Field(description="FLOP per byte.")
    attainable_flops_per_s: float = Field(description="min(peak, bandwidth x intensity).")
    bound: str = Field(description="`compute` or `memory`.")
    compute_dtype: str = Field(description="The format this phase computes in.")
    ridge_intensity: float = Field(description="The ridge point for that format.")


class RooflineResponse(BaseModel):
    gpu: str = Field(description="The catalog GPU id, or `inline`.")
    model: str | None = Field(description="The catalog model id, `inline`, or null.")
    ridge_intensity: float = Field(description="Peak FLOP/s over bandwidth, FLOP per byte.")
    compute_dtype: str = Field(description="The format of the GEMMs (and of the ridge point).")
    peak_flops_per_s: float = Field(description="Dense peak in that format.")
    memory_bandwidth_bytes_per_s: float = Field(description="Datasheet memory bandwidth.")
    phases: list[PhaseOut] = Field(
        description=(
            "Where each phase sits. Without a model, article B's generic phases: prefill at "
            "I = prompt tokens, decode at I = batch size (weights read once, KV ignored)."
        )
    )
    warnings: list[str] = Field(description="Allowed but unwise inputs.")
