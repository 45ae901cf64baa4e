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
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import date
from pathlib import Path
from typing import Any

from app.catalog.profiles import version_key
from app.engine.dtypes import DType
from app.engine.serving import policy_of
from app.engine.specs import GpuSpec
from app.formats.profile_document import ProfileDocument, default_overhead, fit_tables

__all__ = [
    "AICONFIGURATOR_PUBLISHED",
    "AICONFIGURATOR_VERSION",
    "SYSTEMS",
    "engine_versions",
    "import_profile",
    "systems_dir",
]

AICONFIGURATOR_VERSION = "0.12.0"
"""The release of aiconfigurator-core the bundled profiles were made from (pinned in the
`profiles` extra)."""
AICONFIGURATOR_PUBLISHED = date(2026, 9, 18)
"""When that release was published (PyPI's upload time of aiconfigurator-core 0.12.0): the
date of the measurements it holds."""

SYSTEMS: Mapping[str, str] = {
    "a100_sxm": "a100-sxm4-80gb",
    "h100_sxm": "h100-sxm5-80gb",
    "h200_sxm": "h200-sxm-141gb",
    "b200_sxm": "b200-sxm-180gb",
    "l40s": "l40s-48gb",
    "b300_sxm": "b300-sxm-288gb",
    "gb200": "gb200-186gb",
    "rtx_pro_6000_server": "rtx-pro-6000-96gb",
    "gb300": "gb300-288gb",
}
"""aiconfigurator system name -> Ridgeline GPU id."""

_DTYPES = {
    "bfloat16": DType.BF16,
    "float16": DType.FP16,
    "fp8": DType.FP8,
    "fp8_block": DType.FP8_BLOCK,
    "nvfp4": DType.NVFP4,
    "w4a16_mxfp4": DType.MXFP4,  # MoE: MXFP4 experts dequantised to bf16 (Hopper's gpt-oss)
}
_M_AXIS = tuple(float(2**i) for i in range(16))  # 1 .. 32,768 tokens
_SIGNIFICANT = 4
_HEAD_DIMS = (64, 128, 256)  # MLA (192, 512) has tables of its own


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


def engine_versions(data: Path, op: str, engine: str, table: str | None = None) -> list[str]:
    """The versions, oldest first, under which the system's database (`data`: its
    `systems/data/<system>` folder) holds `op` for `engine`; with `table`, only those whose
    directory holds that file (a version's directory may hold only a `reuse.yaml` pointing back
    to an older one)."""
    backend = policy_of(engine).silicon_backend
    return [] if backend is None else _versions(data / op / str(backend), table)


def _versions(base: Path, table: str | None) -> list[str]:
    """The version directories under `base`, oldest first (with `table`: holding that file)."""
    if not base.is_dir():
        return []
    dirs = [p for p in base.iterdir() if p.is_dir() and (table is None or (p / table).exists())]
    return sorted((p.name for p in dirs), key=version_key)


def _version_dir(root: Path, op: str, engine: str, version: str, table: str) -> Path:
    """The directory of `op`'s `table` measured under `engine` at `version`, or under the
    newest older version that holds it: the database's own backward fill."""
    older = _older_dirs(root, op, engine, version, table)
    if older:
        return older[0]
    versions = engine_versions(root, op, engine, table)
    if not versions:
        raise FileNotFoundError(f"no {op} data for {engine} under {root / op}")
    raise FileNotFoundError(f"no {op} data for {engine} {version} (have {versions})")


def _optional_dir(root: Path, op: str, engine: str, version: str, table: str) -> Path | None:
    """`_version_dir`, or None where the database has no such table for the engine."""
    try:
        return _version_dir(root, op, engine, version, table)
    except FileNotFoundError:
        return None


def _older_dirs(root: Path, op: str, engine: str, version: str, table: str) -> list[Path]:
    """Every directory of `op`'s `table` under `engine` at `version` or older, newest first: a
    release's collection may re-measure only some shapes (TensorRT-LLM 1.3.0rc23's MoE table
    holds 52 of rc20's 2,250), and a shape it lacks is the same kernel measured last under an
    older release."""
    backend = policy_of(engine).silicon_backend
    return [
        root / op / str(backend) / v
        for v in reversed(engine_versions(root, op, engine, table))
        if version_key(v) <= version_key(version)
    ]


def _filled(tables_by_version: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One table per shape from tables listed newest version first: each shape's newest."""
    kept: dict[tuple[Any, ...], dict[str, Any]] = {}
    for tables in tables_by_version:
        for table in tables:
            shape = tuple(v for k, v in table.items() if k not in ("tokens", "ms"))
            kept.setdefault(shape, table)
    return [kept[shape] for shape in sorted(kept)]


def _keep_fastest(cells: dict[Any, float], key: Any, latency: float) -> None:
    """Several kernels measured one shape: the engine picks the fastest."""
    best = cells.get(key)
    cells[key] = latency if best is None else min(best, latency)


def _gemm_tables(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    by_dtype: dict[DType, dict[tuple[float, float, float], float]] = defaultdict(dict)
    for row in rows:
        dtype = _DTYPES.get(row["gemm_dtype"])
        if dtype is None or float(row["m"]) not in _M_AXIS:
            continue
        key = (float(row["m"]), float(row["n"]), float(row["k"]))
        _keep_fastest(by_dtype[dtype], key, row["latency"])
    tables = []
    for dtype, cells in sorted(by_dtype.items()):
        ms = sorted({m for m, _, _ in cells})
        ns = sorted({n for _, n, _ in cells})
        ks = sorted({k for _, _, k in cells})
        values = [_round(cells.get((m, n, k))) for m in ms for n in ns for k in ks]
        tables.append({"dtype": dtype.value, "m": ms, "n": ns, "k": ks, "ms": values})
    return tables


def _batch_token_grid(cells: Mapping[tuple[float, float], float]) -> dict[str, Any] | None:
    """The `batch`, `tokens` and `ms` of a table measured at `cells`, or None where too few
    batches (2) or lengths (4) were measured to interpolate."""
    batches = sorted({b for b, _ in cells})
    lengths = sorted({n for _, n in cells})
    if len(batches) < 2 or len(lengths) < 4:
        return None
    ms = [_round(cells.get((b, n))) for b in batches for n in lengths]
    return {"batch": batches, "tokens": lengths, "ms": ms}


def _batch_token_tables(
    rows: Iterable[dict[str, Any]],
    *,
    decode: bool,
    layout: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """Tables of a layer's time by (batch, tokens): tokens is the prompt (prefill) or the
    context (decode); one table per `layout` a row names (its identifying fields; None: a row
    not kept), the fastest kernel per cell, in order of those fields."""
    layouts: dict[tuple[tuple[str, Any], ...], dict[tuple[float, float], float]] = defaultdict(dict)
    for row in rows:
        fields = layout(row)
        if fields is None:
            continue
        tokens = float(row["isl"] + row["step"]) if decode else float(row["isl"])
        cell = (float(row["batch_size"]), tokens)
        _keep_fastest(layouts[tuple(fields.items())], cell, row["latency"])
    tables = []
    for key, cells in sorted(layouts.items()):
        grid = _batch_token_grid(cells)
        if grid is not None:
            tables.append({**dict(key), **grid})
    return tables


def _attention_tables(rows: Iterable[dict[str, Any]], *, decode: bool) -> list[dict[str, Any]]:
    def layout(row: dict[str, Any]) -> dict[str, Any] | None:
        kv_dtype = _DTYPES.get(row["kv_cache_dtype"])
        if kv_dtype is None or row.get("window_size", 0) or row["attn_dtype"] != "bfloat16":
            return None
        if row.get("beam_width", 1) != 1 or row["head_dim"] not in _HEAD_DIMS:
            return None
        heads, kv_heads = row["num_heads"], row["num_key_value_heads"]
        if heads % kv_heads:
            return None
        return {
            "kv_dtype": kv_dtype.value,
            "heads": heads,
            "kv_heads": kv_heads,
            "head_dim": row["head_dim"],
        }

    return _batch_token_tables(rows, decode=decode, layout=layout)


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
        _keep_fastest(cells, key, row["latency"])
    return _collective_table(cells)


def _collective_table(cells: dict[tuple[float, float], float]) -> dict[str, Any] | None:
    """A collective's table from its cells by (bytes, GPUs); None without any."""
    if not cells:
        return None
    sizes = sorted({s for s, _ in cells})
    gpus = sorted({g for _, g in cells})
    return {
        "bytes": sizes,
        "gpus": [int(g) for g in gpus],
        "ms": [_round(cells.get((s, g))) for s in sizes for g in gpus],
    }


def _all_to_all_table(rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """NCCL's fp16 all-to-all; message sizes are elements of the buffer each GPU sends to the
    group (nccl-tests' size: 64 MiB takes 0.22 ms on eight H200s, 306 GB/s), stored as bytes."""
    cells: dict[tuple[float, float], float] = {}
    for row in rows:
        if row["op_name"] != "alltoall" or row["nccl_dtype"] != "half":
            continue
        _keep_fastest(cells, (2.0 * row["message_size"], float(row["num_gpus"])), row["latency"])
    return _collective_table(cells)


def _nccl_dir(data: Path) -> Path | None:
    """The newest NCCL release's collectives of the system (engine-independent)."""
    base = data / "comm" / "nccl"
    found = _versions(base, "nccl_perf.parquet")
    return base / found[-1] if found else None


_MOE_DISTRIBUTION = "power_law_1.01"
"""Routing skew of the expert tables kept: aiconfigurator-core measures balanced routing and
power-law skews; a mild power law is what real traffic routes like (its default)."""


_MOE_OPT_IN_KERNELS = frozenset({"moe_torch_flow_min_latency"})
"""MoE kernels an engine runs only when asked: TensorRT-LLM's low-latency NVFP4 flow, which
aiconfigurator-core keeps in a view of its own (`_moe_low_latency_data`, beside the default
`_moe_data`, sdk/operations/moe.py) and a default deployment does not run."""


_MOE_SAME_BYTES = {DType.FP8: DType.FP8_BLOCK, DType.FP8_BLOCK: DType.FP8}
"""FP8 experts with one scale per tensor and with block scales move the same bytes through the
same tensor cores: where the database measures a shape in both, each format's table keeps the
faster kernel of the two per token count (where it measures one, the timer reads that one for
both). The silicon database's per-tensor FP8 MoE on the H200 (TensorRT-LLM 1.3.0rc20) is 3-4x
slower than its block-scaled FP8, its bf16 and the H100's per-tensor FP8 for the same shapes,
while TensorRT-LLM's own published H200 runs of those models are 2.3x the H100's: a collection
artefact the engine does not show."""


def _moe_tables(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fused-MoE layer time by tokens per (format, hidden, expert width, top-k, experts, tp,
    ep) at the kept routing skew; the fastest of the kernels a default deployment runs, per
    shape, and of FP8's two scalings where both are measured (`_MOE_SAME_BYTES`)."""
    shapes: dict[tuple[DType, int, int, int, int, int, int], dict[float, float]] = defaultdict(dict)
    for row in rows:
        dtype = _DTYPES.get(row["moe_dtype"])
        if dtype is None or row["distribution"] != _MOE_DISTRIBUTION:
            continue
        if row.get("kernel_source") in _MOE_OPT_IN_KERNELS:
            continue
        shape = (
            row["hidden_size"],
            row["inter_size"],
            row["topk"],
            row["num_experts"],
            row["moe_tp_size"],
            row["moe_ep_size"],
        )
        _keep_fastest(shapes[(dtype, *shape)], float(row["num_tokens"]), row["latency"])
    for key, cells in shapes.items():
        twin = shapes.get((_MOE_SAME_BYTES.get(key[0], key[0]), *key[1:]))
        if twin is not None and twin is not cells:
            for count, latency in twin.items():
                if count in cells and latency < cells[count]:
                    cells[count] = latency
    tables = []
    for (dtype, hidden, inter, topk, experts, tp, ep), cells in sorted(shapes.items()):
        tokens = sorted(cells)
        tables.append(
            {
                "dtype": dtype.value,
                "hidden": hidden,
                "inter": inter,
                "topk": topk,
                "experts": experts,
                "tp": tp,
                "ep": ep,
                "tokens": tokens,
                "ms": [_round(cells[t]) for t in tokens],
            }
        )
    return tables


_MLA_MODEL = "deepseek-ai/DeepSeek-V3"
"""The model whose MLA module the database measures (its shape: `MlaModuleTableDoc`)."""


def _mla_module_tables(rows: Iterable[dict[str, Any]], *, decode: bool) -> list[dict[str, Any]]:
    """DeepSeek-V3's MLA module per layer by (batch, tokens), per (KV format, weight format,
    heads on the GPU); the fastest attention backend per shape (the engine picks its best)."""

    def layout(row: dict[str, Any]) -> dict[str, Any] | None:
        kv_dtype, weight_dtype = _DTYPES.get(row["kv_cache_dtype"]), _DTYPES.get(row["gemm_type"])
        if kv_dtype is None or weight_dtype is None or row["model"] != _MLA_MODEL:
            return None
        if row["mla_dtype"] != "bfloat16" or row.get("tp_size", 1) != 1:
            return None
        return {
            "kv_dtype": kv_dtype.value,
            "weight_dtype": weight_dtype.value,
            "heads": row["num_heads"],
        }

    return _batch_token_tables(rows, decode=decode, layout=layout)


def _mla_kernel_tables(rows: Iterable[dict[str, Any]], *, decode: bool) -> list[dict[str, Any]]:
    """The MLA attention kernel per layer by (batch, tokens), per (KV format, heads on the GPU);
    the fastest kernel per shape."""

    def layout(row: dict[str, Any]) -> dict[str, Any] | None:
        kv_dtype = _DTYPES.get(row["kv_cache_dtype"])
        if kv_dtype is None or row["mla_dtype"] != "bfloat16":
            return None
        return {"kv_dtype": kv_dtype.value, "heads": row["num_heads"]}

    return _batch_token_tables(rows, decode=decode, layout=layout)


_BMM_STAGES = {"mla_gen_pre": "pre", "mla_gen_post": "post"}


def _mla_bmm_tables(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode MLA's absorption BMMs per layer by tokens, per (stage, format, heads on the GPU);
    the fastest kernel per shape."""
    shapes: dict[tuple[str, DType, int], dict[float, float]] = defaultdict(dict)
    for row in rows:
        stage, dtype = _BMM_STAGES.get(row["op_name"]), _DTYPES.get(row["bmm_dtype"])
        if stage is None or dtype is None:
            continue
        _keep_fastest(
            shapes[(stage, dtype, row["num_heads"])], float(row["num_tokens"]), row["latency"]
        )
    tables = []
    for (stage, dtype, heads), cells in sorted(shapes.items(), key=lambda item: str(item[0])):
        tokens = sorted(cells)
        tables.append(
            {
                "stage": stage,
                "dtype": dtype.value,
                "heads": heads,
                "tokens": tokens,
                "ms": [_round(cells[t]) for t in tokens],
            }
        )
    return tables


def _phase_tables(
    data: Path,
    engine: str,
    version: str,
    name: str,
    tables: Callable[..., list[dict[str, Any]]],
) -> tuple[Path | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """The directory of an MLA table pair (`name` formatted with `generation` and `context`)
    and its (prefill, decode) tables read by `tables`; empty where not measured."""
    found = _optional_dir(data, "mla", engine, version, name.format("generation"))
    if found is None:
        return None, [], []
    decode = tables(_rows(found / name.format("generation")), decode=True)
    context = found / name.format("context")
    prefill = tables(_rows(context), decode=False) if context.exists() else []
    return found, prefill, decode


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
    if version is None:
        versions = engine_versions(data, "gemm", engine)
        if not versions:
            raise FileNotFoundError(f"no gemm data for {engine} under {data}")
        version = versions[-1]
    gemm_dir = _version_dir(data, "gemm", engine, version, "gemm_perf.parquet")
    attention_dir = _version_dir(
        data, "attention", engine, version, "context_attention_perf.parquet"
    )
    comm_dir = _optional_dir(data, "comm", engine, version, "custom_allreduce_perf.parquet")
    gemm = _gemm_tables(_rows(gemm_dir / "gemm_perf.parquet"))
    prefill = _attention_tables(
        _rows(attention_dir / "context_attention_perf.parquet"), decode=False
    )
    decode = _attention_tables(
        _rows(attention_dir / "generation_attention_perf.parquet"), decode=True
    )
    all_reduce = (
        _all_reduce_table(_rows(comm_dir / "custom_allreduce_perf.parquet")) if comm_dir else None
    )
    nccl_dir = _nccl_dir(data)
    all_to_all = _all_to_all_table(_rows(nccl_dir / "nccl_perf.parquet")) if nccl_dir else None
    moe_dirs = _older_dirs(data, "moe", engine, version, "moe_perf.parquet")
    moe = _filled(_moe_tables(_rows(d / "moe_perf.parquet")) for d in moe_dirs)
    moe_dir = moe_dirs[0] if moe_dirs else None
    moe_filled = ", ".join(str(d.relative_to(data)) for d in moe_dirs[1:]) or "none"
    mla_dir, prefill_mla, decode_mla = _phase_tables(
        data, engine, version, "mla_{}_module_perf.parquet", _mla_module_tables
    )
    kernel_dir, prefill_kernel, decode_kernel = _phase_tables(
        data, engine, version, "{}_mla_perf.parquet", _mla_kernel_tables
    )
    bmm_dir = _optional_dir(data, "mla_bmm", engine, version, "mla_bmm_perf.parquet")
    bmm = _mla_bmm_tables(_rows(bmm_dir / "mla_bmm_perf.parquet")) if bmm_dir else []
    document: dict[str, Any] = {
        "id": f"{gpu.id}-{engine}-{version}",
        "gpu": gpu.id,
        "engine": engine,
        "version": version,
        "default": default,
        "source": {
            "title": (
                f"NVIDIA aiconfigurator-core {AICONFIGURATOR_VERSION} silicon database, system "
                f"{system}, {engine} {version}"
            ),
            "url": f"https://pypi.org/project/aiconfigurator-core/{AICONFIGURATOR_VERSION}/",
            "published": AICONFIGURATOR_PUBLISHED.isoformat(),
            "note": (
                f"gemm from {gemm_dir.relative_to(data)}, attention from "
                f"{attention_dir.relative_to(data)}, all-reduce from "
                f"{comm_dir.relative_to(data) if comm_dir else 'none'}, "
                f"all-to-all from {nccl_dir.relative_to(data) if nccl_dir else 'none'}, "
                f"moe from {moe_dir.relative_to(data) if moe_dir else 'none'}, "
                f"moe shapes that lacks from {moe_filled} (newest first), "
                f"MLA module from {mla_dir.relative_to(data) if mla_dir else 'none'}, "
                f"MLA kernel from {kernel_dir.relative_to(data) if kernel_dir else 'none'}, "
                f"MLA BMMs from {bmm_dir.relative_to(data) if bmm_dir else 'none'}; "
                "M at powers of two, attention without a window, experts at routing skew "
                f"{_MOE_DISTRIBUTION}, fastest kernel per shape; "
                f"latencies rounded to {_SIGNIFICANT} significant digits. Apache-2.0."
            ),
        },
        "overhead": default_overhead(engine),
        "gemm": gemm,
        "prefill_attention": prefill,
        "decode_attention": decode,
        "all_reduce": all_reduce,
        "all_to_all": all_to_all,
        "moe": moe,
        "prefill_mla": prefill_mla,
        "decode_mla": decode_mla,
        "prefill_mla_kernel": prefill_kernel,
        "decode_mla_kernel": decode_kernel,
        "mla_bmm": bmm,
    }
    document["fitted"], document["residual_pct"] = fit_tables(document, gpu)
    return ProfileDocument.model_validate(document, strict=False)
