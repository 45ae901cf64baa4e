"""The bundled GPU catalog, app/catalog/data/gpus.json: shape, ids, sources, pinned figures.

Pinned figures come from docs/model.md and its source articles: dense (not sparse) tensor
peaks, the two A100 bandwidths of the errata, and the ridge points the source articles compute
(peak / bandwidth, FLOP/byte).
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import pytest

from app.engine.dtypes import DType
from app.engine.specs import GpuSpec, InterconnectSpec
from app.engine.units import GB, GIB, MIB, TB


def _catalog() -> list[dict[str, Any]]:
    text = resources.files("app.catalog").joinpath("data/gpus.json").read_text("utf-8")
    document = json.loads(text)
    assert set(document) == {"gpus"}
    gpus: list[dict[str, Any]] = document["gpus"]
    return gpus


GPUS = _catalog()
BY_ID = {entry["id"]: entry for entry in GPUS}

CLIENT_IDS = [
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "h100-sxm5-80gb",
    "h100-pcie-80gb",
    "h200-sxm-141gb",
    "b200-sxm-180gb",
    "l40s-48gb",
    "mi300x-192gb",
]
REQUIRED_IDS = [
    *CLIENT_IDS,
    "a100-pcie-80gb",
    "h100-nvl-94gb",
    "l4-24gb",
    "a10g-24gb",
    "mi325x-256gb",
]
ENTRY_KEYS = {
    "id",
    "name",
    "vendor",
    "architecture",
    "form_factor",
    "memory_bytes",
    "memory_type",
    "memory_bandwidth_bytes_per_s",
    "peak_flops_per_s",
    "interconnect",
    "tdp_watts",
    "aliases",
    "price_per_gpu_hour_usd",
    "price_note",
    "sources",
}
INTERCONNECT_KEYS = {"kind", "bandwidth_bytes_per_s", "latency_s"}
# Where an entry differs from the HGX defaults (8 GPUs per domain, a 400 Gb/s NIC per GPU).
INTERCONNECT_OPTIONAL = {"domain_size", "scale_out_bytes_per_s", "scale_out_latency_s"}
SOURCE_KEYS = {"title", "url", "covers", "note"}
VENDORS = {"nvidia", "amd"}
ARCHITECTURES = {"ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4"}
FORM_FACTORS = {"sxm4", "sxm5", "sxm6", "pcie", "oam", "superchip"}
INTERCONNECT_KINDS = {
    "nvlink3",
    "nvlink4",
    "nvlink5",
    "nvlink-bridge",
    "pcie4",
    "pcie5",
    "infinity-fabric",
}
# Tensor formats a datasheet peak may be given for; int4 is a weight format, not a listed peak.
PEAK_DTYPES = {"fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"}


def _figure_fields(entry: dict[str, Any]) -> set[str]:
    """Every dotted field of `entry` that holds a sourced figure."""
    fields = {
        "memory_bytes",
        "memory_bandwidth_bytes_per_s",
        "interconnect.bandwidth_bytes_per_s",
        "interconnect.latency_s",
        "tdp_watts",
    }
    fields |= {f"peak_flops_per_s.{dtype}" for dtype in entry["peak_flops_per_s"]}
    fields |= {f"interconnect.{key}" for key in INTERCONNECT_OPTIONAL & set(entry["interconnect"])}
    if entry["price_per_gpu_hour_usd"] is not None:
        fields.add("price_per_gpu_hour_usd")
    return fields


def _ridge(gpu_id: str, dtype: str = "bf16") -> float:
    entry = BY_ID[gpu_id]
    peak: float = entry["peak_flops_per_s"][dtype]
    bandwidth: float = entry["memory_bandwidth_bytes_per_s"]
    return peak / bandwidth


def _spec(entry: dict[str, Any]) -> GpuSpec:
    link = entry["interconnect"]
    return GpuSpec(
        memory_bytes=entry["memory_bytes"],
        memory_bandwidth_bytes_per_s=entry["memory_bandwidth_bytes_per_s"],
        peak_flops_per_s={DType(k): v for k, v in entry["peak_flops_per_s"].items()},
        interconnect=InterconnectSpec(
            kind=link["kind"],
            bandwidth_bytes_per_s=link["bandwidth_bytes_per_s"],
            latency_s=link["latency_s"],
        ),
        id=entry["id"],
    )


# --- shape ---------------------------------------------------------------------------------


def test_ids_are_unique_and_include_the_required_ones() -> None:
    ids = [entry["id"] for entry in GPUS]
    assert len(ids) == len(set(ids))
    assert set(REQUIRED_IDS) <= set(ids)
    assert len(ids) >= 13


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_entry_has_exactly_the_contract_keys(entry: dict[str, Any]) -> None:
    assert set(entry) == ENTRY_KEYS
    assert (
        INTERCONNECT_KEYS <= set(entry["interconnect"]) <= INTERCONNECT_KEYS | INTERCONNECT_OPTIONAL
    )
    assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", entry["id"])
    assert entry["vendor"] in VENDORS
    assert entry["architecture"] in ARCHITECTURES
    assert entry["form_factor"] in FORM_FACTORS
    assert entry["interconnect"]["kind"] in INTERCONNECT_KINDS
    assert entry["name"].strip() and entry["memory_type"].strip()
    assert isinstance(entry["memory_bytes"], int) and not isinstance(entry["memory_bytes"], bool)
    assert isinstance(entry["tdp_watts"], int) and entry["tdp_watts"] > 0


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_entry_builds_an_engine_gpu_spec(entry: dict[str, Any]) -> None:
    spec = _spec(entry)
    assert spec.ridge_intensity(DType.BF16) == pytest.approx(_ridge(entry["id"]), rel=1e-12)


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_peak_dtypes_are_engine_dtypes(entry: dict[str, Any]) -> None:
    keys = set(entry["peak_flops_per_s"])
    assert keys <= PEAK_DTYPES
    assert keys <= {d.value for d in DType}
    assert {"bf16", "fp16"} <= keys  # every part here runs 16-bit tensor GEMMs


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_memory_bytes_matches_the_marketed_capacity(entry: dict[str, Any]) -> None:
    """The id's size is GB or GiB depending on the vendor; the device reports within 2 % of one."""
    match = re.search(r"-(\d+)gb$", entry["id"])
    assert match is not None
    nominal = int(match.group(1))
    memory = entry["memory_bytes"]
    closest = min(abs(memory / GIB - nominal), abs(memory / GB - nominal)) / nominal
    # GB300's driver reports 284,208 MiB (298 GB) of the 288 GB NVIDIA markets: 3.5 % over.
    assert closest < (0.04 if entry["id"] == "gb300-288gb" else 0.02)


# --- aliases -------------------------------------------------------------------------------


def test_aliases_are_unique_across_the_catalog() -> None:
    aliases = [alias for entry in GPUS for alias in entry["aliases"]]
    assert all(alias.strip() == alias and alias for alias in aliases)
    assert len(aliases) == len(set(aliases))


@pytest.mark.parametrize(
    ("device_name", "gpu_id"),
    [
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
        ("NVIDIA H100 PCIe", "h100-pcie-80gb"),
        ("NVIDIA H100 NVL", "h100-nvl-94gb"),
        ("NVIDIA H200", "h200-sxm-141gb"),
        ("NVIDIA B200", "b200-sxm-180gb"),
        ("NVIDIA L40S", "l40s-48gb"),
        ("NVIDIA L4", "l4-24gb"),
        ("NVIDIA A10G", "a10g-24gb"),
        ("AMD Instinct MI300X", "mi300x-192gb"),
        ("AMD Instinct MI325X", "mi325x-256gb"),
    ],
)
def test_device_name_resolves_to_its_entry(device_name: str, gpu_id: str) -> None:
    owners = [entry["id"] for entry in GPUS if device_name in entry["aliases"]]
    assert owners == [gpu_id]


# --- sources -------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_every_figure_is_covered_by_an_https_source(entry: dict[str, Any]) -> None:
    assert entry["sources"]
    covered: set[str] = set()
    for source in entry["sources"]:
        assert set(source) == SOURCE_KEYS
        assert source["title"].strip()
        assert source["url"].startswith("https://")
        assert source["covers"]
        assert source["note"] is None or source["note"].strip()
        covered |= set(source["covers"])
    fields = _figure_fields(entry)
    assert fields <= covered, f"uncovered: {sorted(fields - covered)}"
    assert covered <= fields, f"covers name fields the entry lacks: {sorted(covered - fields)}"


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_price_is_positive_and_explained_or_null(entry: dict[str, Any]) -> None:
    price = entry["price_per_gpu_hour_usd"]
    if price is None:
        return
    assert 0.1 < price < 50.0
    # The note names the offer and the date the price was read, or says plainly that it is undated.
    assert entry["price_note"] and re.search(r"20\d\d-\d\d-\d\d|^Undated:", entry["price_note"])


# --- pinned figures (docs/model.md) -----------------------------------------------------


def test_h100_sxm_bf16_is_the_dense_figure_not_article_as_495() -> None:
    bf16 = BY_ID["h100-sxm5-80gb"]["peak_flops_per_s"]["bf16"]
    assert bf16 == pytest.approx(989.4e12, rel=0.01)
    assert bf16 != pytest.approx(495e12, rel=0.05)  # dense TF32, article A's mistake
    assert bf16 != pytest.approx(1979e12, rel=0.05)  # the datasheet's sparse figure


def test_a100_bandwidths_match_the_errata() -> None:
    assert BY_ID["a100-sxm4-40gb"]["memory_bandwidth_bytes_per_s"] == pytest.approx(
        1.555 * TB, rel=0.01
    )
    assert BY_ID["a100-sxm4-80gb"]["memory_bandwidth_bytes_per_s"] == pytest.approx(
        2.039 * TB, rel=0.01
    )


@pytest.mark.parametrize("gpu_id", ["a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-80gb"])
def test_a100_bf16_is_312_tflops(gpu_id: str) -> None:
    assert BY_ID[gpu_id]["peak_flops_per_s"]["bf16"] == pytest.approx(312e12, rel=0.01)


def test_mi300x_bf16_is_the_cdna3_dense_figure() -> None:
    assert BY_ID["mi300x-192gb"]["peak_flops_per_s"]["bf16"] == pytest.approx(1307.4e12, rel=0.01)


def test_a100_80gb_memory_is_what_nvidia_smi_reports() -> None:
    assert BY_ID["a100-sxm4-80gb"]["memory_bytes"] == 81920 * MIB


@pytest.mark.parametrize(
    ("gpu_id", "ridge"),
    [
        ("a100-sxm4-80gb", 153.0),  # article A: 312 TFLOPS / 2.04 TB/s
        ("h100-sxm5-80gb", 295.0),  # article B: 989 TFLOPS / 3.35 TB/s
    ],
)
def test_ridge_points_match_the_source_articles(gpu_id: str, ridge: float) -> None:
    assert _ridge(gpu_id) == pytest.approx(ridge, rel=0.02)


@pytest.mark.parametrize(
    ("gpu_id", "bytes_per_s"),
    [
        ("h100-sxm5-80gb", 3.35 * TB),
        ("h200-sxm-141gb", 4.8 * TB),
        ("b200-sxm-180gb", 8.0 * TB),
        ("mi300x-192gb", 5.3 * TB),
        ("l40s-48gb", 0.864 * TB),
    ],
)
def test_datasheet_bandwidths(gpu_id: str, bytes_per_s: float) -> None:
    assert BY_ID[gpu_id]["memory_bandwidth_bytes_per_s"] == pytest.approx(bytes_per_s, rel=0.01)


@pytest.mark.parametrize(
    ("gpu_id", "kind", "bytes_per_s"),
    [
        ("a100-sxm4-80gb", "nvlink3", 600 * GB),
        ("h100-sxm5-80gb", "nvlink4", 900 * GB),
        ("b200-sxm-180gb", "nvlink5", 1800 * GB),
        ("h100-pcie-80gb", "pcie5", 128 * GB),
        ("l40s-48gb", "pcie4", 64 * GB),
        ("l4-24gb", "pcie4", 64 * GB),
        ("a10g-24gb", "pcie4", 64 * GB),
    ],
)
def test_tensor_parallel_links(gpu_id: str, kind: str, bytes_per_s: float) -> None:
    link = BY_ID[gpu_id]["interconnect"]
    assert link["kind"] == kind
    assert link["bandwidth_bytes_per_s"] == pytest.approx(bytes_per_s, rel=1e-9)


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_link_latency_is_a_few_microseconds(entry: dict[str, Any]) -> None:
    assert 0.5e-6 <= entry["interconnect"]["latency_s"] <= 10e-6


# --- formats and their order ---------------------------------------------------------------


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_fp8_exists_exactly_from_hopper_and_ada_on(entry: dict[str, Any]) -> None:
    has_fp8 = "fp8" in entry["peak_flops_per_s"]
    assert has_fp8 == (entry["architecture"] != "ampere")


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_fp4_only_on_blackwell_and_cdna4(entry: dict[str, Any]) -> None:
    has_fp4 = "fp4" in entry["peak_flops_per_s"]
    assert has_fp4 == (entry["architecture"] in {"blackwell", "cdna4"})


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_dense_peaks_are_ordered(entry: dict[str, Any]) -> None:
    peaks = entry["peak_flops_per_s"]
    assert peaks["bf16"] == peaks["fp16"]
    if "tf32" in peaks:
        assert peaks["bf16"] >= peaks["tf32"]
        assert peaks["tf32"] == pytest.approx(peaks["bf16"] / 2, rel=0.03)
    if "fp8" in peaks:
        # 2 %: the L40S datasheet prints FP8 733 beside BF16 362.05 (NVIDIA's own rounding).
        assert peaks["fp8"] == pytest.approx(2 * peaks["bf16"], rel=0.02)
    if "fp4" in peaks and entry["id"].startswith(("b300", "gb300")):
        # Blackwell Ultra's NVFP4 tensor cores: about 3x FP8 dense (14 of 4.5 PFLOPS on B300)
        assert 2.9 < peaks["fp4"] / peaks["fp8"] < 3.4
    elif "fp4" in peaks:
        assert peaks["fp4"] == pytest.approx(2 * peaks["fp8"], rel=0.01)
    if "fp32" in peaks:
        assert peaks["fp32"] < peaks["bf16"]


@pytest.mark.parametrize(
    "entry", [e for e in GPUS if e["architecture"] == "hopper"], ids=lambda e: e["id"]
)
def test_int8_equals_fp8_on_hopper(entry: dict[str, Any]) -> None:
    peaks = entry["peak_flops_per_s"]
    assert peaks["int8"] == peaks["fp8"]


@pytest.mark.parametrize("entry", GPUS, ids=lambda e: e["id"])
def test_bf16_ridge_is_plausible(entry: dict[str, Any]) -> None:
    """A sparse peak (2x) or a GB/GiB slip in bandwidth would push this out of range. H20's
    cut-down compute (148 TFLOPS over 4 TB/s) is the low end: 37."""
    assert 30 <= _ridge(entry["id"]) <= 700
