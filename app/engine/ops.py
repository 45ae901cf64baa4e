"""The op families a forward step is made of, each timed by the roofline: one small class per
family, built once per (model, GPU, deployment, efficiency) from the per-GPU counts of
`app.engine.counting.OpCoefficients`, each answering one question about one step.

- `LinearOp`: a GEMM op class (QKV, O, the dense FFN, the MoE router, the LM head) of `rows`
  rows: (compute s, memory s), its weights read once per step.
- `Experts`: the routed and shared experts of the replica's tokens on the busiest GPU.
- `PrefillAttention`, `DecodeAttention`: attention of the step's prefill chunks and decodes.
- `Communication`: the tensor-parallel all-reduces and the layout's exchanges, seconds.
- `Overhead`: what the engine spends per step outside the kernels, seconds.

An op class's time is `max(compute s, memory s)` (docs/model.md, section 3). A measured profile
replaces a family by a subclass that reads its tables (`app.engine.profiles.measured`);
`StepCostModel.step_seconds` composes the families and is the one definition of a step's time.

Compiled with mypyc (setup.py) together with the step: plain, annotated Python, every count a
float (a data-parallel rank's share of a step is fractional).
"""

from __future__ import annotations

from app.engine.counting import (
    OpClass,
    OpCoefficients,
    expected_distinct_experts,
    straggler_factor,
)

__all__ = [
    "Communication",
    "DecodeAttention",
    "Experts",
    "LinearOp",
    "Overhead",
    "PrefillAttention",
    "bound_side",
    "floored",
]


def bound_side(compute_s: float, memory_s: float, seconds: float) -> tuple[float, float]:
    """(compute s, memory s) scaled so that the larger of the two is `seconds`, the other in
    proportion: a measured time reported with the roofline's bound."""
    if memory_s > compute_s:
        return compute_s * (seconds / memory_s), seconds
    if compute_s > 0.0:
        return seconds, memory_s * (seconds / compute_s)
    return seconds, memory_s


def floored(compute_s: float, memory_s: float, floor_s: float) -> tuple[float, float]:
    """(compute s, memory s) of an op class that takes at least `floor_s` (its kernels at the
    fastest measured, `LinearOp.floor_s`): below it the op is latency-bound, charged as its
    memory side."""
    if compute_s < floor_s and memory_s < floor_s:
        return compute_s, floor_s
    return compute_s, memory_s


class LinearOp:
    """A GEMM op class over all layers on one GPU: compute seconds per row, a weight read per
    step and activations per row (`linear_op` builds one from its counts)."""

    def __init__(
        self,
        op_class: OpClass,
        compute_s_per_row: float,
        weights_s: float,
        memory_s_per_row: float,
    ) -> None:
        self.op_class = op_class
        self.compute_s_per_row = compute_s_per_row
        self.weights_s = weights_s
        self.memory_s_per_row = memory_s_per_row
        self.floor_s = 0.0
        """The least the op class takes in a step, whatever its rows: its kernels' count times
        the fastest such kernel the GPU was measured running (`ProfiledStepCost`); 0: none."""

    @classmethod
    def of(  # noqa: PLR0917 - an op class's counts and rates, in order
        cls,
        op_class: OpClass,
        flops_per_row: float,
        weight_bytes: float,
        activation_bytes_per_row: float,
        flops_per_s: float,
        bytes_per_s: float,
    ) -> LinearOp:
        """The op class computing at `flops_per_s` and moving bytes at `bytes_per_s`."""
        return LinearOp(
            op_class,
            flops_per_row / flops_per_s,
            weight_bytes / bytes_per_s,
            activation_bytes_per_row / bytes_per_s,
        )

    def parts(self, rows: float) -> tuple[float, float]:
        return floored(
            rows * self.compute_s_per_row,
            self.weights_s + rows * self.memory_s_per_row,
            self.floor_s,
        )


class Experts:
    """The MoE layers' routed and shared experts on one of the tp x dp GPUs they are spread
    over, for the whole replica's tokens: compute per token; the weights of the distinct
    experts the tokens pick (uniform top-k routing), the shared ones and activations per token.
    Under ep the busiest GPU sets the pace: the traffic's skew (`Deployment.imbalance`) times
    the randomness of routing few tokens (`straggler_factor`), which dominates small decode
    batches."""

    def __init__(  # noqa: PLR0917 - its coefficients, in order
        self,
        compute_s_per_token: float,
        expert_weights_s: float,
        shared_weights_s: float,
        memory_s_per_token: float,
        num_experts: int,
        experts_per_token: int,
        ep: int,
        imbalance: float,
    ) -> None:
        self.compute_s_per_token = compute_s_per_token
        self.expert_weights_s = expert_weights_s
        self.shared_weights_s = shared_weights_s
        self.memory_s_per_token = memory_s_per_token
        self.num_experts = num_experts
        self.experts_per_token = experts_per_token
        self.ep = ep
        self.imbalance = imbalance
        self.floor_s = 0.0
        """As `LinearOp.floor_s`: the MoE layers' fused kernels at their fastest measured."""

    @classmethod
    def of(
        cls, c: OpCoefficients, flops_per_s: float, bytes_per_s: float, ep: int, imbalance: float
    ) -> Experts:
        """The experts of `c` computing at `flops_per_s`, moving bytes at `bytes_per_s`."""
        return Experts(
            c.expert_flops_per_token / flops_per_s,
            c.routed_expert_weight_bytes / bytes_per_s,
            c.shared_expert_weight_bytes / bytes_per_s,
            c.expert_activation_bytes_per_token / bytes_per_s,
            c.num_experts,
            c.experts_per_token,
            ep,
            imbalance,
        )

    def straggler(self, tokens: float) -> float:
        """The busiest GPU's routed work over the mean; 1 without ep."""
        if self.ep == 1:
            return 1.0
        picks: int = round(tokens) * self.experts_per_token
        return self.imbalance * straggler_factor(picks, self.ep)

    def parts(self, tokens: float) -> tuple[float, float]:
        distinct = expected_distinct_experts(self.num_experts, self.experts_per_token, tokens)
        straggler = self.straggler(tokens)
        return floored(
            straggler * tokens * self.compute_s_per_token,
            straggler
            * (
                distinct * self.expert_weights_s
                + self.shared_weights_s
                + tokens * self.memory_s_per_token
            ),
            self.floor_s,
        )


class PrefillAttention:
    """Attention of a step's prefill chunks on one GPU: compute per query-key pair (and, with
    MLA, per attended token whose latent is decompressed), memory per new token (Q and O
    streamed, K and V written) and per KV token streamed."""

    def __init__(
        self,
        compute_s_per_pair: float,
        expand_s_per_kv_token: float,
        memory_s_per_token: float,
        kv_s_per_token: float,
    ) -> None:
        self.compute_s_per_pair = compute_s_per_pair
        self.expand_s_per_kv_token = expand_s_per_kv_token
        self.memory_s_per_token = memory_s_per_token
        self.kv_s_per_token = kv_s_per_token
        self.linear = True
        """Its time is piecewise linear in the pairs and KV tokens: `StepCostModel.sum_seconds`
        sums a run of steps in closed form (a measured table is not)."""

    @classmethod
    def of(cls, c: OpCoefficients, flops_per_s: float, bytes_per_s: float) -> PrefillAttention:
        """The prefill attention of `c` computing at `flops_per_s`, moving bytes at
        `bytes_per_s`."""
        kv_s = c.kv_bytes_per_token / bytes_per_s
        return PrefillAttention(
            c.attention_flops_per_pair / flops_per_s,
            c.prefill_expand_flops_per_token / flops_per_s,
            c.attention_qo_bytes_per_token / bytes_per_s + kv_s,
            kv_s,
        )

    def parts(
        self, tokens: float, chunks: float, pairs: float, kv_tokens: float
    ) -> tuple[float, float]:
        return (
            pairs * self.compute_s_per_pair + kv_tokens * self.expand_s_per_kv_token,
            tokens * self.memory_s_per_token + kv_tokens * self.kv_s_per_token,
        )


class DecodeAttention:
    """Attention of a step's decodes on one GPU: compute per context token (and, with MLA, the
    absorbed projections per sequence), memory per sequence (Q and O, its new K and V) and per
    context token read."""

    def __init__(
        self,
        compute_s_per_context_token: float,
        absorb_s_per_sequence: float,
        memory_s_per_sequence: float,
        kv_s_per_token: float,
    ) -> None:
        self.compute_s_per_context_token = compute_s_per_context_token
        self.absorb_s_per_sequence = absorb_s_per_sequence
        self.memory_s_per_sequence = memory_s_per_sequence
        self.kv_s_per_token = kv_s_per_token
        self.linear = True
        """As `PrefillAttention.linear`, in the context tokens."""

    @classmethod
    def of(cls, c: OpCoefficients, flops_per_s: float, bytes_per_s: float) -> DecodeAttention:
        """The decode attention of `c` computing at `flops_per_s`, moving bytes at
        `bytes_per_s`."""
        kv_s = c.kv_bytes_per_token / bytes_per_s
        return DecodeAttention(
            c.decode_attention_flops_per_token / flops_per_s,
            c.decode_absorb_flops_per_sequence / flops_per_s,
            c.decode_qo_bytes_per_sequence / bytes_per_s + kv_s,
            kv_s,
        )

    def parts(self, sequences: float, context_tokens: float) -> tuple[float, float]:
        return (
            context_tokens * self.compute_s_per_context_token
            + sequences * self.absorb_s_per_sequence,
            sequences * self.memory_s_per_sequence + context_tokens * self.kv_s_per_token,
        )


class Communication:
    """A step's exchanges between GPUs: the tensor-parallel all-reduces of a rank's tokens
    (a bandwidth term per token and a latency term per step), and the layout's own
    (`app.engine.step_cost.layout_communication`: expert all-to-alls or all-reduces beyond the
    TP group per replica token, pipeline hand-offs per rank token, their latencies)."""

    def __init__(
        self,
        allreduce_s_per_token: float,
        allreduce_latency_s: float,
        layout: tuple[float, float, float, float] | None,
        dp: int,
    ) -> None:
        self.allreduce_s_per_token = allreduce_s_per_token
        self.allreduce_latency_s = allreduce_latency_s
        self.has_layout = layout is not None
        (
            self.layout_s_per_token,
            self.layout_latency_s,
            self.stage_s_per_token,
            self.stage_latency_s,
        ) = layout or (0.0, 0.0, 0.0, 0.0)
        """`stage_latency_s`: the pipeline hand-offs' part of `layout_latency_s`."""
        self.dp = dp

    def layout_terms(self) -> tuple[float, float, float, float] | None:
        """The layout's terms as the constructor takes them (None: a plain tp layout)."""
        if not self.has_layout:
            return None
        return (
            self.layout_s_per_token,
            self.layout_latency_s,
            self.stage_s_per_token,
            self.stage_latency_s,
        )

    def tensor_parallel(self, tokens: float) -> float:
        """The all-reduces of a rank's `tokens` within its TP group (0 s without tp)."""
        return tokens * self.allreduce_s_per_token + self.allreduce_latency_s

    def layout(self, replica_tokens: float) -> float:
        """The layout's exchanges of the replica's tokens (0 s for a plain tp layout)."""
        if not self.has_layout:
            return 0.0
        return (
            replica_tokens * self.layout_s_per_token
            + replica_tokens / self.dp * self.stage_s_per_token
            + self.layout_latency_s
        )

    def seconds(self, tokens: float, replica_tokens: float) -> float:
        if not self.has_layout:
            return self.tensor_parallel(tokens)
        return self.tensor_parallel(tokens) + self.layout(replica_tokens)


class Overhead:
    """What the engine spends per step outside the kernels (scheduling, input preparation,
    sampling, launches): `step_ms + per_sequence_ms * sequences + per_token_ms * tokens`. The
    roofline's is the GPU's `efficiency.overhead_ms` alone; a profile's is its engine's."""

    def __init__(
        self, step_ms: float, per_sequence_ms: float = 0.0, per_token_ms: float = 0.0
    ) -> None:
        self.step_ms = step_ms
        self.per_sequence_ms = per_sequence_ms
        self.per_token_ms = per_token_ms

    def seconds(self, sequences: float, tokens: float) -> float:
        return (
            self.step_ms + self.per_sequence_ms * sequences + self.per_token_ms * tokens
        ) / 1000.0
