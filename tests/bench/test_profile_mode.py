"""The job's `--profile` mode on the CPU, with tiny sweeps: the document it writes is one the
service takes, its GEMM cells are the model's shapes, and the service answers from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.bench.cli import main
from app.formats.profile_document import ProfileDocument
from tests.conftest import AUTH


@pytest.mark.slow
def test_profile_mode_writes_a_profile_the_service_takes(
    tmp_path: Path, client: TestClient
) -> None:
    out = tmp_path / "profile.json"
    status = main(
        [
            "--profile",
            "--model",
            "llama-3-8b",
            "--gpu",
            "l4-24gb",
            "--device",
            "cpu",
            "--dtype",
            "bf16",
            "--max-tokens",
            "32",
            "--max-batch",
            "2",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--out",
            str(out),
        ]
    )
    assert status == 0
    document = ProfileDocument.model_validate(json.loads(out.read_text()), strict=False)
    (gemm,) = document.gemm
    assert gemm.m == [1, 2, 4, 8, 16, 32]
    # QKV (32 + 2 x 8 heads of 128), O and down (4,096), gate-up (2 x 14,336), LM head
    assert set(gemm.n) == {6144, 4096, 28672, 128256}
    measured = sum(value is not None for value in gemm.ms)
    assert measured == 6 * 5  # every M for each of the five linear layers, nothing else
    (prefill,) = document.prefill_attention
    assert (prefill.heads, prefill.kv_heads, prefill.head_dim) == (32, 8, 128)
    assert document.overhead.prefill_per_layer_ms == 0.0  # vLLM V1: no per-layer dispatch (policy)
    response = client.post("/v1/profiles", json=json.loads(out.read_text()), headers=AUTH)
    assert response.status_code == 201, response.text
    answer = client.post(
        "/v1/estimates/decode",
        json={
            "model": "llama-3-8b",
            "gpu": "l4-24gb",
            "engine": "vllm@0.26.0",  # the newest vLLM modelled: the job's default version
            "batch_size": 1,
            "context_tokens": 16,
        },
    ).json()
    assert answer["target"]["basis"]["decode_attention"] == "profile l4-24gb vllm@0.26.0"
