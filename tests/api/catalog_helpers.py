"""Bodies and snapshots shared by the catalog API tests."""

from __future__ import annotations

import copy
from typing import Any

from sqlalchemy import select

from app.catalog.orm import CatalogTombstone, GpuRow, ModelRow
from app.db.session import make_engine

NEW_GPU: dict[str, Any] = {
    "id": "test-gpu-96gb",
    "name": "Test GPU 96GB",
    "vendor": "nvidia",
    "architecture": "hopper",
    "form_factor": "pcie",
    "memory_bytes": 96 * 2**30,
    "memory_type": "HBM3",
    "memory_bandwidth_bytes_per_s": 4.0e12,
    "peak_flops_per_s": {"bf16": 500e12, "fp16": 500e12, "fp8": 1000e12},
    "interconnect": {"kind": "pcie5", "bandwidth_bytes_per_s": 128e9},
    "tdp_watts": 400,
    "aliases": ["Test GPU 96GB"],
    "price_per_gpu_hour_usd": 2.5,
    "sources": [{"title": "made up for a test", "url": "https://example.com/test-gpu"}],
}

NEW_MODEL: dict[str, Any] = {
    "id": "test-model-1b",
    "name": "Test Model 1B",
    "family": "llama",
    "num_layers": 16,
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 64,
    "intermediate_size": 8192,
    "ffn_type": "gated",
    "vocab_size": 128256,
    "max_context_tokens": 131072,
    "tie_word_embeddings": True,
}


def new_gpu(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy(NEW_GPU) | changes


def new_model(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy(NEW_MODEL) | changes


def snapshot(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every catalog row, every column, to compare before and after a refused request."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            return {
                table.__tablename__: [
                    tuple(row)
                    for row in connection.execute(
                        select(*table.__table__.columns).order_by(*table.__table__.primary_key)
                    )
                ]
                for table in (GpuRow, ModelRow, CatalogTombstone)
            }
    finally:
        engine.dispose()
