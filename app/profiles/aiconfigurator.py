"""`ridgeline import-profiles aiconfigurator`: compact profiles from NVIDIA's silicon database.

`aiconfigurator-core` (Apache-2.0, on PyPI) ships, per system and per serving-engine version,
Parquet tables of measured kernel latency (milliseconds): GEMMs by (m, n, k, format), context
and generation attention by (batch, sequence, heads, KV heads, head dim, formats, window),
all-reduce by (message elements, GPUs). This module reads them (with pyarrow: the `profiles`
extra; the service never needs it) and writes one `ProfileDocument` per (system, engine,
version): the GEMM grid at powers of two in M, attention without a window for each head layout
measured, and the engine's all-reduce, with efficiencies fitted to the points and the held-out
interpolation error of each table.
"""

from __future__ import annotations

import importlib.util
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from app.engine.dtypes import DType
from app.engine.profiles import AttentionTable, Grid
from app.engine.profiles.fit import (
    attention_efficiency,
    communication_efficiency,
    gemm_efficiency,
    held_out_error_pct,
    memory_efficiency,
)
from app.engine.specs import GpuSpec
from app.formats.profile_document import ProfileDocument

__all__ = [
    "AICONFIGURATOR_VERSION",
    "ENGINE_OVERHEAD",
    "SYSTEMS",
    "import_profile",
    "systems_dir",
]

AICONFIGURATOR_VERSION = "0.12.0"
"""The release of aiconfigurator-core the bundled profiles were made from (pinned in the
`profiles` extra)."""

SYSTEMS: Mapping[str, str] = {
    "a100_sxm": "a100-sxm4-80gb",
    "h100_sxm": "h100-sxm5-80gb",
    "h200_sxm": "h200-sxm-141gb",
    "b200_sxm": "b200-sxm-180gb",
    "l40s": "l40s-48gb",
}
"""aiconfigurator system name -> Ridgeline GPU id."""

_ENGINE_DIR = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
_DTYPES = {"bfloat16": DType.BF16, "float16": DType.FP16, "fp8": DType.FP8}
_M_AXIS = tuple(float(2**i) for i in range(16))  # 1 .. 32,768 tokens
_SIGNIFICANT = 4
_HEAD_DIMS = (64, 128, 256)  # MLA (192, 512) has tables of its own

ENGINE_OVERHEAD: Mapping[str, dict[str, Any]] = {
    "vllm": {
        "step_ms": 1.0,
        "per_sequence_ms": 0.005,
        "prefill_per_layer_ms": 0.8,
        "source": (
            "prefill_per_layer_ms: aiconfigurator-core 0.12.0's vLLM backend "
            "(_prefill_dispatch_overhead_ms: CPU-side dispatch not captured by kernel "
            "benchmarks, 0.8 ms per layer, recalibrated against its silicon corpus). step_ms "
            "and per_sequence_ms assumed, not measured: about 1 ms of scheduling, input "
            "preparation and sampling per CUDA-graph step, growing 5 us per running sequence. "
            "Calibrate to your deployment with POST /v1/serving-runs."
        ),
    },
    "sglang": {
        "step_ms": 0.8,
        "per_sequence_ms": 0.004,
        "source": (
            "Assumed, not measured: SGLang's overlap scheduler hides most CPU work; 0.8 ms per "
            "step plus 4 us per running sequence (aiconfigurator-core adds no prefill dispatch "
            "cost for SGLang). Calibrate with POST /v1/serving-runs."
        ),
    },
    "trtllm": {
        "step_ms": 0.5,
        "per_sequence_ms": 0.003,
        "source": (
            "Assumed, not measured: TensorRT-LLM's C++ runtime, 0.5 ms per step plus 3 us per "
            "running sequence. Calibrate with POST /v1/serving-runs."
        ),
    },
}


def systems_dir(explicit: Path | None = None) -> Path:
    """The `systems/` folder of the installed aiconfigurator-core (or `explicit`)."""
    if explicit is not None:
        return explicit
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "aiconfigurator-core is not installed: pip install 'ridgeline[profiles]'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "systems"


def _rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq  # noqa: PLC0415 - the optional extra, only when importing

    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    return rows


def _round(value: float | None) -> float | None:
    if value is None:
        return None
    return float(f"{value:.{_SIGNIFICANT}g}")


def _version_dir(root: Path, op: str, engine: str, version: str | None) -> Path:
    base = root / op / _ENGINE_DIR[engine]
    versions = sorted((p.name for p in base.iterdir() if p.is_dir()), key=_version_key)
    if not versions:
        raise FileNotFoundError(f"no {op} data for {engine} under {base}")
    chosen = version or versions[-1]
    if chosen not in versions:
        # Older op tables serve newer engine versions (the database's own backward fill).
        older = [v for v in versions if _version_key(v) <= _version_key(chosen)]
        if not older:
            raise FileNotFoundError(f"no {op} data for {engine} {chosen} (have {versions})")
        chosen = older[-1]
    return base / chosen


def _version_key(version: str) -> tuple[int | str, ...]:
    return tuple(int(p) if p.isdigit() else p for p in version.replace("rc", ".rc.").split("."))


def _gemm_tables(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    by_dtype: dict[DType, dict[tuple[float, float, float], float]] = defaultdict(dict)
    for row in rows:
        dtype = _DTYPES.get(row["gemm_dtype"])
        if dtype is None or float(row["m"]) not in _M_AXIS:
            continue
        key = (float(row["m"]), float(row["n"]), float(row["k"]))
        # Several kernels for one shape: the engine picks the fastest.
        best = by_dtype[dtype].get(key)
        by_dtype[dtype][key] = row["latency"] if best is None else min(best, row["latency"])
    tables = []
    for dtype, cells in sorted(by_dtype.items()):
        ms = sorted({m for m, _, _ in cells})
        ns = sorted({n for _, n, _ in cells})
        ks = sorted({k for _, _, k in cells})
        values = [_round(cells.get((m, n, k))) for m in ms for n in ns for k in ks]
        tables.append({"dtype": dtype.value, "m": ms, "n": ns, "k": ks, "ms": values})
    return tables


def _attention_tables(rows: Iterable[dict[str, Any]], *, decode: bool) -> list[dict[str, Any]]:
    layouts: dict[tuple[DType, int, int, int], dict[tuple[float, float], float]] = defaultdict(dict)
    for row in rows:
        kv_dtype = _DTYPES.get(row["kv_cache_dtype"])
        if kv_dtype is None or row.get("window_size", 0) or row["attn_dtype"] != "bfloat16":
            continue
        if row.get("beam_width", 1) != 1 or row["head_dim"] not in _HEAD_DIMS:
            continue
        tokens = float(row["isl"] + row["step"]) if decode else float(row["isl"])
        key = (kv_dtype, row["num_heads"], row["num_key_value_heads"], row["head_dim"])
        cell = (float(row["batch_size"]), tokens)
        best = layouts[key].get(cell)
        layouts[key][cell] = row["latency"] if best is None else min(best, row["latency"])
    tables = []
    for (kv_dtype, heads, kv_heads, head_dim), cells in sorted(layouts.items()):
        if heads % kv_heads:
            continue
        batches = sorted({b for b, _ in cells})
        lengths = sorted({n for _, n in cells})
        if len(batches) < 2 or len(lengths) < 4:
            continue
        tables.append(
            {
                "kv_dtype": kv_dtype.value,
                "heads": heads,
                "kv_heads": kv_heads,
                "head_dim": head_dim,
                "batch": batches,
                "tokens": lengths,
                "ms": [_round(cells.get((b, n))) for b in batches for n in lengths],
            }
        )
    return tables


def _all_reduce_table(rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """bf16 all-reduce, CUDA-graph variant where the table has one; message sizes are
    elements, stored as bytes."""
    cells: dict[tuple[float, float], float] = {}
    for row in rows:
        if row.get("allreduce_dtype", "bfloat16") != "bfloat16":
            continue
        if "eager" in str(row.get("backend", "")):
            continue
        key = (2.0 * row["message_size"], float(row["num_gpus"]))
        best = cells.get(key)
        cells[key] = row["latency"] if best is None else min(best, row["latency"])
    if not cells:
        return None
    sizes = sorted({s for s, _ in cells})
    gpus = sorted({g for _, g in cells})
    return {
        "bytes": sizes,
        "gpus": [int(g) for g in gpus],
        "ms": [_round(cells.get((s, g))) for s in sizes for g in gpus],
    }


def import_profile(
    system: str,
    engine: str,
    gpu: GpuSpec,
    *,
    version: str | None = None,
    root: Path | None = None,
    default: bool = False,
) -> ProfileDocument:
    """The profile of `system` (an aiconfigurator system name) under `engine` at `version`
    (default: the newest whose GEMM table is there), for the catalog GPU `gpu`."""
    data = systems_dir(root) / "data" / system
    gemm_dir = _version_dir(data, "gemm", engine, version)
    chosen = version or gemm_dir.name
    attention_dir = _version_dir(data, "attention", engine, chosen)
    comm_dir = _version_dir(data, "comm", engine, chosen)
    gemm = _gemm_tables(_rows(gemm_dir / "gemm_perf.parquet"))
    prefill = _attention_tables(
        _rows(attention_dir / "context_attention_perf.parquet"), decode=False
    )
    decode = _attention_tables(
        _rows(attention_dir / "generation_attention_perf.parquet"), decode=True
    )
    all_reduce_path = comm_dir / "custom_allreduce_perf.parquet"
    all_reduce = _all_reduce_table(_rows(all_reduce_path)) if all_reduce_path.exists() else None
    document: dict[str, Any] = {
        "id": f"{gpu.id}-{engine}-{chosen}",
        "gpu": gpu.id,
        "engine": engine,
        "version": chosen,
        "default": default,
        "source": {
            "title": (
                f"NVIDIA aiconfigurator-core {AICONFIGURATOR_VERSION} silicon database, system "
                f"{system}, {engine} {chosen}"
            ),
            "url": "https://pypi.org/project/aiconfigurator-core/",
            "note": (
                f"gemm from {gemm_dir.relative_to(data)}, attention from "
                f"{attention_dir.relative_to(data)}, all-reduce from {comm_dir.relative_to(data)}; "
                "M at powers of two, attention without a window, fastest kernel per shape; "
                f"latencies rounded to {_SIGNIFICANT} significant digits. Apache-2.0."
            ),
        },
        "overhead": ENGINE_OVERHEAD[engine],
        "gemm": gemm,
        "prefill_attention": prefill,
        "decode_attention": decode,
        "all_reduce": all_reduce,
    }
    document["fitted"], document["residual_pct"] = _fit(document, gpu)
    return ProfileDocument.model_validate(document, strict=False)


def _fit(document: dict[str, Any], gpu: GpuSpec) -> tuple[dict[str, float], dict[str, float]]:
    """Efficiencies fitted to the tables (the GPU's generic ones where a table is missing) and
    each table family's held-out interpolation error."""
    gemm = {DType(t["dtype"]): _grid(t, "m", "n", "k") for t in document["gemm"]}

    def tables(kind: str, kv: DType) -> list[AttentionTable]:
        return [
            AttentionTable(t["heads"], t["kv_heads"], t["head_dim"], _grid(t, "batch", "tokens"))
            for t in document[kind]
            if t["kv_dtype"] == kv.value
        ]

    prefill, decode = (
        tables("prefill_attention", DType.BF16),
        tables("decode_attention", DType.BF16),
    )
    all_reduce = document["all_reduce"]
    ar_grid = (
        Grid(
            (tuple(all_reduce["bytes"]), tuple(float(g) for g in all_reduce["gpus"])),
            tuple(all_reduce["ms"]),
        )
        if all_reduce
        else None
    )
    fallback = gpu.efficiency
    fitted = {
        "gemm": (gemm_efficiency(gemm[DType.BF16], gpu, DType.BF16) if DType.BF16 in gemm else None)
        or fallback.gemm,
        "attention": attention_efficiency(prefill, gpu) or fallback.attention,
        "memory": memory_efficiency(decode, gpu, DType.BF16) or fallback.memory,
        "communication": (communication_efficiency(ar_grid, gpu) if ar_grid else None)
        or fallback.communication,
    }
    residuals: dict[str, float | None] = {
        "gemm": _rms(held_out_error_pct(g) for g in gemm.values()),
        "prefill_attention": _rms(held_out_error_pct(t.grid, 1) for t in prefill),
        "decode_attention": _rms(held_out_error_pct(t.grid, 1) for t in decode),
        "communication": held_out_error_pct(ar_grid) if ar_grid else None,
    }
    return (
        {k: round(min(v, 1.0), 4) for k, v in fitted.items()},
        {k: round(v, 2) for k, v in residuals.items() if v is not None},
    )


def _grid(table: Mapping[str, Any], *axes: str) -> Grid:
    return Grid(tuple(tuple(table[a]) for a in axes), tuple(table["ms"]))


def _rms(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return math.sqrt(sum(v * v for v in found) / len(found)) if found else None
