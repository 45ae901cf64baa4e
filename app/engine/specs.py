"""What the engine reasons about: a model, a GPU, how the model is deployed on it, and a workload.

All specs are frozen dataclasses that validate themselves: an impossible spec raises `ValueError`
with a message naming the field, so the service can turn it into a 422 without knowing the rule.

`ModelSpec` and `MoeSpec` are also the one definition of a model's architecture: each field
declares, with `spec_field`, what a schema shows of it (its description, bounds and an example).
The API's model schemas, the run document's, the catalog's stored architecture and the Hugging
Face mapping are derived from these classes (`app.formats.specs`), so adding a field is a change
here (and, where `config.json` has it, in the Hugging Face mapping).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar

from app.engine.dtypes import BLOCK_SCALED_DTYPES, DType

__all__ = [
    "DEFAULT_EXPERT_IMBALANCE",
    "IDEAL_EFFICIENCY",
    "Deployment",
    "Efficiency",
    "FfnType",
    "GpuSpec",
    "InterconnectSpec",
    "MlaSpec",
    "ModelSpec",
    "MoeSpec",
    "SpecError",
    "WindowKind",
    "expert_dtype_for",
    "positive",
    "rebuilt_exception",
    "spec_field",
    "within_context",
]


class SpecError(ValueError):
    """An impossible spec or workload. `field` is the dotted path of the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable whatever a subclass's __init__ takes (errors cross process boundaries).
        return (rebuilt_exception, (type(self), self.args, self.__dict__))


E = TypeVar("E", bound=BaseException)


def rebuilt_exception(cls: type[E], args: tuple[Any, ...], state: dict[str, Any]) -> E:
    """An exception of `cls` with `args` and attributes `state`, its `__init__` not called: what
    `__reduce__` of an exception whose `__init__` takes other arguments than `args` returns."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


def positive(name: str, value: float) -> None:
    """`SpecError(name, ...)` unless `value` > 0."""
    if not value > 0:
        raise SpecError(name, f"must be positive, got {value}")


def _fraction(name: str, value: float) -> None:
    if not 0 < value <= 1:
        raise SpecError(name, f"must be in (0, 1], got {value}")


def spec_field(
    doc: str,
    *,
    default: Any = MISSING,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    example: Any = None,
) -> Any:
    """A dataclass field with what a schema derived from the spec shows of it: a description,
    bounds (`gt`/`ge` are the spec's own rule; `le` caps what a request may ask, a bound on work),
    an example. Plain metadata: the engine itself reads none of it."""
    metadata = {"doc": doc, "gt": gt, "ge": ge, "le": le, "example": example}
    if default is MISSING:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


class FfnType(StrEnum):
    GATED = "gated"  # SwiGLU/GeGLU: gate, up and down projections, 3*d*f weights
    MLP = "mlp"  # plain two-layer MLP: up and down projections, 2*d*f weights

    @property
    def matrices(self) -> int:
        """Weight matrices of d x f in one FFN: gate, up and down (Shazeer 2020, HF
        `LlamaMLP`), or up and down (Vaswani et al. 2017)."""
        return 3 if self is FfnType.GATED else 2


@dataclass(frozen=True, slots=True)
class MoeSpec:
    """Mixture-of-experts FFN. Every layer but the first `num_dense_layers` routes each token to
    `experts_per_token` of `num_experts` experts, plus `num_shared_experts` always-on experts."""

    num_experts: int = spec_field("Routed experts per MoE layer `E`.", gt=0, le=4096, example=8)
    experts_per_token: int = spec_field(
        "Routed experts each token uses `k`.", gt=0, le=4096, example=2
    )
    expert_intermediate_size: int = spec_field(
        "FFN width of one expert.", gt=0, le=2**20, example=14336
    )
    num_shared_experts: int = spec_field(
        "Always-on experts per layer.", default=0, ge=0, le=64, example=0
    )
    shared_expert_intermediate_size: int = spec_field(
        "Width of a shared expert; 0: the expert width.", default=0, ge=0, le=2**20
    )
    num_dense_layers: int = spec_field(
        "Layers with a dense FFN of `intermediate_size` instead of experts: DeepSeek's leading "
        "`first_k_dense_replace`, Llama 4 Maverick's every other layer. Only their number "
        "matters to the counts.",
        default=0,
        ge=0,
        le=1000,
    )

    def __post_init__(self) -> None:
        positive("moe.num_experts", self.num_experts)
        positive("moe.experts_per_token", self.experts_per_token)
        positive("moe.expert_intermediate_size", self.expert_intermediate_size)
        if self.experts_per_token > self.num_experts:
            raise SpecError(
                "moe.experts_per_token",
                f"{self.experts_per_token} experts per token exceeds the "
                f"{self.num_experts} experts the model has",
            )
        if self.num_shared_experts < 0:
            raise SpecError("moe.num_shared_experts", "must not be negative")
        if self.shared_expert_intermediate_size < 0:
            raise SpecError("moe.shared_expert_intermediate_size", "must not be negative")
        if self.num_dense_layers < 0:
            raise SpecError("moe.num_dense_layers", "must not be negative")

    @property
    def shared_width(self) -> int:
        return self.shared_expert_intermediate_size or self.expert_intermediate_size


@dataclass(frozen=True, slots=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2; DeepSeek-AI 2024, arXiv:2405.04434).

    Keys and values of a token are compressed into one latent of `kv_lora_rank` plus a rotary key
    of `qk_rope_head_dim`, shared by every head: that latent is the KV cache. Each head's query
    and key have a non-rotary part (`qk_nope_head_dim`) and the shared rotary part; its value
    has `v_head_dim`. Queries go through a low-rank bottleneck of `q_lora_rank` (0: projected
    directly, as in DeepSeek-V2-Lite)."""

    kv_lora_rank: int = spec_field(
        "Width of the compressed KV latent (the cache per token per layer, with the rope key).",
        gt=0,
        le=2**16,
        example=512,
    )
    qk_rope_head_dim: int = spec_field(
        "Rotary key/query width, shared across heads.", gt=0, le=1024, example=64
    )
    qk_nope_head_dim: int = spec_field(
        "Non-rotary query/key width per head.", gt=0, le=1024, example=128
    )
    v_head_dim: int = spec_field("Value width per head.", gt=0, le=1024, example=128)
    q_lora_rank: int = spec_field(
        "Width of the query bottleneck; 0: queries are projected directly.",
        default=0,
        ge=0,
        le=2**16,
        example=1536,
    )

    def __post_init__(self) -> None:
        positive("mla.kv_lora_rank", self.kv_lora_rank)
        positive("mla.qk_rope_head_dim", self.qk_rope_head_dim)
        positive("mla.qk_nope_head_dim", self.qk_nope_head_dim)
        positive("mla.v_head_dim", self.v_head_dim)
        if self.q_lora_rank < 0:
            raise SpecError("mla.q_lora_rank", "must not be negative")

    @property
    def qk_head_dim(self) -> int:
        """Query/key width per head: the non-rotary and rotary parts."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_width(self) -> int:
        """Elements one token caches per layer: the latent and the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class WindowKind(StrEnum):
    SLIDING = (
        "sliding"  # each query sees the last `sliding_window` tokens (Mistral, Gemma, gpt-oss)
    )
    CHUNKED = "chunked"  # each query sees its own chunk of `sliding_window` tokens (Llama 4)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer, in the terms of its Hugging Face `config.json`."""

    num_layers: int = spec_field("Decoder layers `L`.", gt=0, le=1000, example=32)
    hidden_size: int = spec_field("Model width `d`.", gt=0, le=2**17, example=4096)
    num_attention_heads: int = spec_field("Query heads `H`.", gt=0, le=1024, example=32)
    num_kv_heads: int = spec_field(
        "Key/value heads `K` (`H` for MHA, 1 for MQA); `H` must divide by `K`.",
        gt=0,
        le=1024,
        example=8,
    )
    head_dim: int = spec_field("Per-head width `h`.", gt=0, le=1024, example=128)
    intermediate_size: int = spec_field(
        "FFN width `f` of dense layers.", gt=0, le=2**20, example=14336
    )
    ffn_type: FfnType = spec_field("`gated` (SwiGLU, 3 matrices) or `mlp` (2 matrices).")
    vocab_size: int = spec_field(
        "Vocabulary `V` (embedding and LM head rows).", gt=0, le=2**22, example=128256
    )
    max_context_tokens: int = spec_field(
        "Longest context the model takes, tokens.", gt=0, le=2**24, example=8192
    )
    tie_word_embeddings: bool = spec_field("LM head shares the embedding.", default=False)
    attention_bias: bool = spec_field("Q/K/V projections have biases (Qwen2).", default=False)
    moe: MoeSpec | None = spec_field("Mixture-of-experts FFN, if any.", default=None)
    mla: MlaSpec | None = spec_field(
        "Multi-head latent attention (DeepSeek-V3, Kimi K2), if the model uses it: then "
        "`head_dim` is the query/key width (`qk_nope_head_dim + qk_rope_head_dim`) and "
        "`num_kv_heads` equals `num_attention_heads`.",
        default=None,
    )
    sliding_window: int = spec_field(
        "Window of the windowed attention layers, tokens; 0: every layer attends to the whole "
        "context.",
        default=0,
        ge=0,
        le=2**24,
        example=0,
    )
    window_layers: int = spec_field(
        "How many layers attend within `sliding_window` (the others attend to everything): "
        "all of Mistral 7B v0.1's, half of Gemma 2's and gpt-oss's, 5 in 6 of Gemma 3's, 3 in 4 "
        "of Llama 4's.",
        default=0,
        ge=0,
        le=1000,
    )
    window_kind: WindowKind = spec_field(
        "`sliding`: a query sees the last `sliding_window` tokens; `chunked`: the tokens of its "
        "own chunk of that size (Llama 4's local attention).",
        default=WindowKind.SLIDING,
    )
    attention_sinks: bool = spec_field(
        "Each head has a learned sink logit (gpt-oss): one parameter per head per layer.",
        default=False,
    )
    mtp_layers: int = spec_field(
        "Multi-token-prediction layers published beside the model (DeepSeek-V3's "
        "`num_nextn_predict_layers`): not part of the model's forward step; they count only "
        "when speculative decoding loads them.",
        default=0,
        ge=0,
        le=16,
    )
    checkpoint_dtype: DType = spec_field(
        "The format the published weights are in (its config's `torch_dtype`, or its "
        "quantisation). Plans serve it unless `weight_dtypes` asks for others: fp8 or fp4 "
        "weights of a bf16 checkpoint are a quantisation, a change in quality.",
        default=DType.BF16,
    )
    expert_checkpoint_dtype: DType | None = spec_field(
        "The format the published expert weights are in when it is not `checkpoint_dtype` "
        "(gpt-oss: mxfp4 experts, bf16 attention); null: the same.",
        default=None,
    )
    checkpoint_kv_dtype: DType | None = spec_field(
        "The KV-cache format the checkpoint's quantisation config declares, with its scales "
        "(ModelOpt's `kv_cache_quant_algo`, compressed-tensors' `kv_cache_scheme`: fp8 in "
        "NVIDIA's FP8 and NVFP4 checkpoints); null: none. Engines that read it serve that "
        "cache by default when the checkpoint's own weights are served.",
        default=None,
    )
    id: str = "inline"

    def __post_init__(self) -> None:
        for name in (
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "max_context_tokens",
        ):
            positive(name, getattr(self, name))
        if self.num_kv_heads > self.num_attention_heads:
            raise SpecError(
                "num_kv_heads",
                f"{self.num_kv_heads} KV heads exceed the {self.num_attention_heads} query heads",
            )
        if self.num_attention_heads % self.num_kv_heads:
            raise SpecError(
                "num_kv_heads",
                f"{self.num_attention_heads} query heads are not divisible into "
                f"{self.num_kv_heads} KV-head groups",
            )
        if self.moe is not None and self.moe.num_dense_layers > self.num_layers:
            raise SpecError("moe.num_dense_layers", "exceeds num_layers")
        if self.mla is not None:
            if self.head_dim != self.mla.qk_head_dim:
                raise SpecError(
                    "head_dim",
                    f"with MLA it is the query/key width qk_nope_head_dim + qk_rope_head_dim = "
                    f"{self.mla.qk_head_dim}, got {self.head_dim}",
                )
            if self.num_kv_heads != self.num_attention_heads:
                raise SpecError(
                    "num_kv_heads",
                    "with MLA every head has its own key and value decompressed from the "
                    f"shared latent: {self.num_attention_heads}, got {self.num_kv_heads}",
                )
        if self.sliding_window < 0:
            raise SpecError("sliding_window", "must not be negative")
        if not 0 <= self.window_layers <= self.num_layers:
            raise SpecError("window_layers", f"must be between 0 and num_layers {self.num_layers}")
        if self.window_layers and not self.sliding_window:
            raise SpecError("window_layers", "windowed layers need a sliding_window above 0")
        if self.mtp_layers < 0:
            raise SpecError("mtp_layers", "must not be negative")

    @property
    def group_size(self) -> int:
        """Query heads per KV head: 1 for MHA, H for MQA."""
        return self.num_attention_heads // self.num_kv_heads

    @property
    def q_width(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def full_attention_layers(self) -> int:
        """Layers that attend to the whole context."""
        return self.num_layers - self.window_layers

    def attended_tokens(self, context_tokens: int) -> int:
        """Tokens a windowed layer keeps of a `context_tokens`-token context (all of them
        without a window): the bound on its attention and its KV cache."""
        if not self.window_layers:
            return context_tokens
        return min(context_tokens, self.sliding_window)


@dataclass(frozen=True, slots=True)
class InterconnectSpec:
    """The GPU-to-GPU link tensor parallelism talks over.

    `bandwidth_bytes_per_s` is the per-GPU figure datasheets quote, both directions summed
    (NVLink 4: 900 GB/s; PCIe 5.0 x16: 128 GB/s); a ring all-reduce moves data one way, at half
    of it.
    """

    kind: str
    bandwidth_bytes_per_s: float
    latency_s: float = 5e-6  # per ring step; see app/catalog/data/gpus.json sources
    domain_size: int = 8
    """GPUs that reach each other over this link: 8 on an HGX board, 72 in an NVL72 rack."""
    scale_out_bytes_per_s: float = 50e9
    """Per GPU, one direction, between domains (InfiniBand/RoCE): a 400 Gb/s NIC per GPU."""
    scale_out_latency_s: float = 5e-6

    def __post_init__(self) -> None:
        positive("interconnect.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        if self.latency_s < 0:
            raise SpecError("interconnect.latency_s", "must not be negative")
        positive("interconnect.domain_size", self.domain_size)
        positive("interconnect.scale_out_bytes_per_s", self.scale_out_bytes_per_s)
        if self.scale_out_latency_s < 0:
            raise SpecError("interconnect.scale_out_latency_s", "must not be negative")

    @property
    def unidirectional_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s / 2

    def tier(self, gpus: int) -> InterconnectSpec:
        """The link a group of `gpus` GPUs talks over: this one within a domain, the scale-out
        network (at its per-GPU, one-way rate) once the group spans domains."""
        if gpus <= self.domain_size:
            return self
        return InterconnectSpec(
            kind="scale-out",
            bandwidth_bytes_per_s=2.0 * self.scale_out_bytes_per_s,
            latency_s=self.scale_out_latency_s,
            domain_size=self.domain_size,
            scale_out_bytes_per_s=self.scale_out_bytes_per_s,
            scale_out_latency_s=self.scale_out_latency_s,
        )


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fractions of datasheet peak a GPU reaches in practice, and the fixed cost of one step.

    `gemm` scales the tensor-core peak for linear layers and the LM head, `attention` for the
    attention kernel, `memory` the HBM bandwidth, `communication` the interconnect; `overhead_ms`
    is added once per forward step (kernel launches, sampling, scheduling).
    """

    gemm: float = 1.0
    attention: float = 1.0
    memory: float = 1.0
    communication: float = 1.0
    overhead_ms: float = 0.0
    source: str = "ideal: 100 % of datasheet peak, no overhead"

    def __post_init__(self) -> None:
        _fraction("efficiency.gemm", self.gemm)
        _fraction("efficiency.attention", self.attention)
        _fraction("efficiency.memory", self.memory)
        _fraction("efficiency.communication", self.communication)
        if self.overhead_ms < 0:
            raise SpecError("efficiency.overhead_ms", "must not be negative")


IDEAL_EFFICIENCY = Efficiency()


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator, with dense (no structured sparsity) tensor-core peaks per format."""

    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    peak_flops_per_s: Mapping[DType, float]
    interconnect: InterconnectSpec
    efficiency: Efficiency = field(default=IDEAL_EFFICIENCY)
    id: str = "inline"

    def __post_init__(self) -> None:
        positive("memory_bytes", self.memory_bytes)
        positive("memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s)
        if not self.peak_flops_per_s:
            raise SpecError("peak_flops_per_s", "needs at least one format")
        for dtype, flops in self.peak_flops_per_s.items():
            positive(f"peak_flops_per_s.{dtype}", flops)

    def peak(self, dtype: DType) -> float:
        """Dense peak FLOP/s in `dtype`; `SpecError` when the part cannot compute in it."""
        try:
            return self.peak_flops_per_s[dtype]
        except KeyError:
            supported = ", ".join(str(d) for d in self.peak_flops_per_s)
            raise SpecError(
                "weight_dtype", f"GPU {self.id} has no {dtype} compute (it supports {supported})"
            ) from None

    def ridge_intensity(self, dtype: DType) -> float:
        """FLOP per byte at which the roofline turns from memory- to compute-bound."""
        return self.peak(dtype) / self.memory_bandwidth_bytes_per_s


DEFAULT_EXPERT_IMBALANCE = 1.3
"""Tokens on the busiest expert-parallel GPU over the mean, without redundant experts: routing
skew of served traffic runs 1.2-1.8 (docs/model.md); EPLB's replicas bring it toward 1."""


@dataclass(frozen=True, slots=True)
class Deployment:
    """How one replica is laid out, and the formats of weights and KV cache.

    `tp` GPUs split each layer (heads, FFN widths); `dp` such groups run attention on their own
    sequences (attention data parallelism); `pp` stages hold consecutive layers. A replica has
    tp x dp x pp GPUs. The experts of an MoE layer are sharded over the tp x dp GPUs of a stage:
    by tensor slices when `ep` is 1, by whole experts when `ep` is tp x dp (vLLM's
    `--enable-expert-parallel`, SGLang's `--ep-size` with DP attention). `expert_imbalance` is
    the busiest expert-parallel GPU's tokens over the mean (None: the default, under ep only).
    """

    tp: int = 1
    weight_dtype: DType = DType.BF16
    kv_dtype: DType = DType.BF16
    activation_dtype: DType = DType.BF16
    pp: int = 1
    dp: int = 1
    ep: int = 1
    expert_imbalance: float | None = None
    expert_dtype: DType | None = None
    """The MoE experts' format; None: the checkpoint's expert format when the weights are
    served as published, else `weight_dtype` (`expert_dtype_for`)."""

    def __post_init__(self) -> None:
        positive("tp", self.tp)
        positive("pp", self.pp)
        positive("dp", self.dp)
        positive("ep", self.ep)
        if self.ep not in (1, self.tp * self.dp):
            raise SpecError(
                "ep",
                f"experts shard over the tp x dp = {self.tp * self.dp} GPUs of a stage "
                f"(vLLM's --enable-expert-parallel, SGLang's --ep-size): ep is 1 or "
                f"{self.tp * self.dp}, got {self.ep}",
            )
        if self.expert_imbalance is not None and not 1 <= self.expert_imbalance <= 8:
            raise SpecError(
                "expert_imbalance", f"must be between 1 and 8, got {self.expert_imbalance}"
            )
        if self.expert_dtype is not None and self.expert_dtype in (DType.FP32, DType.TF32):
            raise SpecError("expert_dtype", f"{self.expert_dtype} is not a storage format")
        if self.kv_dtype in BLOCK_SCALED_DTYPES:
            raise SpecError(
                "kv_dtype",
                f"{self.kv_dtype} is a block-scaled weight format, not a KV-cache format "
                "(use bf16, fp16 or fp8)",
            )

    def with_tp(self, tp: int) -> Deployment:
        """This layout at another tp, expert parallelism (if any) kept over all tp x dp."""
        return replace(self, tp=tp, ep=tp * self.dp if self.ep > 1 else 1)

    def single_gpu(self) -> Deployment:
        """The formats of this deployment on one GPU (no tp, dp, ep or pp): itself when it is
        one already (a frozen value; saves a copy per request)."""
        if self.gpus == 1 and self.ep == 1:
            return self
        return replace(self, tp=1, dp=1, ep=1, pp=1)

    @property
    def gpus(self) -> int:
        """GPUs of one replica: tp x dp x pp."""
        return self.tp * self.dp * self.pp

    @property
    def scheduler_batches(self) -> int:
        """Batches a replica's schedulers keep in flight at once, each with the engine's
        limits: one per attention data-parallel rank (vLLM and SGLang run a scheduler per rank)
        and one micro-batch per pipeline stage (TensorRT-LLM's executor and vLLM keep `pp`
        batches in flight): dp x pp."""
        return self.dp * self.pp

    @property
    def expert_shards(self) -> int:
        """GPUs the experts of a layer are spread over: the tp x dp of a stage."""
        return self.tp * self.dp

    @property
    def imbalance(self) -> float:
        """The expert-parallel straggler factor: 1 without ep."""
        if self.ep == 1:
            return 1.0
        return DEFAULT_EXPERT_IMBALANCE if self.expert_imbalance is None else self.expert_imbalance

    @property
    def is_layout(self) -> bool:
        """More than tensor parallelism: dp, pp or ep above 1."""
        return self.dp > 1 or self.pp > 1 or self.ep > 1

    @property
    def has_exchanges(self) -> bool:
        """Whether its GPUs exchange activations in a step: tp above 1, or a layout."""
        return self.tp > 1 or self.is_layout


def expert_dtype_for(model: ModelSpec, deployment: Deployment) -> DType:
    """The format the experts are stored in: the deployment's `expert_dtype` if given; the
    checkpoint's expert format when the rest is served as published (gpt-oss's MXFP4 experts
    beside bf16 attention); else the deployment's `weight_dtype`."""
    if deployment.expert_dtype is not None:
        return deployment.expert_dtype
    if (
        model.expert_checkpoint_dtype is not None
        and deployment.weight_dtype is model.checkpoint_dtype
    ):
        return model.expert_checkpoint_dtype
    return deployment.weight_dtype


def within_context(model: ModelSpec, name: str, tokens: int) -> None:
    """`SpecError(name, ...)` when `tokens` exceed the model's context window."""
    limit = model.max_context_tokens
    if tokens > limit:
        raise SpecError(name, f"{tokens} tokens exceed the model's {limit}-token context")
