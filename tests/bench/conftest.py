"""Fixtures of the benchmark-job tests: a tiny architecture, its config.json, a valid document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The tiny architecture of the job's CPU tests: 2 layers, d=256, 4 query heads over 2 KV heads
# of width 64, gated FFN of 512, vocabulary 1000.
TINY_ENTRY: dict[str, Any] = {
    "id": "tiny-llama",
    "num_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 64,
    "intermediate_size": 512,
    "ffn_type": "gated",
    "vocab_size": 1000,
    "max_context_tokens": 2048,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "moe": None,
    "mla": None,
    "sliding_window": 0,
    "window_layers": 0,
    "window_kind": "sliding",
    "attention_sinks": False,
    "mtp_layers": 0,
}

TINY_HF_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """The test machine's cores are shared: PyTorch gets one thread while a test runs."""
    try:
        import torch  # noqa: PLC0415 - the job's optional dependency
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_config_path(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_HF_CONFIG), encoding="utf-8")
    return path


def valid_document_dict() -> dict[str, Any]:
    """A complete measured-by-job document as JSON data; tests mutate copies of it."""
    return {
        "schema_version": 1,
        "id": None,
        "created_at": "2026-11-29T08:00:00Z",
        "environment": {
            "device_name": "NVIDIA H200",
            "device_kind": "cuda",
            "torch_version": "2.11.0+cu130",
            "cuda_version": "13.0",
            "driver_version": "580.159.03",
            "host": "gpu-node-1",
            "python_version": "3.12.3",
            "num_devices": 1,
        },
        "gpu": "h200-sxm-141gb",
        "model": dict(TINY_ENTRY),
        "dtype": "bf16",
        "tp": 1,
        "attention_backend": "flash",
        "provenance": {"kind": "measured-by-job", "source": "ridgeline-bench 0.1.0", "note": None},
        "points": [
            {
                "phase": "prefill",
                "prompt_tokens": 512,
                "batch_size": 1,
                "context_tokens": None,
                "median_ms": 10.0,
                "p10_ms": 9.5,
                "p90_ms": 11.0,
                "repeats": 5,
                "skipped": None,
            },
            {
                "phase": "decode",
                "prompt_tokens": None,
                "batch_size": 8,
                "context_tokens": 1024,
                "median_ms": 4.0,
                "p10_ms": 4.0,
                "p90_ms": 4.25,
                "repeats": 5,
                "skipped": None,
            },
            {
                "phase": "decode",
                "prompt_tokens": None,
                "batch_size": 128,
                "context_tokens": 2048,
                "median_ms": None,
                "p10_ms": None,
                "p90_ms": None,
                "repeats": 0,
                "skipped": {"reason": "out of memory: CUDA out of memory. Tried to allocate 8 GiB"},
            },
        ],
        "microbenchmarks": {
            "matmul_flops_per_s": 7.9e14,
            "matmul_shape": [8192, 8192, 8192],
            "copy_bytes_per_s": 4.3e12,
            "copy_bytes": 1073741824,
        },
    }


@pytest.fixture
def document_dict() -> dict[str, Any]:
    return valid_document_dict()
