"""CUDA smoke test: the same job on a GPU, with device events and a fused attention kernel."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from app.bench.__main__ import main  # noqa: E402 - after the importorskip
from app.bench.attention import choose_kernel  # noqa: E402
from app.bench.device import capture_cuda_graph  # noqa: E402
from app.bench.model import Decoder  # noqa: E402
from app.formats.run_document import (  # noqa: E402
    AttentionBackend,
    DeviceKind,
    Phase,
    RunDocument,
    RunModelSpec,
)

from .conftest import TINY_ENTRY  # noqa: E402

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
    note = document.provenance.note or ""
    assert "replays of a CUDA graph" in note
    assert "capture failed" not in note


def test_cuda_graph_replay_computes_what_eager_pytorch_does() -> None:
    spec = RunModelSpec.model_validate(TINY_ENTRY)
    device = torch.device("cuda")
    kernel = choose_kernel(device, torch.bfloat16, 4, 2, 64)
    with torch.inference_mode():
        decoder = Decoder(
            spec,
            device=device,
            dtype=torch.bfloat16,
            kernel=kernel,
            max_positions=256,
            generator=torch.Generator(device=device).manual_seed(0),
        )
        cache = decoder.new_kv_cache(4, 256)
        tokens = decoder.random_tokens(4, 1)
        eager = decoder.decode_step(tokens, cache).float()
        logits = torch.empty_like(eager)
        replay = capture_cuda_graph(lambda: logits.copy_(decoder.decode_step(tokens, cache)))
        logits.zero_()
        replay()
        torch.cuda.synchronize()
    # The same kernels on the same data; cuBLAS may pick another algorithm inside the capture.
    torch.testing.assert_close(logits, eager, rtol=2e-2, atol=2e-2)
