"""What the engine reasons about: a model, a GPU, how the model is deployed on it, and a workload.

All specs are frozen dataclasses that validate themselves: an impossible spec raises `ValueError`
with a message naming the field, so the service can turn it into a 422 without knowing the rule.
The service maps catalog rows onto these classes; inline specs in a request map onto the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from app.engine.dtypes import DType

__all__ = [
    "IDEAL_EFFICIENCY",
    "Deployment",
    "Efficiency",
    "FfnType",
    "GpuSpec",
    "InterconnectSpec",
    "ModelSpec",
    "MoeSpec",
    "SpecError",
    "positive",
    "rebuilt_exception",
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

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0  # 0: same width as a routed expert
    num_dense_layers: int = 0  # DeepSeek-style leading dense layers of `intermediate_size`

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
class ModelSpec:
    """A decoder-only transformer, in the terms of its Hugging Face `config.json`."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    ffn_type: FfnType
    vocab_size: int
    max_context_tokens: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Q/K/V projection biases (Qwen2)
    moe: MoeSpec | None = None
    checkpoint_dtype: DType = DType.BF16
    """The format the published weights are in: what a plan serves unless asked otherwise
    (fp8 or fp4 weights of a bf16 checkpoint are a quantisation, a change in quality)."""
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

    def __post_init__(self) -> None:
        positive("interconnect.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        if self.latency_s < 0:
            raise SpecError("interconnect.latency_s", "must not be negative")

    @property
    def unidirectional_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s / 2


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


@dataclass(frozen=True, slots=True)
class Deployment:
    """How the model is laid out: tensor-parallel degree and the formats of weights and KV cache."""

    tp: int = 1
    weight_dtype: DType = DType.BF16
    kv_dtype: DType = DType.BF16
    activation_dtype: DType = DType.BF16

    def __post_init__(self) -> None:
        positive("tp", self.tp)


def within_context(model: ModelSpec, name: str, tokens: int) -> None:
    """`SpecError(name, ...)` when `tokens` exceed the model's context window."""
    limit = model.max_context_tokens
    if tokens > limit:
        raise SpecError(name, f"{tokens} tokens exceed the model's {limit}-token context")
