"""CUDA smoke test: the same job on a GPU, with device events and a fused attention kernel."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from app.bench.__main__ import main  # noqa: E402 - after the importorskip
from app.bench.schema import AttentionBackend, DeviceKind, Phase, RunDocument  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_job_runs_on_cuda_in_bf16(tiny_config_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    argv = ["--config", str(tiny_config_path), "--device", "cuda", "--out", str(out)]
    argv += ["--prompt-lens", "128,1024", "--decode-batches", "1,8", "--kv-lens", "256"]
    assert main([*argv, "--repeats", "3", "--warmup", "1"]) == 0
    document = RunDocument.model_validate_json(out.read_text(encoding="utf-8"))
    assert document.environment.device_kind is DeviceKind.CUDA
    assert document.environment.device_name == torch.cuda.get_device_name()
    assert document.environment.cuda_version == torch.version.cuda
    assert document.dtype == "bf16"  # the CUDA default
    # FlashAttention runs bf16 with head width 64 on every GPU PyTorch builds it for (sm80+).
    if torch.cuda.get_device_capability() >= (8, 0):
        assert document.attention_backend is AttentionBackend.FLASH
    for point in document.points:
        assert point.skipped is None
        assert point.median_ms is not None and math.isfinite(point.median_ms)
    prefill = {p.prompt_tokens: p.median_ms for p in document.points if p.phase is Phase.PREFILL}
    assert prefill[1024] is not None and prefill[128] is not None
    assert prefill[1024] >= prefill[128] * 0.8  # 8x the tokens is never much faster
    micro = document.microbenchmarks
    assert micro is not None
    assert micro.matmul_shape == (8192, 8192, 8192)
    assert micro.matmul_flops_per_s > 1e13  # any tensor-core GPU does 10 TFLOP/s in bf16
