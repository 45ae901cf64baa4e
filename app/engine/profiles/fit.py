"""What a profile's own points say about the roofline: efficiencies fitted to them (the
fallback for shapes outside every table), and how well log-log interpolation reproduces
measurements it did not see (`residual_pct`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Sequence

from app.engine.dtypes import BYTES_PER_ELEMENT, DType
from app.engine.profiles.grid import Grid
from app.engine.profiles.profile import AttentionTable
from app.engine.specs import GpuSpec

__all__ = [
    "attention_efficiency",
    "communication_efficiency",
    "gemm_efficiency",
    "held_out_error_pct",
    "memory_efficiency",
]


def _cells(grid: Grid) -> Iterator[tuple[tuple[float, ...], float]]:
    """(coordinates, value) of every measured cell."""
    strides = [math.prod(len(a) for a in grid.axes[i + 1 :]) for i in range(len(grid.axes))]
    for index, value in enumerate(grid.values):
        if value is None:
            continue
        yield (
            tuple(
                grid.axes[i][(index // strides[i]) % len(grid.axes[i])] for i in range(len(strides))
            ),
            value,
        )


def _median(values: Iterable[float]) -> float | None:
    found = [v for v in values if v > 0]
    return min(statistics.median(found), 1.0) if found else None


def gemm_efficiency(grid: Grid, gpu: GpuSpec, dtype: DType) -> float | None:
    """Median achieved share of peak over the large GEMMs (every side at least 2,048), where
    a GEMM is compute-bound on every GPU in the catalog."""
    peak = gpu.peak(dtype)
    return _median(
        2.0 * m * n * k / (ms / 1e3) / peak
        for (m, n, k), ms in _cells(grid)
        if min(m, n, k) >= 2048
    )


def attention_efficiency(tables: Sequence[AttentionTable], gpu: GpuSpec) -> float | None:
    """Median achieved share of the bf16 peak of long causal prefills (4,096 tokens or more):
    4 * heads * head_dim FLOPs per query-key pair, n (n + 1) / 2 pairs per prompt."""
    peak = gpu.peak(DType.BF16)
    return _median(
        4.0 * t.heads * t.head_dim * b * n * (n + 1) / 2 / (ms / 1e3) / peak
        for t in tables
        for (b, n), ms in _cells(t.grid)
        if n >= 4096
    )


def memory_efficiency(
    tables: Sequence[AttentionTable], gpu: GpuSpec, kv_dtype: DType
) -> float | None:
    """Median achieved share of HBM bandwidth of decode attention over long contexts (8,192
    tokens or more, 8 sequences or more): K and V of every context token read once."""
    element = BYTES_PER_ELEMENT[kv_dtype]
    return _median(
        2.0
        * t.kv_heads
        * t.head_dim
        * element
        * b
        * n
        / (ms / 1e3)
        / gpu.memory_bandwidth_bytes_per_s
        for t in tables
        for (b, n), ms in _cells(t.grid)
        if n >= 8192 and b >= 8
    )


def communication_efficiency(grid: Grid, gpu: GpuSpec) -> float | None:
    """Median ring bus bandwidth over the link's one-way bandwidth, for messages of 64 MB or
    more: `2 (g - 1) / g * bytes / time`."""
    link = gpu.interconnect.unidirectional_bytes_per_s
    return _median(
        2.0 * (g - 1) / g * size / (ms / 1e3) / link
        for (size, g), ms in _cells(grid)
        if size >= 64e6
    )


def held_out_error_pct(grid: Grid, axis: int = 0) -> float | None:
    """RMS relative error, in percent, of predicting each interior cell along `axis` from its
    two neighbours by log-log interpolation: how far the table's interpolation can be from a
    measurement it did not see (an upper bound: the neighbours are twice as far apart)."""
    strides = [math.prod(len(a) for a in grid.axes[i + 1 :]) for i in range(len(grid.axes))]
    stride, length, coords = strides[axis], len(grid.axes[axis]), grid.axes[axis]
    errors = []
    for index, value in enumerate(grid.values):
        position = (index // stride) % length
        if value is None or position in (0, length - 1):
            continue
        low, high = grid.values[index - stride], grid.values[index + stride]
        if low is None or high is None:
            continue
        x0, x, x1 = (
            math.log(coords[position - 1]),
            math.log(coords[position]),
            math.log(coords[position + 1]),
        )
        w = (x - x0) / (x1 - x0)
        predicted = math.exp(math.log(low) + w * (math.log(high) - math.log(low)))
        errors.append((predicted / value - 1.0) ** 2)
    return 100.0 * math.sqrt(sum(errors) / len(errors)) if errors else None
