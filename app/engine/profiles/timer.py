"""Step time from measured kernels: `ProfiledStepCost`, a `StepCostModel` whose op classes are
timed from a `Profile`'s tables where they cover the shape, and by the roofline at the profile's
fitted efficiencies where they do not.

Built once per (model, GPU, deployment, profile), it reduces the profile's tables to the model's
own shapes: one curve per linear op class over M (tokens through the layer), one over sequences
for the LM head, the prefill and decode attention tables of the model's head layout, the
fused-MoE curve of its layer shape and the all-reduce curve at its tensor-parallel degree; each
becomes the measured op family (`app.engine.profiles.measured`) in place of the roofline's, and
the step is `StepCostModel`'s own. Timing a step is then a handful of memoised look-ups.

Per GPU of the tensor-parallel group, a step takes

    sum over layers of GEMM(M, N, K) for QKV, O and the FFN      (N split across tp)
    + GEMM(sequences, vocab / tp, d)                              (the LM head)
    + layers x attention(batch, tokens) of the heads on this GPU
      (DeepSeek-V3-shaped MLA: layers x the MLA module(batch, tokens), its projections with it)
    + 2 x layers x all-reduce(tokens x d x 2 bytes, tp)
    + under ep, 2 x MoE layers x all-to-all(tokens / (tp x dp) x k x d x 2 bytes, tp x dp)
    + the MoE router by the roofline; routed experts from the profile's fused-MoE table of the
      layer shape and split (tokens, hidden, expert width, top-k, experts, tp, ep) and shared
      experts from the GEMM table, else both by the roofline
    + the engine's overhead(sequences, tokens)

and each request's first token waits `request_overhead_s` more: the engine's per-layer dispatch
of a new request's prefill, which kernel timings do not see (none by default; a calibration to
serving runs fits it).

A decode-only step runs at the engine's next CUDA-graph batch size up (its policy's
`graph_sizes`, `app.engine.serving`).

Tables measured on another GPU (`measured_on`, a relative of this one: `app.catalog.relatives`)
are scaled as they are reduced: each point by the ratio of the two GPUs' roofline times of that
op and shape, at the profile's fitted efficiencies (docs/model.md, section 6b).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from weakref import WeakKeyDictionary

from app.engine.dtypes import DType
from app.engine.ops import LinearOp, Overhead
from app.engine.profiles.grid import Curve, Grid
from app.engine.profiles.measured import (
    MEMO_ENTRIES,
    MeasuredCommunication,
    MeasuredDecodeAttention,
    MeasuredExperts,
    MeasuredLinear,
    MeasuredPrefillAttention,
)
from app.engine.profiles.profile import ELEMENTWISE_BASIS, OpFamily, Profile, step_families
from app.engine.serving import policy_of
from app.engine.specs import Deployment, Efficiency, GpuSpec, ModelSpec, expert_dtype_for
from app.engine.step_cost import StepCostModel

__all__ = ["ProfiledStepCost", "kernel_floors"]

_MS = 1e-3


def _gemm_ms(grid: Grid, m: float, n: float, k: float) -> float | None:
    """One GEMM, with N and K beyond the table split into parts that fit (a wide GEMM is several
    narrower ones; a deep one, several partial sums)."""
    n_max, k_max = grid.bounds(1)[1], grid.bounds(2)[1]
    n_parts, k_parts = max(1, math.ceil(n / n_max)), max(1, math.ceil(k / k_max))
    one = grid.at(m, max(n / n_parts, grid.bounds(1)[0]), max(k / k_parts, grid.bounds(2)[0]))
    return None if one is None else one * n_parts * k_parts


def _layered(grid: Grid, m: float, n: float, k: float, layers: int) -> float | None:
    one = _gemm_ms(grid, m, n, k)
    return None if one is None else one * layers


def _curve(
    xs: tuple[float, ...], time_ms: list[float | None], *, from_one: bool = True
) -> Curve | None:
    """Seconds by x from the measured points; None when none was measured (or, `from_one`,
    when the first measured x is above 1: a token curve must cover a single token)."""
    points = [(x, t * _MS) for x, t in zip(xs, time_ms, strict=True) if t is not None]
    if not points or (from_one and points[0][0] > 1):
        return None
    return Curve(tuple(x for x, _ in points), tuple(t for _, t in points))


class ProfiledStepCost(StepCostModel):
    """Times `StepLoad`s from `profile`; a `StepCostModel` in every other respect (counts,
    bounds, coefficients). `efficiency` is the roofline's for shapes the profile does not cover
    (default: the profile's fitted efficiencies)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        deployment: Deployment | None,
        profile: Profile,
        efficiency: Efficiency | None = None,
        *,
        memo_entries: int = MEMO_ENTRIES,
        measured_on: GpuSpec | None = None,
    ) -> None:
        deployment = deployment or Deployment()
        graphs = policy_of(profile.engine).graph_sizes(profile.version, deployment.tp)
        super().__init__(model, gpu, deployment, efficiency or profile.fitted, graphs)
        self.profile = profile
        self.memo_entries = memo_entries
        """Shapes each of its measured op classes remembers (`measured.MEMO_ENTRIES`)."""
        self.given_efficiency = efficiency
        self.measured_on = measured_on
        """The GPU the profile's tables were measured on, when it is not `gpu`: each table read
        is scaled by the ratio of the two GPUs' roofline times of the same op and shape (the
        kernels' efficiency on the measured GPU carried over to this one's datasheet)."""
        self.reference: StepCostModel | None = (
            None
            if measured_on is None
            else StepCostModel(model, measured_on, deployment, efficiency or profile.fitted, graphs)
        )
        # MLA's projections and attention are not the GQA shapes the GEMM and attention tables
        # hold: DeepSeek-V3's are timed by the MLA module tables where the profile has them,
        # other MLA shapes by the roofline fitted to the profile.
        mla = model.mla is not None
        measured: set[OpFamily] = set()
        if self._measure_gemms(mla):
            measured.add(OpFamily.GEMM)
        experts = _moe_curve(model, deployment, profile)
        if experts is not None:
            experts = self._rescaled(experts, lambda c, n: _bound(c.experts.parts(n)))
            self.experts = MeasuredExperts(self.experts, experts, memo_entries)
            measured.add(OpFamily.MOE)
        if not mla:
            measured |= self._measure_attention()
        elif self._measure_mla_module():
            measured |= {OpFamily.PREFILL_ATTENTION, OpFamily.DECODE_ATTENTION}
            if isinstance(self.lm_head, MeasuredLinear):
                measured.add(OpFamily.GEMM)
        else:
            measured |= self._measure_mla_kernels()
        if self._measure_communication():
            measured.add(OpFamily.COMMUNICATION)
        self._floor_gemms()
        overhead = profile.overhead
        self.overhead = Overhead(overhead.step_ms, overhead.per_sequence_ms, overhead.per_token_ms)
        self.request_overhead_s = overhead.prefill_per_layer_ms * model.num_layers / 1000.0
        self.basis = self._basis(measured)

    def _floor_gemms(self) -> None:
        """No GEMM-family op class is faster than its kernels, each at the fastest the profile's
        tables show on the GPU they were measured on (`kernel_floors`): a kernel's launch and
        latency, which FLOPs and bytes never show. Per step: QKV one GEMM a layer (MLA: q_a,
        q_b and kv_a, or q and kv_a without a query rank), O one, a dense FFN two (gate-up and
        down), the router one a MoE layer, the LM head one; the experts the fused-MoE kernel a
        MoE layer and, with shared experts, their two GEMMs. Measured shapes keep their own
        times; the floors bind where the roofline times a shape the tables do not reach."""
        gemm_s, moe_s = kernel_floors(self.profile)
        model = self.model
        layers, mla, moe = model.num_layers, model.mla, model.moe
        moe_layers = 0 if moe is None else layers - moe.num_dense_layers
        projections = 1 if mla is None else (3 if mla.q_lora_rank else 2)
        for op, kernels in (
            (self.qkv, projections * layers),
            (self.o, layers),
            (self.ffn, 2 * (layers - moe_layers)),
            (self.router, moe_layers),
            (self.lm_head, 1),
        ):
            if op.weights_s > 0 or op.compute_s_per_row > 0:  # MLA's module zeroes QKV and O
                op.floor_s = kernels * gemm_s
        if moe is not None:
            shared = 2 * gemm_s if moe.num_shared_experts else 0.0
            self.experts.floor_s = moe_layers * (moe_s + shared)

    def _measure_gemms(self, mla: bool) -> bool:
        """The linear op classes from the GEMM table of the weights' format (the LM head from
        the activations'; MLA's projections as the GEMMs an engine runs them in); whether QKV,
        O and the LM head all are."""
        model, deployment, profile = self.model, self.deployment, self.profile
        tp, d, layers = deployment.tp, model.hidden_size, model.num_layers
        moe = model.moe
        dense_layers = layers if moe is None else moe.num_dense_layers
        gemm = _table_for(profile.gemm, deployment.weight_dtype)
        curves = 0
        if gemm is not None:
            ms = gemm.axes[0]
            qkv_ms, o_ms = (_mla_projections if mla else _gqa_projections)(gemm, model, tp)
            qkv = _curve(ms, [qkv_ms(m) for m in ms])
            o = _curve(ms, [o_ms(m) for m in ms])
            if qkv is not None:
                qkv = self._rescaled(qkv, lambda c, m: _bound(c.qkv.parts(m)))
                self.qkv = MeasuredLinear(self.qkv, qkv, self.memo_entries)
                curves += 1
            if o is not None:
                o = self._rescaled(o, lambda c, m: _bound(c.o.parts(m)))
                self.o = MeasuredLinear(self.o, o, self.memo_entries)
                curves += 1
            if dense_layers and self.has_ffn:
                width = model.intermediate_size / tp
                up = (model.ffn_type.matrices - 1) * width
                ffn = _curve(
                    ms,
                    [
                        _sum(
                            _layered(gemm, m, up, d, dense_layers),
                            _layered(gemm, m, d, width, dense_layers),
                        )
                        for m in ms
                    ],
                )
                if ffn is not None:
                    ffn = self._rescaled(ffn, lambda c, m: _bound(c.ffn.parts(m)))
                    self.ffn = MeasuredLinear(self.ffn, ffn, self.memo_entries)
        activation_gemm = _table_for(profile.gemm, deployment.activation_dtype)
        if activation_gemm is not None:
            ms = activation_gemm.axes[0]
            lm = _curve(ms, [_gemm_ms(activation_gemm, m, model.vocab_size / tp, d) for m in ms])
            if lm is not None:
                lm = self._rescaled(lm, lambda c, m: _bound(c.lm_head.parts(m)))
                self.lm_head = MeasuredLinear(self.lm_head, lm, self.memo_entries)
                curves += 1
        return curves == 3

    def _head_layout(self) -> tuple[int, int, int]:
        """(query heads, KV heads, head width) on one GPU of the tp group."""
        model, tp = self.model, self.deployment.tp
        return model.num_attention_heads // tp, max(1, model.num_kv_heads // tp), model.head_dim

    def _measure_attention(self) -> set[OpFamily]:
        """Prefill and decode attention from the tables of the model's head layout."""
        heads, kv_heads, h = self._head_layout()
        kv_dtype, layers = self.deployment.kv_dtype, self.model.num_layers
        measured: set[OpFamily] = set()
        if kv_dtype not in self.profile.prefill_attention and kv_dtype in _SAME_BYTES:
            kv_dtype = _SAME_BYTES[kv_dtype]
        prefill = self.profile.attention(True, kv_dtype, heads, kv_heads, h)
        if prefill is not None:
            grid, scale = prefill
            self.prefill_attention = MeasuredPrefillAttention(
                self.prefill_attention,
                self._rescaled_grid(grid, _prompt_s),
                scale,
                layers,
                self.memo_entries,
            )
            measured.add(OpFamily.PREFILL_ATTENTION)
        decode = self.profile.attention(False, kv_dtype, heads, kv_heads, h)
        if decode is not None:
            grid, scale = decode
            self.decode_attention = MeasuredDecodeAttention(
                self.decode_attention,
                self._rescaled_grid(grid, _context_s),
                scale,
                layers,
                self.memo_entries,
            )
            measured.add(OpFamily.DECODE_ATTENTION)
        return measured

    def _rescaled(self, curve: Curve, seconds: Callable[[StepCostModel, float], float]) -> Curve:
        """`curve` as this GPU runs it where `measured_on` measured it: each point times the
        ratio of the two GPUs' roofline `seconds` (of a cost model, at the point's x)."""
        reference = self.reference
        if reference is None:
            return curve
        return _scaled(curve, lambda x: _positive_ratio(seconds(self, x), seconds(reference, x)))

    def _rescaled_grid(self, grid: Grid, seconds: Callable[[StepCostModel, float], float]) -> Grid:
        """A (batch, length) table as this GPU runs it, as `_rescaled`: every cell by the ratio
        at its length of one sequence's `seconds` (attention is linear in the batch)."""
        reference = self.reference
        if reference is None:
            return grid
        ratios = [_positive_ratio(seconds(self, x), seconds(reference, x)) for x in grid.axes[1]]
        return _scaled_grid(grid, ratios)

    def _measure_mla_module(self) -> bool:
        """DeepSeek-V3's MLA (Kimi K2's too: the same widths, fewer heads) from the profile's
        module tables of its formats and heads per GPU: a layer's projections and attention
        together, prefill and decode, so QKV and O cost nothing apart. Whether it was."""
        model, deployment = self.model, self.deployment
        if not _deepseek_v3_mla(model):
            return False
        weight = deployment.weight_dtype
        if weight is DType.FP8:
            weight = DType.FP8_BLOCK  # one GEMM rate and size; the tables measure the block form
        key = (deployment.kv_dtype, weight, model.num_attention_heads // deployment.tp)
        prefill, decode = self.profile.prefill_mla.get(key), self.profile.decode_mla.get(key)
        if prefill is None or decode is None:
            return False
        layers = model.num_layers
        prefill = self._rescaled_grid(prefill, _prompt_module_s)
        decode = self._rescaled_grid(decode, _context_module_s)
        prefill_op = MeasuredPrefillAttention(
            self.prefill_attention, prefill, 1.0, layers, self.memo_entries
        )
        decode_op = MeasuredDecodeAttention(
            self.decode_attention, decode, 1.0, layers, self.memo_entries
        )
        # The roofline's projections join the roofline's attention where a table does not reach.
        prefill_op.projections = decode_op.projections = [self.qkv, self.o]
        self.prefill_attention, self.decode_attention = prefill_op, decode_op
        self.qkv = LinearOp(self.qkv.op_class, 0.0, 0.0, 0.0)
        self.o = LinearOp(self.o.op_class, 0.0, 0.0, 0.0)
        return True

    def _measure_mla_kernels(self) -> set[OpFamily]:
        """MLA of DeepSeek-V3's latent widths (any hidden size, query rank or head count) where
        no module table fits: the attention kernel from the profile's kernel tables of the KV
        format and heads per GPU, with prefill's latent expansion (kv_b_proj over every attended
        token) from the GEMM table and decode's absorption BMMs from theirs; the projections
        are the GEMM table's (`_measure_gemms`). The op families it measured."""
        model, deployment, profile = self.model, self.deployment, self.profile
        mla = model.mla
        if mla is None or not _deepseek_v3_latent(model):
            return set()
        heads, layers = model.num_attention_heads // deployment.tp, model.num_layers
        kv_dtype, weight = deployment.kv_dtype, deployment.weight_dtype
        measured: set[OpFamily] = set()
        prefill = profile.prefill_mla_kernel.get((kv_dtype, heads))
        gemm = _table_for(profile.gemm, weight)
        if prefill is not None and gemm is not None:
            ms = gemm.axes[0]
            width = heads * (mla.qk_nope_head_dim + mla.v_head_dim)
            expansion = _curve(ms, [_layered(gemm, m, width, mla.kv_lora_rank, layers) for m in ms])
            if expansion is not None:
                prompts = MeasuredPrefillAttention(
                    self.prefill_attention,
                    self._rescaled_grid(prefill, _prompt_s),
                    1.0,
                    layers,
                    self.memo_entries,
                )
                prompts.expansion = self._rescaled(
                    expansion, lambda c, n: _bound(c.prefill_attention.parts(0.0, 0.0, 0.0, n))
                )
                self.prefill_attention = prompts
                measured.add(OpFamily.PREFILL_ATTENTION)
        decode = profile.decode_mla_kernel.get((kv_dtype, heads))
        absorption = _absorption_curve(profile, weight, heads, layers)
        if decode is not None and absorption is not None:
            decodes = MeasuredDecodeAttention(
                self.decode_attention,
                self._rescaled_grid(decode, _context_s),
                1.0,
                layers,
                self.memo_entries,
            )
            decodes.absorption = self._rescaled(
                absorption, lambda c, n: _bound(c.decode_attention.parts(n, 0.0))
            )
            self.decode_attention = decodes
            measured.add(OpFamily.DECODE_ATTENTION)
        return measured

    def _measure_communication(self) -> bool:
        """The tensor-parallel all-reduces from the table at the group's size, and the
        expert-parallel all-to-alls from the table at the experts' group, where it has them;
        whether every exchange the layout makes is measured (False when it makes none)."""
        tp, deployment, model = self.deployment.tp, self.deployment, self.model
        all_reduce = self._all_reduce_curve() if tp > 1 else None
        moe = model.moe
        exchange: Curve | None = None
        if moe is not None and deployment.ep > 1:
            exchange = self._all_to_all_curve()
        if all_reduce is None and exchange is None:
            return False
        self.communication = MeasuredCommunication(
            self.communication,
            all_reduce,
            model.hidden_size * 2.0,
            self.coefficients.allreduces_per_step,
            exchange,
            self._exchange_bytes_per_token(),
            2 * self.coefficients.moe_layers,
        )
        # The layout's other exchanges (dp without ep; pp's hand-offs, for which the database
        # has no point-to-point table) stay the roofline's.
        layout_measured = not self.communication.has_layout or (
            exchange is not None and deployment.pp == 1
        )
        return (tp == 1 or all_reduce is not None) and layout_measured

    def _all_reduce_curve(self) -> Curve | None:
        tp, all_reduce = self.deployment.tp, self.profile.all_reduce
        if all_reduce is None or tp not in all_reduce.axes[1]:
            return None
        token_bytes = self.model.hidden_size * 2.0
        return self._collective_curve(
            all_reduce,
            float(tp),
            lambda c, size: c.communication.tensor_parallel(size / token_bytes),
        )

    def _all_to_all_curve(self) -> Curve | None:
        """The all-to-all over the experts' GPUs by the bytes each sends."""
        table, shards = self.profile.all_to_all, float(self.deployment.expert_shards)
        moe = self.model.moe
        if table is None or moe is None or shards not in table.axes[1]:
            return None
        per_token = self._exchange_bytes_per_token()
        return self._collective_curve(
            table, shards, lambda c, size: c.communication.layout(size / per_token)
        )

    def _exchange_bytes_per_token(self) -> float:
        """Bytes a GPU sends per replica token in one expert-parallel exchange: its 1 / (tp x
        dp) share of the tokens, each to k experts, d bf16 activations each."""
        moe = self.model.moe
        if moe is None:
            return 0.0
        return moe.experts_per_token * self.model.hidden_size * 2.0 / self.deployment.expert_shards

    def _collective_curve(
        self, table: Grid, group: float, seconds: Callable[[StepCostModel, float], float]
    ) -> Curve | None:
        """A collective's seconds by bytes at the group's size (`_rescaled` by the roofline's
        `seconds` of those bytes where measured on another GPU)."""
        sizes = table.axes[0]
        curve = _curve(sizes, [table.at(s, group) for s in sizes], from_one=False)
        return None if curve is None else self._rescaled(curve, seconds)

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuilt, (
            self.model,
            self.gpu,
            self.deployment,
            self.profile,
            self.given_efficiency,
            self.measured_on,
        )

    def _basis(self, measured: set[OpFamily]) -> dict[str, str]:
        """Per op family, the profile's label where its tables time it (scaled to this GPU
        where they were measured on another; the engine's overhead always), else the roofline
        fitted to the profile."""
        label, roofline = self.profile.label, f"roofline fitted to {self.profile.label}"
        if self.measured_on is not None:
            label = f"{label} scaled to {self.gpu.id} by datasheet"
        measured.add(OpFamily.OVERHEAD)
        labels = {OpFamily.ELEMENTWISE: ELEMENTWISE_BASIS}
        return {
            family.value: labels.get(family, label if family in measured else roofline)
            for family in step_families(moe=self.has_moe, exchanges=self.deployment.has_exchanges)
        }


_SAME_BYTES = {
    DType.FP8_BLOCK: DType.FP8,
    DType.FP8: DType.FP8_BLOCK,
    DType.FP16: DType.BF16,
    DType.BF16: DType.FP16,
}
"""Formats of the same size and compute, whose tables stand in for each other: the per-tensor
and the block-scaled FP8 kernels differ by a few percent; fp16 and bf16 run the same tensor-core
rate on the same bytes (the database measures bf16; Llama 2's checkpoints are fp16)."""


def _deepseek_v3_latent(model: ModelSpec) -> bool:
    """Whether the model's attention kernel has the widths of the MLA kernel the silicon
    database measures (DeepSeek-V3's: KV rank 512, rope 64, nope 128, v 128)."""
    mla = model.mla
    return mla is not None and (
        mla.kv_lora_rank,
        mla.qk_rope_head_dim,
        mla.qk_nope_head_dim,
        mla.v_head_dim,
    ) == (512, 64, 128, 128)


def _deepseek_v3_mla(model: ModelSpec) -> bool:
    """Whether the model's attention has the widths of the MLA module the silicon database
    measures (DeepSeek-V3's: hidden 7,168, q rank 1,536 and its latent), whatever its head
    count."""
    mla = model.mla
    return (
        mla is not None
        and model.hidden_size == 7168
        and mla.q_lora_rank == 1536
        and _deepseek_v3_latent(model)
    )


def _gqa_projections(
    gemm: Grid, model: ModelSpec, tp: int
) -> tuple[Callable[[float], float | None], Callable[[float], float | None]]:
    """Milliseconds of all layers' QKV and O projections over M tokens, from `gemm`."""
    d, layers, h = model.hidden_size, model.num_layers, model.head_dim
    heads, kv_heads = model.num_attention_heads // tp, max(1, model.num_kv_heads // tp)
    return (
        lambda m: _layered(gemm, m, (heads + 2 * kv_heads) * h, d, layers),
        lambda m: _layered(gemm, m, d, heads * h, layers),
    )


def _mla_projections(
    gemm: Grid, model: ModelSpec, tp: int
) -> tuple[Callable[[float], float | None], Callable[[float], float | None]]:
    """`_gqa_projections` of MLA as the engines run it: one GEMM down to the query rank and the
    latent (q_a and kv_a fused, on every GPU), the query's up-projection (its heads split by
    tp), and O; without a query rank, the query straight from the hidden state beside kv_a."""
    mla = model.mla
    assert mla is not None
    d, layers = model.hidden_size, model.num_layers
    heads = model.num_attention_heads // tp
    latent = mla.kv_lora_rank + mla.qk_rope_head_dim
    query = heads * mla.qk_head_dim
    rank = mla.q_lora_rank

    def qkv(m: float) -> float | None:
        if not rank:
            return _layered(gemm, m, query + latent, d, layers)
        return _sum(
            _layered(gemm, m, rank + latent, d, layers), _layered(gemm, m, query, rank, layers)
        )

    return qkv, lambda m: _layered(gemm, m, d, heads * mla.v_head_dim, layers)


def _absorption_curve(profile: Profile, weight: DType, heads: int, layers: int) -> Curve | None:
    """Decode MLA's two absorption BMMs, all layers, seconds by sequences: in FP8 where the
    weights are quantised (the engines quantise kv_b's absorbed halves with them), else bf16;
    the other format's tables where that one was not measured."""
    formats = (DType.BF16,) if weight in (DType.BF16, DType.FP16) else (DType.FP8, DType.BF16)
    for dtype in formats:
        pre = profile.mla_bmm.get((True, dtype, heads))
        post = profile.mla_bmm.get((False, dtype, heads))
        if pre is None or post is None:
            continue
        tokens = pre.axes[0]
        both = [_sum(pre.at(n), post.at(n)) for n in tokens]
        return _curve(tokens, [None if t is None else t * layers for t in both])
    return None


_FLOORS: WeakKeyDictionary[Profile, tuple[float, float]] = WeakKeyDictionary()
"""`kernel_floors` of each profile in use: a scan of its tables (about 2 ms for a TensorRT-LLM
profile's 72,000 cells), done once per profile rather than once per timer built on it."""


def kernel_floors(profile: Profile) -> tuple[float, float]:
    """(GEMM, fused MoE) seconds: the fastest cell of the profile's GEMM and MoE tables, any
    format and shape (0 where it has none): the least one such kernel takes on its GPU."""
    found = _FLOORS.get(profile)
    if found is None:
        gemm = [v for grid in profile.gemm.values() for v in grid.values if v is not None]
        moe = [v for grid in profile.moe.values() for v in grid.values if v is not None]
        found = _FLOORS[profile] = (min(gemm, default=0.0) * _MS, min(moe, default=0.0) * _MS)
    return found


def _moe_curve(model: ModelSpec, deployment: Deployment, profile: Profile) -> Curve | None:
    """All MoE layers' experts over the tokens entering them, on one GPU: the routed ones from
    the profile's fused-MoE table of this layer shape and split (the experts' width `tp x dp /
    ep` ways, the experts `ep` ways), the shared ones (an always-on FFN of their width, split
    `tp x dp` ways) from the GEMM table of the experts' format. None where either is not
    measured. Pipeline stages change nothing here: a step passes through every stage's
    layers, each on its stage's tp x dp GPUs."""
    moe = model.moe
    if moe is None:
        return None
    dtype = expert_dtype_for(model, deployment)
    shards, ep = deployment.expert_shards, deployment.ep
    key = (
        dtype,
        model.hidden_size,
        moe.expert_intermediate_size,
        moe.experts_per_token,
        moe.num_experts,
        max(1, shards // ep),
        ep,
    )
    table = profile.moe.get(key)
    if table is None and dtype in _SAME_BYTES:
        table = profile.moe.get((_SAME_BYTES[dtype], *key[1:]))
    if table is None:
        return None
    moe_layers = model.num_layers - moe.num_dense_layers
    tokens = table.axes[0]
    routed = [table.at(n) for n in tokens]
    if moe.num_shared_experts:
        gemm = _table_for(profile.gemm, dtype)
        if gemm is None:
            return None
        d, width = model.hidden_size, moe.num_shared_experts * moe.shared_width / shards
        up = (model.ffn_type.matrices - 1) * width
        routed = [
            _sum(one, _gemm_ms(gemm, n, up, d), _gemm_ms(gemm, n, d, width))
            for n, one in zip(tokens, routed, strict=True)
        ]
    return _curve(tokens, [None if t is None else t * moe_layers for t in routed])


def _table_for(tables: Mapping[DType, Grid], weight_dtype: DType) -> Grid | None:
    """The GEMM table of weights stored as `weight_dtype`: measured with that format, or with
    one of the same size and compute. Not the compute format's: int4 or MXFP4 weights run bf16
    multiplies but read a quarter of the bytes, which a bf16 table does not see."""
    found = tables.get(weight_dtype)
    if found is None and weight_dtype in _SAME_BYTES:
        found = tables.get(_SAME_BYTES[weight_dtype])
    return found


def _sum(*parts: float | None) -> float | None:
    return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)


def _bound(parts: tuple[float, float]) -> float:
    """An op's roofline seconds: the larger of its compute and its memory time."""
    compute_s, memory_s = parts
    return compute_s if compute_s > memory_s else memory_s


def _prompt_s(cost: StepCostModel, length: float) -> float:
    """The roofline's attention of one prompt of `length` (causal, from scratch)."""
    pairs = length * (length + 1) / 2.0
    return _bound(cost.prefill_attention.parts(length, 1.0, pairs, length))


def _prompt_module_s(cost: StepCostModel, length: float) -> float:
    """`_prompt_s` with the QKV and O projections of its tokens (an MLA module table's span)."""
    return _prompt_s(cost, length) + _bound(cost.qkv.parts(length)) + _bound(cost.o.parts(length))


def _context_s(cost: StepCostModel, context: float) -> float:
    """The roofline's decode attention of one sequence over `context` tokens."""
    return _bound(cost.decode_attention.parts(1.0, context))


def _context_module_s(cost: StepCostModel, context: float) -> float:
    """`_context_s` with the QKV and O projections of its one token."""
    return _context_s(cost, context) + _bound(cost.qkv.parts(1.0)) + _bound(cost.o.parts(1.0))


def _positive_ratio(mine: float, theirs: float) -> float:
    return mine / theirs if mine > 0.0 and theirs > 0.0 else 1.0


def _scaled(curve: Curve, ratio: Callable[[float], float]) -> Curve:
    """`curve` with each point's time multiplied by `ratio` at its x."""
    return Curve(curve.xs, tuple(y * ratio(x) for x, y in zip(curve.xs, curve.ys, strict=True)))


def _scaled_grid(grid: Grid, ratios: list[float]) -> Grid:
    """A two-axis `grid` with each cell multiplied by the ratio of its second axis' value."""
    width = len(grid.axes[1])
    values = tuple(None if v is None else v * ratios[i % width] for i, v in enumerate(grid.values))
    return Grid(grid.axes, values)


def _rebuilt(  # noqa: PLR0917 - what pickle passes, positionally
    model: ModelSpec,
    gpu: GpuSpec,
    deployment: Deployment,
    profile: Profile,
    efficiency: Efficiency | None,
    measured_on: GpuSpec | None,
) -> ProfiledStepCost:
    """A pickled timer in another process (with the default memos)."""
    return ProfiledStepCost(model, gpu, deployment, profile, efficiency, measured_on=measured_on)
