"""Resolving the architecture to run and the GPU id to record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.bench.catalog import (
    ModelResolutionError,
    bundled_entries,
    fetch_service_model,
    find_model,
    match_gpu_alias,
    model_from_config_file,
    run_model_spec,
)

from .conftest import TINY_ENTRY

GPUS: list[dict[str, Any]] = [
    {"id": "h200-sxm-141gb", "name": "NVIDIA H200 SXM 141GB", "aliases": ["NVIDIA H200"]},
    {"id": "h100-sxm5-80gb", "name": "NVIDIA H100 SXM5 80GB", "aliases": ["NVIDIA H100 80GB HBM3"]},
    {"id": "h100-pcie-80gb", "name": "NVIDIA H100 PCIe", "aliases": ["NVIDIA H100 PCIe"]},
    {"id": "twin-a", "name": "A", "aliases": ["Same Name"]},
    {"id": "twin-b", "name": "B", "aliases": ["Same Name"]},
]


@pytest.mark.parametrize(
    ("device_name", "gpu_id"),
    [
        ("NVIDIA H200", "h200-sxm-141gb"),
        ("nvidia  h200 ", "h200-sxm-141gb"),  # case and runs of spaces do not matter
        ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
        ("NVIDIA H100 PCIe", "h100-pcie-80gb"),
        ("NVIDIA H100 SXM5 80GB", "h100-sxm5-80gb"),  # the entry's name counts as an alias
        ("NVIDIA H100", None),  # a prefix of two parts is not a match
        ("AMD EPYC 9654", None),
        ("Same Name", None),  # two entries claim it: ambiguous, so unknown
    ],
)
def test_match_gpu_alias(device_name: str, gpu_id: str | None) -> None:
    assert match_gpu_alias(device_name, GPUS) == gpu_id


def test_run_model_spec_keeps_the_catalog_architecture() -> None:
    entry = TINY_ENTRY | {"name": "Tiny", "sources": [], "params_total": 1}
    spec = run_model_spec(entry, model_id="tiny-llama")
    assert spec.model_dump() == TINY_ENTRY


def test_run_model_spec_records_the_layers_that_run() -> None:
    spec = run_model_spec(TINY_ENTRY, model_id="tiny-llama", layers=1)
    assert spec.num_layers == 1
    assert spec.hidden_size == 256


def test_moe_model_is_rejected_with_a_clear_message() -> None:
    moe = {"num_experts": 8, "experts_per_token": 2, "expert_intermediate_size": 14336}
    with pytest.raises(ModelResolutionError, match=r"mixture-of-experts .* not run MoE"):
        run_model_spec(TINY_ENTRY | {"moe": moe}, model_id="mixtral-8x7b")


def test_entry_missing_a_key_is_rejected() -> None:
    entry = {key: value for key, value in TINY_ENTRY.items() if key != "head_dim"}
    with pytest.raises(ModelResolutionError, match="lacks head_dim"):
        run_model_spec(entry, model_id="tiny-llama")


def test_impossible_entry_is_rejected() -> None:
    with pytest.raises(ModelResolutionError, match="num_kv_heads"):
        run_model_spec(TINY_ENTRY | {"num_kv_heads": 3}, model_id="tiny-llama")


def test_find_model_names_the_known_ids() -> None:
    entries = [TINY_ENTRY, TINY_ENTRY | {"id": "other"}]
    assert find_model("other", entries)["id"] == "other"
    with pytest.raises(ModelResolutionError, match=r"no model 'llama-9' .*other, tiny-llama"):
        find_model("llama-9", entries)


def test_bundled_llama_3_8b_is_the_published_architecture() -> None:
    spec = run_model_spec(
        find_model("llama-3-8b", bundled_entries("models")), model_id="llama-3-8b"
    )
    # meta-llama/Meta-Llama-3-8B config.json.
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads) == (
        32,
        4096,
        32,
        8,
    )
    assert (spec.head_dim, spec.intermediate_size, spec.vocab_size) == (128, 14336, 128256)


def test_fetch_service_model_asks_the_models_endpoint() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/models/tiny-llama":
            return httpx.Response(200, json=TINY_ENTRY)
        return httpx.Response(404, json={"title": "Not Found", "status": 404})

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        entry = fetch_service_model("http://ridgeline.test/", "tiny-llama", client=client)
        assert entry == TINY_ENTRY
        assert str(seen[0].url) == "http://ridgeline.test/v1/models/tiny-llama"
        assert seen[0].method == "GET"
        with pytest.raises(ModelResolutionError, match="answered 404"):
            fetch_service_model("http://ridgeline.test", "nope", client=client)


def test_model_from_config_file(tiny_config_path: Path, tmp_path: Path) -> None:
    fields = model_from_config_file(tiny_config_path)
    assert run_model_spec(fields, model_id=None).model_dump() == TINY_ENTRY | {"id": None}
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(ModelResolutionError, match="cannot read"):
        model_from_config_file(broken)
    unsupported = tmp_path / "gpt2.json"
    unsupported.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}), encoding="utf-8")
    with pytest.raises(ModelResolutionError, match="architectures"):
        model_from_config_file(unsupported)


def test_architectures_the_job_does_not_implement_are_refused() -> None:
    mla = {"kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 48, "v_head_dim": 64}
    with pytest.raises(ModelResolutionError, match="latent attention"):
        run_model_spec(TINY_ENTRY | {"mla": mla}, model_id="tiny-mla")
    with pytest.raises(ModelResolutionError, match="windowed attention"):
        run_model_spec(TINY_ENTRY | {"sliding_window": 64, "window_layers": 1}, model_id="tiny-swa")
