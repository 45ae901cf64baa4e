"""The job's `--profile` mode: measure the ops a step is made of on this GPU, for one model's
shapes, and write a profile document (`POST /v1/profiles` takes it).

    ridgeline-bench --profile --model llama-3-8b --device cuda --gpu h100-sxm5-80gb \\
        --engine vllm --engine-version 0.24.0 --out profile.json

GEMMs `(M x K) @ (K x N)` for every linear layer of the model (QKV, O, gate-up, down, LM head)
at M = 1, 2, 4, ... tokens; causal prefill attention of its head layout by (batch, prompt
length); decode attention by (batch, context). Each cell is the median of `--repeats` timed runs
after `--warmup`. All-reduce is not measured (one GPU); the engine's overhead is the documented
default for `--engine`, for a calibration against serving runs to fit. Cells not measured (a
shape pair the model does not have, or one that does not fit in memory) are null.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from app.bench.attention import choose_kernel, decode_attention, prefill_attention
from app.bench.catalog import bundled_entries, find_model, run_model_spec
from app.bench.device import TORCH_DTYPES, timer_for, torch_device
from app.bench.timing import measure
from app.engine.dtypes import DType
from app.engine.serving import EngineName, policy_of
from app.formats.catalog_specs import gpu_spec_from_fields
from app.formats.profile_document import ProfileDocument, default_overhead, fit_tables
from app.formats.run_document import DeviceKind

__all__ = ["main", "profile_document"]


def _powers(limit: int, start: int = 1) -> list[int]:
    values, value = [], start
    while value <= limit:
        values.append(value)
        value *= 2
    return values


def _time(
    operation: Callable[[], object], kind: DeviceKind, repeats: int, warmup: int
) -> float | None:
    try:
        with torch.inference_mode():
            return measure(operation, timer_for(kind), repeats=repeats, warmup=warmup).median_ms
    except (RuntimeError, MemoryError):  # out of memory: the cell stays unmeasured
        return None


def _linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x @ weight.T


def profile_document(
    *,
    model: dict[str, Any],
    gpu: str,
    engine: str,
    version: str,
    kind: DeviceKind,
    dtype: DType,
    max_tokens: int,
    max_batch: int,
    repeats: int,
    warmup: int,
) -> ProfileDocument:
    """Measure and assemble the profile (see the module's description)."""
    spec = run_model_spec(model, model_id=model.get("id")).to_model_spec()
    device, torch_dtype = torch_device(kind), TORCH_DTYPES[dtype]
    d, h = spec.hidden_size, spec.head_dim
    heads, kv_heads = spec.num_attention_heads, spec.num_kv_heads
    width = spec.intermediate_size
    shapes = {  # (n, k) of each linear layer
        ((heads + 2 * kv_heads) * h, d),
        (d, heads * h),
        ((spec.ffn_type.matrices - 1) * width, d),
        (d, width),
        (spec.vocab_size, d),
    }
    ms_axis = _powers(max_tokens)
    ns, ks = sorted({n for n, _ in shapes}), sorted({k for _, k in shapes})
    cells: dict[tuple[int, int, int], float | None] = {}
    for n, k in sorted(shapes):
        weight = torch.randn(n, k, device=device, dtype=torch_dtype)
        for m in ms_axis:
            x = torch.randn(m, k, device=device, dtype=torch_dtype)
            cells[(m, n, k)] = _time(partial(_linear, x, weight), kind, repeats, warmup)
    gemm = {
        "dtype": dtype.value,
        "m": ms_axis,
        "n": ns,
        "k": ks,
        "ms": [cells.get((m, n, k)) for m in ms_axis for n in ns for k in ks],
    }
    kernel = choose_kernel(device, torch_dtype, heads, kv_heads, h)
    batches = _powers(max_batch)
    lengths = _powers(max_tokens, 16)
    prefill: list[float | None] = []
    decode: list[float | None] = []
    with kernel.pinned():
        for b in batches:
            for n in lengths:
                q = torch.randn(b, heads, n, h, device=device, dtype=torch_dtype)
                kv = torch.randn(b, kv_heads, n, h, device=device, dtype=torch_dtype)
                run = partial(prefill_attention, q, kv, kv, kernel)
                prefill.append(_time(run, kind, repeats, warmup))
                q1 = torch.randn(b, heads, 1, h, device=device, dtype=torch_dtype)
                step = partial(decode_attention, q1, kv, kv)
                decode.append(_time(step, kind, repeats, warmup))
    layout = {"kv_dtype": dtype.value, "heads": heads, "kv_heads": kv_heads, "head_dim": h}
    document: dict[str, Any] = {
        "id": f"{gpu}-{engine}-{version}-{model.get('id', 'model')}",
        "gpu": gpu,
        "engine": engine,
        "version": version,
        "source": {
            "title": f"ridgeline-bench --profile on {gpu} ({kind.value}, {dtype.value}), "
            f"{model.get('id', 'model')} shapes",
            "note": f"median of {repeats} timed runs after {warmup} warm-up; attention kernel "
            f"{kernel.name.value}; engine overhead: the documented default for {engine}",
        },
        "overhead": default_overhead(engine),
        "gemm": [gemm],
        "prefill_attention": [layout | {"batch": batches, "tokens": lengths, "ms": prefill}],
        "decode_attention": [layout | {"batch": batches, "tokens": lengths, "ms": decode}],
        "all_reduce": None,
    }
    known = [entry for entry in bundled_entries("gpus") if entry["id"] == gpu]
    if known:
        document["fitted"], document["residual_pct"] = fit_tables(
            document, gpu_spec_from_fields(known[0])
        )
    else:
        document["fitted"] = {"gemm": 0.6, "attention": 0.5, "memory": 0.8, "communication": 0.7}
        document["residual_pct"] = {}
    return ProfileDocument.model_validate(document, strict=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ridgeline-bench --profile", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", required=True, help="catalog model id, e.g. llama-3-8b")
    parser.add_argument("--gpu", required=True, help="the catalog GPU id this GPU is")
    engines = [name.value for name in EngineName if policy_of(name).overhead is not None]
    parser.add_argument("--engine", choices=engines, default="vllm")
    parser.add_argument(
        "--engine-version",
        default=None,
        help="the engine release these kernels stand for (default: its newest Ridgeline models)",
    )
    parser.add_argument("--device", choices=[k.value for k in DeviceKind], default="cuda")
    parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        model = find_model(args.model, bundled_entries("models"))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    document = profile_document(
        model=model,
        gpu=args.gpu,
        engine=args.engine,
        version=args.engine_version or policy_of(args.engine).version(None) or "",
        kind=DeviceKind(args.device),
        dtype=DType(args.dtype),
        max_tokens=args.max_tokens,
        max_batch=args.max_batch,
        repeats=args.repeats,
        warmup=args.warmup,
    )
    args.out.write_text(json.dumps(document.model_dump(mode="json")) + "\n")
    cells = sum(v is not None for t in document.gemm for v in t.ms)
    print(f"wrote {args.out}: {cells} GEMM cells, fitted {document.fitted.model_dump()}")
    return 0
