"""The fast paths against slow, obviously-correct references.

`prefill_seconds`, the chunk-size searches, `assess_tp` and the batch ceiling take short cuts:
no `StepLoad` per step, closed-form sums, interpolating searches, counts shared across TP
candidates (`step_seconds` and `sum_seconds` have their own tests in test_step_cost.py). Each
test here recomputes the same answer the long way: every step built with `prefill_load` and
`decode_load` and timed with `seconds`, every chunk size or batch tried in turn, every TP
candidate's figures from a fresh `StepCostModel` and `memory_plan`. Integer answers must be
identical; times agree within 1e-9 (the short cuts sum in another order). Cases cover catalog
models (dense MHA and GQA, biased, tied, MoE), GPUs with and without fp8, tp 1 to 16,
bf16/fp8/int4 weights and fp8 KV.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.batch_ceiling import estimate_batch_ceiling, ridge_batch
from app.engine.chunking import _last_within, recommend_chunk_size
from app.engine.counting import op_coefficients
from app.engine.dtypes import DType
from app.engine.estimates import crossover_tokens, prefill_seconds
from app.engine.memory import kv_bytes_per_sequence, memory_plan
from app.engine.parallelism import assess_tp
from app.engine.specs import (
    IDEAL_EFFICIENCY,
    Deployment,
    Efficiency,
    GpuSpec,
    InterconnectSpec,
    SpecError,
)
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from tests.engine.test_params import CATALOG, _spec

REL = 1e-9


def _gpus() -> dict[str, GpuSpec]:
    text = resources.files("app.catalog").joinpath("data/gpus.json").read_text("utf-8")
    gpus: dict[str, GpuSpec] = {}
    for entry in json.loads(text)["gpus"]:
        link = entry["interconnect"]
        gpus[entry["id"]] = GpuSpec(
            memory_bytes=entry["memory_bytes"],
            memory_bandwidth_bytes_per_s=float(entry["memory_bandwidth_bytes_per_s"]),
            peak_flops_per_s={DType(k): float(v) for k, v in entry["peak_flops_per_s"].items()},
            interconnect=InterconnectSpec(
                link["kind"], float(link["bandwidth_bytes_per_s"]), float(link["latency_s"])
            ),
            id=entry["id"],
        )
    return gpus


GPUS = _gpus()
CALIBRATED = Efficiency(gemm=0.58, attention=0.62, memory=0.83, communication=0.7, overhead_ms=1.8)
# (model, GPU, deployment, efficiency): dense MHA and GQA, Q/K/V biases, tied embeddings, two
# MoE shapes; fp8 and int4 weights, fp8 KV on parts with and without fp8; tp up to 16 (beyond
# the KV heads).
TARGETS = [
    ("llama-3.1-8b", "h100-sxm5-80gb", Deployment(), CALIBRATED),
    ("llama-3.1-8b", "a100-sxm4-80gb", Deployment(kv_dtype=DType.FP8), IDEAL_EFFICIENCY),
    ("llama-2-7b", "l4-24gb", Deployment(weight_dtype=DType.INT4), CALIBRATED),
    ("qwen2.5-7b", "h100-sxm5-80gb", Deployment(tp=2, weight_dtype=DType.FP8), CALIBRATED),
    ("gemma-2-9b", "mi300x-192gb", Deployment(), IDEAL_EFFICIENCY),
    ("llama-3.1-70b", "h200-sxm-141gb", Deployment(tp=4, kv_dtype=DType.FP8), CALIBRATED),
    ("llama-3.1-70b", "h100-sxm5-80gb", Deployment(tp=16), CALIBRATED),
    ("mixtral-8x7b", "h100-sxm5-80gb", Deployment(tp=2), CALIBRATED),
    ("qwen3-30b-a3b", "b200-sxm-180gb", Deployment(weight_dtype=DType.FP8), CALIBRATED),
    ("qwen3-30b-a3b", "a100-sxm4-80gb", Deployment(tp=4), IDEAL_EFFICIENCY),
]
IDS = [f"{m}-{g}-tp{d.tp}-{d.weight_dtype}-{d.kv_dtype}" for m, g, d, _ in TARGETS]


def _cost(target: tuple[str, str, Deployment, Efficiency], context: int = 0) -> StepCostModel:
    model_id, gpu_id, deployment, efficiency = target
    model = _spec(CATALOG[model_id])
    if context:
        model = replace(model, max_context_tokens=context)
    return StepCostModel(model, GPUS[gpu_id], deployment, efficiency)


def _with_decodes(load: StepLoad, decode: StepLoad, steps_before: int = 0) -> StepLoad:
    """`load` beside `decode`, whose contexts have grown by one token per earlier step."""
    return StepLoad(
        prefill_tokens=load.prefill_tokens,
        prefill_chunks=load.prefill_chunks,
        prefill_attention_pairs=load.prefill_attention_pairs,
        prefill_kv_tokens=load.prefill_kv_tokens,
        decode_seqs=decode.decode_seqs,
        decode_context_tokens=decode.decode_context_tokens + steps_before * decode.decode_seqs,
    )


def _reference_prefill_s(
    cost: StepCostModel,
    prompt: int,
    chunk: int | None,
    decode: StepLoad,
    *,
    batch_size: int = 1,
    cached: int = 0,
    causal: bool = True,
) -> tuple[float, int]:
    """Chunk after chunk, each step built and timed on its own."""
    total, done, steps = 0.0, cached, 0
    while done < prompt:
        size = prompt - done if chunk is None else min(chunk, prompt - done)
        load = prefill_load(size, batch_size=batch_size, cached_tokens=done, causal=causal)
        total += cost.seconds(_with_decodes(load, decode, steps))
        done, steps = done + size, steps + 1
    return total, steps


def _reference_worst_step_s(cost: StepCostModel, chunk: int, long: int, decode: StepLoad) -> float:
    """The step carrying the deepest `chunk`-token chunk of a `long`-token prompt."""
    load = prefill_load(chunk, cached_tokens=max(0, long - chunk))
    return cost.seconds(_with_decodes(load, decode))


def _linear_last(limit: int, fits: Callable[[int], bool]) -> int:
    """Largest n in [1, limit] that fits, trying every n; 0 when none does."""
    return max((n for n in range(1, limit + 1) if fits(n)), default=0)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize(
    ("prompt", "chunk", "batch_size", "cached", "decodes"),
    [
        (1, None, 1, 0, 0),
        (8192, None, 4, 0, 32),
        (8192, 512, 1, 0, 0),
        (10_000, 768, 2, 1000, 64),
        (30_000, 4096, 1, 0, 256),
        (5000, 5000, 1, 100, 8),
    ],
)
@pytest.mark.parametrize("causal", [True, False])
def test_prefill_seconds_is_the_chunk_by_chunk_sum(
    target: tuple[str, str, Deployment, Efficiency],
    prompt: int,
    chunk: int | None,
    batch_size: int,
    cached: int,
    decodes: int,
    causal: bool,
) -> None:
    cost = _cost(target)
    decode = decode_load(decodes, 2048) if decodes else StepLoad()
    seconds, steps = prefill_seconds(
        cost,
        prompt,
        batch_size=batch_size,
        cached_prefix_tokens=cached,
        chunk_tokens=chunk,
        causal=causal,
        decode=decode,
    )
    expected_s, expected_steps = _reference_prefill_s(
        cost, prompt, chunk, decode, batch_size=batch_size, cached=cached, causal=causal
    )
    assert steps == expected_steps
    assert seconds == pytest.approx(expected_s, rel=REL)


CHUNK_CASES = [
    # (itl_slo_ms, decode batch, decode context, long prompt, short TTFT SLO)
    (50.0, 32, 2048, 2048, None),
    (20.0, 0, 0, 1024, 300.0),
    (5.0, 64, 1024, 3000, None),
    (200.0, 256, 4096, 4096, 2000.0),
    (1.0, 8, 128, 4096, None),  # nothing fits
    (1e6, 1, 1, 4096, None),  # everything fits
]


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize(("itl", "seqs", "context", "long", "short"), CHUNK_CASES)
def test_chunk_sizes_are_the_largest_that_fit(
    target: tuple[str, str, Deployment, Efficiency],
    itl: float,
    seqs: int,
    context: int,
    long: int,
    short: float | None,
) -> None:
    """On a 4,096-token context every chunk size and every prompt length can be tried."""
    cost = _cost(target, context=4096)
    decode = decode_load(seqs, context) if seqs else StepLoad()
    result = recommend_chunk_size(
        cost,
        itl_slo_ms=itl,
        decode_batch_size=seqs,
        decode_context_tokens=context,
        long_prompt_tokens=long,
        short_ttft_slo_ms=short,
    )
    budget = itl / 1e3
    assert result.max_chunk_tokens == _linear_last(
        4096, lambda q: _reference_worst_step_s(cost, q, long, decode) <= budget
    )
    chunk = result.recommended_chunk_tokens
    assert result.step_ms == pytest.approx(
        _reference_worst_step_s(cost, chunk, long, decode) * 1e3, rel=REL
    )
    unchunked = _reference_prefill_s(cost, long, None, decode)[0]
    chunked, steps = _reference_prefill_s(cost, long, chunk, decode)
    assert result.long_prompt.steps == steps
    assert result.long_prompt.ttft_ms_unchunked == pytest.approx(unchunked * 1e3, rel=REL)
    assert result.long_prompt.ttft_ms_chunked == pytest.approx(chunked * 1e3, rel=REL)
    if short is not None:
        slo = short / 1e3
        route = result.route_long_prompts_above_tokens
        assert route == _linear_last(
            4096, lambda n: prefill_seconds(cost, n, chunk_tokens=chunk, decode=decode)[0] <= slo
        )
        assert route == 0 or _reference_prefill_s(cost, route, chunk, decode)[0] <= slo
        if route < 4096:
            assert _reference_prefill_s(cost, route + 1, chunk, decode)[0] > slo


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize(
    ("itl", "seqs", "context", "prompt"), [(50.0, 32, 2048, 32768), (8.0, 0, 0, 131072)]
)
def test_chunk_size_on_the_full_context_sits_on_the_boundary(
    target: tuple[str, str, Deployment, Efficiency],
    itl: float,
    seqs: int,
    context: int,
    prompt: int,
) -> None:
    """Too many sizes to try them all: the answer fits and one token more does not."""
    cost = _cost(target)
    decode = decode_load(seqs, context) if seqs else StepLoad()
    long = min(prompt, cost.model.max_context_tokens)
    result = recommend_chunk_size(
        cost,
        itl_slo_ms=itl,
        decode_batch_size=seqs,
        decode_context_tokens=context,
        long_prompt_tokens=long,
    )
    q, budget = result.max_chunk_tokens, itl / 1e3
    assert q == 0 or _reference_worst_step_s(cost, q, long, decode) <= budget
    if q < cost.model.max_context_tokens:
        assert _reference_worst_step_s(cost, q + 1, long, decode) > budget


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(st.integers(0, 5), min_size=1, max_size=300),
    offset=st.integers(-20, 20),
    quadratic=st.booleans(),
    budget=st.integers(-10, 2000),
    guess=st.none() | st.integers(-5, 400),
)
def test_the_interpolating_search_finds_what_a_scan_finds(
    steps: list[int], offset: int, quadratic: bool, budget: int, guess: int | None
) -> None:
    """Any non-decreasing sequence, with plateaus and jumps, any first guess."""
    values = [offset]
    for step in steps:
        values.append(values[-1] + step * (len(values) if quadratic else 1))
    limit = len(values) - 1

    def seconds(n: int) -> float:
        return float(values[n])

    assert _last_within(limit, seconds, float(budget), guess) == _linear_last(
        limit, lambda n: seconds(n) <= budget
    )


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("context", [1, 128, 2048, 4096])
def test_ridge_batch_is_the_first_compute_bound_batch(
    target: tuple[str, str, Deployment, Efficiency], context: int
) -> None:
    cost = _cost(target)

    def compute_bound(batch: int) -> bool:
        step = cost.breakdown(decode_load(batch, context))
        return step.compute_s >= step.memory_s

    ridge = ridge_batch(cost, context)
    if ridge is None:
        assert not compute_bound(1 << 24)
    else:
        assert compute_bound(ridge)
        assert ridge == 1 or not compute_bound(ridge - 1)
        if ridge <= 2048:
            assert ridge == next(b for b in range(1, ridge + 1) if compute_bound(b))
    ceiling = estimate_batch_ceiling(cost, context_tokens=context)
    assert ceiling.ridge_batch == ridge
    per_sequence = kv_bytes_per_sequence(cost.model, cost.deployment, context)
    assert ceiling.max_batch_by_memory == max(
        0,
        math.floor(memory_plan(cost.model, cost.gpu, cost.deployment).kv_pool_bytes / per_sequence),
    )


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_crossover_is_the_models_own_ratio(target: tuple[str, str, Deployment, Efficiency]) -> None:
    cost = _cost(target)
    one = op_coefficients(cost.model, replace(cost.deployment, tp=1), cost.attention_dtype)
    ratio = one.linear_flops_per_token / one.attention_flops_per_pair
    assert crossover_tokens(cost) == round(2.0 * ratio - 1.0)
    assert crossover_tokens(cost, causal=False) == round(ratio)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize(
    "workload",
    [
        {},
        {"context_tokens": 4096, "batch_size": 16, "tpot_slo_ms": 25.0},
        {"prompt_tokens": 4000, "ttft_slo_ms": 400.0, "candidates": (1, 3, 8, 64)},
        {"gpu_memory_utilization": 0.5, "block_tokens": 128, "max_num_batched_tokens": 2048},
    ],
)
def test_tp_candidates_match_a_fresh_cost_model_each(
    target: tuple[str, str, Deployment, Efficiency], workload: dict[str, Any]
) -> None:
    cost = _cost(target)
    model, gpu, efficiency = cost.model, cost.gpu, cost.efficiency
    result = assess_tp(model, gpu, cost.deployment, efficiency, **workload)
    prompt = workload.get("prompt_tokens", 2048)
    context = workload.get("context_tokens", 2048)
    batch = workload.get("batch_size", 1)
    for candidate in result.candidates:
        deployment = replace(cost.deployment, tp=candidate.tp)
        try:
            reference = StepCostModel(model, gpu, deployment, efficiency)
        except SpecError:
            assert not candidate.feasible
            continue
        prefill = reference.breakdown(prefill_load(prompt, batch_size=batch))
        decode = reference.breakdown(decode_load(batch, context))
        assert candidate.ttft_ms == pytest.approx(prefill.total_s * 1e3, rel=REL)
        assert candidate.tpot_ms == pytest.approx(decode.total_s * 1e3, rel=REL)
        assert candidate.communication_share_prefill == pytest.approx(
            prefill.communication_share, rel=REL, abs=1e-15
        )
        assert candidate.communication_share_decode == pytest.approx(
            decode.communication_share, rel=REL, abs=1e-15
        )
        plan = memory_plan(
            model,
            gpu,
            deployment,
            gpu_memory_utilization=workload.get("gpu_memory_utilization", 0.9),
            max_num_batched_tokens=workload.get("max_num_batched_tokens", 8192),
        )
        per_sequence = kv_bytes_per_sequence(
            model, deployment, context, workload.get("block_tokens", 16)
        )
        assert candidate.weights_bytes_per_gpu == plan.weights_bytes
        assert candidate.kv_bytes_per_token_per_gpu == plan.kv_bytes_per_token
        assert candidate.kv_pool_bytes_per_gpu == plan.kv_pool_bytes
        assert candidate.max_batch_by_memory == max(
            0, math.floor(plan.kv_pool_bytes / per_sequence)
        )
        needed = plan.weights_bytes + plan.activation_reserve_bytes + batch * per_sequence
        assert candidate.fits_memory == (needed <= plan.usable_bytes)
