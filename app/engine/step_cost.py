"""The one definition of a step's time: `StepCostModel.step_seconds` (and `seconds(load)`).

Built once from (model, gpu, deployment, efficiency), it holds one object per op family
(`app.engine.ops`: the GEMMs, the experts, prefill and decode attention, communication, the
engine's overhead), each folding the per-token counts of `app.engine.counting` together with the
GPU's peaks, bandwidth, interconnect and efficiencies into a few floats. A step is the sum of
its op classes' times plus communication and overhead; prefill and decode estimates, the
chunk-size search, the planner and the serving simulator all time their steps here, so they
cannot disagree. A measured profile (`app.engine.profiles.ProfiledStepCost`) replaces single
families by measured ones and keeps this step.

Per GPU of a tensor-parallel group, a step takes

    sum over op classes of max(FLOPs / (peak * eta_compute), bytes / (bandwidth * eta_memory))
    + norms and activations: kernels x 3 us + their bytes / (bandwidth * eta_memory)
    + tensor-parallel all-reduces + layout exchanges + overhead            (docs/model.md)

Under pipeline parallelism a step's sequences are split into one micro-batch per stage (at most
one per sequence), and the step takes what one micro-batch takes through every stage while the
others fill the other stages: `micro_batches`.

GEMMs (QKV, O, FFN, experts) compute in `compute_dtype_for(weight_dtype)` at `efficiency.gemm`;
the router and LM head stay in the activation format at `efficiency.gemm`; attention computes in
`attention_dtype_for(gpu, deployment)` at `efficiency.attention`. An attention data-parallel
layout times one rank's share of the step, windowed layers their window; a decode-only step runs
at the engine's next CUDA-graph batch size up (`graph_sizes`). An empty step takes 0 s.

Compiled with mypyc (setup.py) together with `app.engine.ops` and the measured families; the
source runs the same, only slower (tests/engine/test_compiled.py compares the two).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Hashable
from typing import Any, TypeVar, cast

from app.engine.counting import (
    KERNEL_LATENCY_MEMORY_EFFICIENCY,
    KERNEL_LATENCY_S,
    CountTotals,
    OpClass,
    OpCoefficients,
    StepCount,
    attention_dtype_for,
    bounded_by_window,
    count_step,
    count_totals,
    op_coefficients,
    pairs_for_chunk,
)
from app.engine.dtypes import BYTES_PER_ELEMENT, DType, compute_dtype_for
from app.engine.ops import (
    Communication,
    DecodeAttention,
    Experts,
    LinearOp,
    Overhead,
    PrefillAttention,
)
from app.engine.specs import (
    IDEAL_EFFICIENCY,
    Deployment,
    Efficiency,
    GpuSpec,
    ModelSpec,
    SpecError,
    expert_dtype_for,
)
from app.engine.step_load import StepLoad
from app.engine.timing import (
    Bound,
    OpTime,
    OpTimeRow,
    StepTime,
    TimeTotals,
    allreduce_seconds,
)

T = TypeVar("T")

__all__ = ["StepCostModel", "decode_load", "prefill_load", "trapezoid_sum"]

_DERIVED_KEPT = 64
"""At most this many values in one `StepCostModel`'s `derived` store."""


def prefill_load(
    query_tokens: int,
    *,
    batch_size: int = 1,
    cached_tokens: int = 0,
    causal: bool = True,
    decode_seqs: int = 0,
    decode_context_tokens: int = 0,
) -> StepLoad:
    """One step in which `batch_size` sequences each prefill `query_tokens` new tokens after
    `cached_tokens` already in their KV cache, beside `decode_seqs` decodes attending over
    `decode_context_tokens` in all (`decode_load(...) + prefill_load(...)`, in one record)."""
    pairs = pairs_for_chunk(query_tokens, cached_tokens, causal=causal)
    # Positional, in StepLoad's field order (keywords cost a named tuple a third more).
    return StepLoad(
        batch_size * query_tokens,
        batch_size,
        batch_size * pairs,
        batch_size * (cached_tokens + query_tokens),
        decode_seqs,
        decode_context_tokens,
    )


def decode_load(batch_size: int, context_tokens: int) -> StepLoad:
    """One decode step of `batch_size` sequences, each attending over `context_tokens`."""
    return StepLoad(decode_seqs=batch_size, decode_context_tokens=batch_size * context_tokens)


class StepRecord:
    """What `StepCostModel.step_seconds` adds up, kept for a breakdown: each op class's
    (compute s, memory s), the communication and the overhead of the step."""

    def __init__(self) -> None:
        self.rows: list[OpTimeRow] = []
        self.communication_s = 0.0
        self.overhead_s = 0.0


def _add(record: StepRecord | None, op_class: OpClass, compute_s: float, memory_s: float) -> float:
    """An op class's time, max(compute, memory), recorded when a breakdown is asked for."""
    if record is not None:
        record.rows.append((op_class, compute_s, memory_s))
    return memory_s if memory_s > compute_s else compute_s


class StepCostModel:
    """Times `StepLoad`s of one (model, gpu, deployment, efficiency). Immutable once built.

    `graph_sizes` are the decode batch sizes the serving engine captures CUDA graphs at (its
    policy's, `app.engine.serving`); empty: every batch runs at its own size.

    Raises `SpecError` when the deployment is impossible: `tp` that cannot split the heads, a
    weight format the GPU cannot compute in.
    """

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        deployment: Deployment | None = None,
        efficiency: Efficiency = IDEAL_EFFICIENCY,
        graph_sizes: tuple[int, ...] = (),
    ) -> None:
        deployment = deployment or Deployment()
        self.model = model
        self.gpu = gpu
        self.deployment = deployment
        self.efficiency = efficiency
        self.graph_sizes = graph_sizes
        self.gemm_dtype: DType = compute_dtype_for(deployment.weight_dtype, gpu.peak_flops_per_s)
        self.attention_dtype: DType = attention_dtype_for(gpu, deployment)
        self.expert_dtype: DType = compute_dtype_for(
            expert_dtype_for(model, deployment), gpu.peak_flops_per_s
        )
        c = op_coefficients(model, deployment, self.attention_dtype)
        self.coefficients: OpCoefficients = c
        gemm_rate = gpu.peak(self.gemm_dtype) * efficiency.gemm
        try:
            activation_rate = gpu.peak(deployment.activation_dtype) * efficiency.gemm
        except SpecError:
            raise SpecError(
                "gpu",
                f"GPU {gpu.id} has no {deployment.activation_dtype} compute for activations",
            ) from None
        attention_rate = gpu.peak(self.attention_dtype) * efficiency.attention
        bandwidth = gpu.memory_bandwidth_bytes_per_s * efficiency.memory
        self.gemm_rate = gemm_rate
        self.activation_rate = activation_rate
        self.attention_rate = attention_rate
        self.bandwidth = bandwidth
        # The op families, each timed by the roofline (a profile replaces some).
        self.qkv = LinearOp.of(
            OpClass.QKV_PROJ,
            c.qkv_flops_per_token,
            c.qkv_weight_bytes,
            c.qkv_activation_bytes_per_token,
            gemm_rate,
            bandwidth,
        )
        self.o = LinearOp.of(
            OpClass.O_PROJ,
            c.o_flops_per_token,
            c.o_weight_bytes,
            c.o_activation_bytes_per_token,
            gemm_rate,
            bandwidth,
        )
        self.has_ffn = c.ffn_flops_per_token > 0
        self.ffn = LinearOp.of(
            OpClass.FFN,
            c.ffn_flops_per_token,
            c.ffn_weight_bytes,
            c.ffn_activation_bytes_per_token,
            gemm_rate,
            bandwidth,
        )
        self.has_moe = c.expert_flops_per_token > 0
        self.router = LinearOp.of(
            OpClass.MOE_ROUTER,
            c.router_flops_per_token,
            c.router_weight_bytes,
            c.router_activation_bytes_per_token,
            activation_rate,
            bandwidth,
        )
        expert_rate = gpu.peak(self.expert_dtype) * efficiency.gemm
        self.experts = Experts.of(c, expert_rate, bandwidth, deployment.ep, deployment.imbalance)
        self.lm_head = LinearOp.of(
            OpClass.LM_HEAD,
            c.lm_head_flops_per_sequence,
            c.lm_head_weight_bytes,
            c.lm_head_activation_bytes_per_sequence,
            activation_rate,
            bandwidth,
        )
        # Norms, residual adds and activations (no table measures them): each kernel's fixed
        # latency once per step, its bytes per token. The latency is charged as memory time,
        # `KERNEL_LATENCY_S` at the bandwidth efficiency aiconfigurator-core assumes with it,
        # so that a calibration fitting `efficiency.memory` scales it with the other
        # memory-bound work (and decomposes it exactly, `app.engine.calibration`).
        # The ideal roofline (the seeds' model, `IDEAL_EFFICIENCY`) has none.
        kernel_s = KERNEL_LATENCY_S * KERNEL_LATENCY_MEMORY_EFFICIENCY / efficiency.memory
        ideal = efficiency == IDEAL_EFFICIENCY
        self.elementwise = LinearOp(
            OpClass.ELEMENTWISE,
            0.0,
            0.0 if ideal else c.elementwise_kernels * kernel_s,
            0.0 if ideal else c.elementwise_bytes_per_token / bandwidth,
        )
        self.prefill_attention = PrefillAttention.of(c, attention_rate, bandwidth)
        self.decode_attention = DecodeAttention.of(c, attention_rate, bandwidth)
        # All-reduces: the bandwidth term grows with tokens, the latency term is per step.
        per_token_layer = c.allreduce_bytes_per_token / max(c.allreduces_per_step, 1)
        tp_link = gpu.interconnect.tier(c.tp)
        latency_s = allreduce_seconds(0.0, c.tp, tp_link, efficiency)
        self.communication = Communication(
            (allreduce_seconds(per_token_layer, c.tp, tp_link, efficiency) - latency_s)
            * c.allreduces_per_step,
            latency_s * c.allreduces_per_step,
            layout_communication(model, gpu, deployment, efficiency, c)
            if deployment.is_layout
            else None,
            deployment.dp,
        )
        self.overhead = Overhead(efficiency.overhead_ms)
        self.request_overhead_s = 0.0
        """Latency each request's first token waits outside the steps (an engine's dispatch
        of its prefill, `ProfiledStepCost`); the roofline has none."""
        self.dp = deployment.dp
        self.windowed = c.window_share > 0
        self._derived: dict[Hashable, Any] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (for the process pool) as its arguments: a copy builds itself again."""
        return type(self), (
            self.model,
            self.gpu,
            self.deployment,
            self.efficiency,
            self.graph_sizes,
        )

    def derived(self, key: Hashable, make: Callable[[], T]) -> T:
        """What `make()` computes from this model's specs alone (no load), kept on the model
        under `key`: a fixed name, or a name and the few settings the value depends on. A cost
        model is built once per target and asked many times. `make` must be pure; at most
        `_DERIVED_KEPT` values are kept (the settings come from requests)."""
        derived = self._derived
        found = derived.get(key, derived)
        if found is derived:
            if len(derived) >= _DERIVED_KEPT:
                derived.clear()
            found = derived[key] = make()
        return cast("T", found)

    @property
    def kv_window(self) -> tuple[float, int] | None:
        """(share of layers, window tokens) when some layers attend within a window: the
        simulator's KV pool holds only their window (`simulate`); None otherwise."""
        c = self.coefficients
        return (c.window_share, c.window_tokens) if c.window_share else None

    @property
    def peak_flops_per_s(self) -> float:
        """Datasheet peak of one GPU in the GEMMs' compute format."""
        return self.gpu.peak(self.gemm_dtype)

    def seconds(self, load: StepLoad) -> float:
        """Seconds one forward step of `load` takes (`breakdown(load).total_s`, to rounding)."""
        return self._step(
            load.prefill_tokens,
            load.prefill_chunks,
            load.prefill_attention_pairs,
            load.prefill_kv_tokens,
            load.decode_seqs,
            load.decode_context_tokens,
            None,
        )

    def step_seconds(  # noqa: PLR0917 - positional: StepLoad's fields, in search loops
        self,
        prefill_tokens: float,
        prefill_chunks: float,
        prefill_attention_pairs: float,
        prefill_kv_tokens: float,
        decode_seqs: float,
        decode_context_tokens: float,
    ) -> float:
        """`seconds` of the `StepLoad` with these fields, without building it (for the
        simulator and for searches that time many candidate steps)."""
        return self._step(
            prefill_tokens,
            prefill_chunks,
            prefill_attention_pairs,
            prefill_kv_tokens,
            decode_seqs,
            decode_context_tokens,
            None,
        )

    def _step(  # noqa: PLR0915, PLR0917 - StepLoad's fields, then the record; one hot path
        self,
        prefill_tokens: float,
        prefill_chunks: float,
        prefill_attention_pairs: float,
        prefill_kv_tokens: float,
        decode_seqs: float,
        decode_context_tokens: float,
        record: StepRecord | None,
    ) -> float:
        """The step: its op classes' times in order, then communication and overhead; each op
        class recorded in `record` when one is given (`breakdown`)."""
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        replica_tokens = tokens  # what the experts, spread over tp x dp GPUs, see
        micro = self.micro_batches(prefill_chunks + decode_seqs)
        if self.dp > 1 or micro > 1.0:
            # One attention data-parallel rank's share of one pipeline micro-batch (fractional
            # counts are averages): the step is the time that micro-batch takes through every
            # stage, while the other micro-batches fill the other stages.
            share = 1.0 / (self.dp * micro)
            prefill_tokens *= share
            prefill_chunks *= share
            prefill_attention_pairs *= share
            prefill_kv_tokens *= share
            decode_seqs *= share
            decode_context_tokens *= share
            tokens = prefill_tokens + decode_seqs
            replica_tokens /= micro
        if self.windowed:
            prefill_attention_pairs, prefill_kv_tokens, decode_context_tokens = bounded_by_window(
                self.coefficients,
                prefill_tokens,
                prefill_chunks,
                prefill_attention_pairs,
                prefill_kv_tokens,
                decode_seqs,
                decode_context_tokens,
            )
        rows = tokens
        sequences = prefill_chunks + decode_seqs
        if self.graph_sizes and not prefill_tokens:
            # A decode-only step replays the CUDA graph captured at the next batch size up.
            rows = sequences = self.graph_rows(decode_seqs)
            if self.dp == 1:
                replica_tokens = rows
        compute_s, memory_s = self.qkv.parts(rows)
        total = _add(record, OpClass.QKV_PROJ, compute_s, memory_s)
        compute_s, memory_s = self.o.parts(rows)
        total += _add(record, OpClass.O_PROJ, compute_s, memory_s)
        if self.has_ffn:
            compute_s, memory_s = self.ffn.parts(rows)
            total += _add(record, OpClass.FFN, compute_s, memory_s)
        if self.has_moe:
            compute_s, memory_s = self.router.parts(rows)
            total += _add(record, OpClass.MOE_ROUTER, compute_s, memory_s)
            compute_s, memory_s = self.experts.parts(replica_tokens)
            total += _add(record, OpClass.MOE_EXPERTS, compute_s, memory_s)
        compute_s, memory_s = self.elementwise.parts(rows)
        total += _add(record, OpClass.ELEMENTWISE, compute_s, memory_s)
        if sequences > 0:
            compute_s, memory_s = self.lm_head.parts(sequences)
            total += _add(record, OpClass.LM_HEAD, compute_s, memory_s)
        if prefill_tokens > 0:
            compute_s, memory_s = self.prefill_attention.parts(
                prefill_tokens, prefill_chunks, prefill_attention_pairs, prefill_kv_tokens
            )
            total += _add(record, OpClass.PREFILL_ATTENTION, compute_s, memory_s)
        if decode_seqs > 0:
            compute_s, memory_s = self.decode_attention.parts(decode_seqs, decode_context_tokens)
            total += _add(record, OpClass.DECODE_ATTENTION, compute_s, memory_s)
        communication_s = self.communication.seconds(tokens, replica_tokens)
        overhead_s = self.overhead.seconds(sequences, tokens)
        if record is not None:
            record.communication_s = communication_s
            record.overhead_s = overhead_s
        return total + communication_s + overhead_s

    def micro_batches(self, sequences: float) -> float:
        """Pipeline micro-batches a step of `sequences` is split into: one per stage (TensorRT-
        LLM's executor and vLLM keep `pp` batches in flight, each scheduled with the engine's
        limits: `Deployment.scheduler_batches`), but never more than its sequences (one
        prompt is not split across micro-batches); 1 without pp."""
        stages = float(self.deployment.pp)
        if stages <= 1.0 or sequences <= 1.0:
            return 1.0
        return stages if sequences > stages else sequences

    def graph_rows(self, sequences: float) -> float:
        """The batch a decode-only step of `sequences` runs at: the smallest CUDA-graph size
        the engine captured that holds it; beyond the largest, or for an engine that does not
        pad, the batch as it is."""
        sizes = self.graph_sizes
        if not sizes or sequences > sizes[-1]:
            return sequences
        return float(sizes[bisect_left(sizes, sequences)])

    def _record(self, load: StepLoad) -> StepRecord:
        record = StepRecord()
        self._step(*load, record)
        return record

    def breakdown(self, load: StepLoad) -> StepTime:
        """Per-op-class compute and memory seconds of one step, plus communication and
        overhead (one GPU; `total_s` is `seconds(load)`, to rounding)."""
        record = self._record(load)
        ops = tuple(OpTime(op_class, c, m) for op_class, c, m in record.rows)
        return StepTime(ops, record.communication_s, record.overhead_s)

    def time_totals(self, load: StepLoad) -> TimeTotals:
        """`breakdown(load)` summed: its compute, memory and total seconds, the same floats,
        without building the per-op-class records (what an estimate reports of a step)."""
        record = self._record(load)
        return TimeTotals.of(record.rows, record.communication_s, record.overhead_s)

    def communication_seconds(self, load: StepLoad) -> float:
        """The all-reduces, expert exchanges and stage hand-offs of one step
        (`breakdown(load).communication_s`), from the step's token counts alone as `_step`
        derives them: a data-parallel rank's share of one pipeline micro-batch's tokens, and
        the micro-batch's (a decode-only step's padded to its CUDA graph without data
        parallelism)."""
        prefill_tokens, decode_seqs = float(load.prefill_tokens), float(load.decode_seqs)
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        replica_tokens = tokens
        micro = self.micro_batches(float(load.prefill_chunks) + decode_seqs)
        if self.dp > 1 or micro > 1.0:
            share = 1.0 / (self.dp * micro)
            prefill_tokens *= share
            decode_seqs *= share
            tokens = prefill_tokens + decode_seqs
            replica_tokens /= micro
        if self.dp == 1 and self.graph_sizes and not prefill_tokens:
            replica_tokens = self.graph_rows(decode_seqs)
        return self.communication.seconds(tokens, replica_tokens)

    def sum_seconds(self, first: StepLoad, step: StepLoad, count: int) -> float:
        """Sum of `seconds(first + j * step)` for j in 0..count-1.

        Only the attention fields of `step` may be non-zero (pairs, KV tokens, decode context):
        the loads of a chunked prefill or of successive decode steps. With the roofline's
        attention each step's time is then piecewise linear in j, with a kink where an
        attention op class turns from memory- to compute-bound; on each linear piece the sum
        is count * (first + last) / 2, exactly, in O(1). Measured attention, and windowed
        layers whose window binds, are summed step by step or by the trapezoid rule.
        """
        if count <= 0:
            return 0.0
        if step.prefill_tokens or step.prefill_chunks or step.decode_seqs:
            raise ValueError("sum_seconds: only attention fields of `step` may vary")
        if self.windowed and self._window_binds(first, step, count):
            # The window's bound adds kinks that move the compute/memory crossings: sum step by
            # step (a microsecond each), or by the trapezoid rule over very long runs.
            return trapezoid_sum(self.step_seconds, first, step, count, exact_up_to=4096)
        if not (self.prefill_attention.linear and self.decode_attention.linear):
            return trapezoid_sum(self.step_seconds, first, step, count)
        then = first + step
        kinks: set[int] = set()
        lines: list[tuple[tuple[float, float], tuple[float, float]]] = []
        if first.prefill_tokens > 0:
            lines.append(
                (
                    self.prefill_attention.parts(
                        first.prefill_tokens,
                        first.prefill_chunks,
                        first.prefill_attention_pairs,
                        first.prefill_kv_tokens,
                    ),
                    self.prefill_attention.parts(
                        then.prefill_tokens,
                        then.prefill_chunks,
                        then.prefill_attention_pairs,
                        then.prefill_kv_tokens,
                    ),
                )
            )
        if first.decode_seqs > 0:
            lines.append(
                (
                    self.decode_attention.parts(first.decode_seqs, first.decode_context_tokens),
                    self.decode_attention.parts(then.decode_seqs, then.decode_context_tokens),
                )
            )
        for (compute0, memory0), (compute1, memory1) in lines:
            compute_slope, memory_slope = compute1 - compute0, memory1 - memory0
            if compute_slope != memory_slope:
                crossing = (memory0 - compute0) / (compute_slope - memory_slope)
                if 0.0 <= crossing < count - 1:
                    kinks.add(math.floor(crossing))
        total, start = 0.0, 0
        for end in [*sorted(kinks), count - 1]:
            if end < start:
                continue
            total += (
                (end - start + 1)
                * (self._at(first, step, start) + self._at(first, step, end))
                / 2.0
            )
            start = end + 1
        return total

    def _at(self, first: StepLoad, step: StepLoad, j: int) -> float:
        """`seconds(first + j * step)` for a `step` of attention fields only."""
        return self.step_seconds(
            first.prefill_tokens,
            first.prefill_chunks,
            first.prefill_attention_pairs + j * step.prefill_attention_pairs,
            first.prefill_kv_tokens + j * step.prefill_kv_tokens,
            first.decode_seqs,
            first.decode_context_tokens + j * step.decode_context_tokens,
        )

    def _window_binds(self, first: StepLoad, step: StepLoad, count: int) -> bool:
        """Whether the window bounds any step of `first + j * step` (the attention fields only
        grow with j, so the last step tells)."""
        window, last = self.coefficients.window_tokens, count - 1
        return (
            first.prefill_attention_pairs + last * step.prefill_attention_pairs
            > first.prefill_tokens * window
            or first.prefill_kv_tokens + last * step.prefill_kv_tokens
            > first.prefill_chunks * window
            or first.decode_context_tokens + last * step.decode_context_tokens
            > first.decode_seqs * window
        )

    def count(self, load: StepLoad, *, steps: int = 1) -> StepCount:
        """FLOPs and bytes of `load` across the whole deployment (see `counting.count_step`)."""
        return count_step(self.coefficients, load, steps=steps)

    def count_totals(
        self, load: StepLoad, *, steps: int = 1, then: StepLoad | None = None
    ) -> CountTotals:
        """`count(load, steps=steps)` summed by kind, with one more step `then` when given
        (see `counting.count_totals`)."""
        return count_totals(self.coefficients, load, steps=steps, then=then)

    def bound_of(self, totals: CountTotals) -> Bound:
        """Compute-bound when the counted FLOPs at this GPU's (efficient) rates take at least as
        long as the counted bytes at its (efficient) bandwidth: the GEMMs at the weights'
        format, the router and LM head at the activations', attention at its own."""
        per_gpu = 1.0 / self.deployment.tp
        activation_flops = totals.router_flops + totals.lm_head_flops
        compute_s = (
            (totals.linear_flops - totals.router_flops) * per_gpu / self.gemm_rate
            + activation_flops * per_gpu / self.activation_rate
            + totals.attention_flops * per_gpu / self.attention_rate
        )
        memory_s = totals.bytes * per_gpu / self.bandwidth
        return Bound.COMPUTE if compute_s >= memory_s else Bound.MEMORY


_SUM_SEGMENTS = 16


def trapezoid_sum(
    step_seconds: Callable[[float, float, float, float, float, float], float],
    first: StepLoad,
    step: StepLoad,
    count: int,
    *,
    exact_up_to: int = _SUM_SEGMENTS + 1,
) -> float:
    """Sum of the step times of `first + j * step` for j in 0..count-1: step by step up to
    `exact_up_to` steps, else the trapezoid rule over 16 segments plus the end correction (for
    step times smooth or piecewise linear in j: within 0.1 % of step by step)."""

    tokens, chunks, seqs = first.prefill_tokens, first.prefill_chunks, first.decode_seqs
    pairs, kv_tokens, context = (
        first.prefill_attention_pairs,
        first.prefill_kv_tokens,
        first.decode_context_tokens,
    )
    pairs_step, kv_step, context_step = (
        step.prefill_attention_pairs,
        step.prefill_kv_tokens,
        step.decode_context_tokens,
    )

    def at(j: int) -> float:
        return step_seconds(
            tokens,
            chunks,
            pairs + j * pairs_step,
            kv_tokens + j * kv_step,
            seqs,
            context + j * context_step,
        )

    if count <= max(exact_up_to, _SUM_SEGMENTS + 1):
        return sum(map(at, range(count)))
    last = count - 1
    # More than 16 steps: the marks are over one step apart, so distinct and increasing.
    marks = [round(i * last / _SUM_SEGMENTS) for i in range(_SUM_SEGMENTS + 1)]
    values = list(map(at, marks))
    integral = sum(
        (b - a) * (fa + fb) / 2.0
        for a, b, fa, fb in zip(marks, marks[1:], values, values[1:], strict=False)
    )
    return integral + (values[0] + values[-1]) / 2.0


def layout_communication(
    model: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment,
    efficiency: Efficiency,
    c: OpCoefficients,
) -> tuple[float, float, float, float]:
    """(seconds per replica token, seconds per step, seconds per rank token, the part of the
    seconds per step that the pipeline hand-offs take) of the exchanges a layout adds to the TP
    all-reduces, over the link tier each group of GPUs reaches:

    - ep: per MoE layer a dispatch and a combine all-to-all; each GPU sends its 1/(tp x dp)
      share of the tokens to k experts, (ep - 1)/ep of them elsewhere: 2 x k x d x
      activation bytes x (ep - 1)/ep per token over the one-way link, plus two latencies;
    - dp without ep: per MoE layer the tokens of all ranks meet the tensor-sliced experts, an
      all-reduce of d per replica token over the tp x dp GPUs;
    - pp: (pp - 1) hand-offs of d per token of a rank between consecutive stages.
    """
    act_b = BYTES_PER_ELEMENT[deployment.activation_dtype]
    d, link = model.hidden_size, gpu.interconnect
    shards, moe_layers = c.expert_shards, c.moe_layers
    per_token = latency = 0.0
    if moe_layers and deployment.ep > 1:
        tier = link.tier(shards)
        bandwidth = tier.unidirectional_bytes_per_s * efficiency.communication
        ep = deployment.ep
        per_token = 2.0 * c.experts_per_token * d * act_b * (ep - 1) / ep / shards / bandwidth
        per_token *= moe_layers
        latency = 2.0 * tier.latency_s * moe_layers
    elif moe_layers and shards > deployment.tp:
        tier = link.tier(shards)
        step = allreduce_seconds(0.0, shards, tier, efficiency)
        per_token = (allreduce_seconds(d * act_b, shards, tier, efficiency) - step) * moe_layers
        latency = step * moe_layers
    stage = stage_latency = 0.0
    if deployment.pp > 1:
        tier = link.tier(deployment.gpus)
        bandwidth = tier.unidirectional_bytes_per_s * efficiency.communication
        stage = (deployment.pp - 1) * d * act_b / bandwidth
        stage_latency = (deployment.pp - 1) * tier.latency_s
        latency += stage_latency
    return per_token, latency, stage, stage_latency
