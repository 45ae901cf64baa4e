"""A GPU's relatives: the other GPUs whose measured tables, scaled to its datasheet, time an
engine it has no tables of (`app.catalog.profiles.choose_engine`,
`app.engine.profiles.ProfiledStepCost`'s `measured_on`).

The same vendor only (another vendor's kernels are other software), the same architecture first,
then the nearest datasheet: |log| of the ratio of bf16 peaks plus |log| of the ratio of memory
bandwidths. docs/validation/README.md shows the scaled tables against the roofline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Datasheet", "nearest_relatives"]


@dataclass(frozen=True, slots=True)
class Datasheet:
    """What choosing a relative reads of a catalog GPU."""

    id: str
    vendor: str
    architecture: str | None
    bf16_flops_per_s: float | None
    memory_bandwidth_bytes_per_s: float


def _distance(a: Datasheet, b: Datasheet) -> float:
    peaks = (
        abs(math.log(a.bf16_flops_per_s / b.bf16_flops_per_s))
        if a.bf16_flops_per_s and b.bf16_flops_per_s
        else math.inf
    )
    return peaks + abs(math.log(a.memory_bandwidth_bytes_per_s / b.memory_bandwidth_bytes_per_s))


def nearest_relatives(gpu: Datasheet, measured: Iterable[Datasheet]) -> tuple[str, ...]:
    """The ids of `measured` (GPUs with tables) that are `gpu`'s relatives, nearest first."""
    return tuple(
        other.id
        for other in sorted(
            (m for m in measured if m.vendor == gpu.vendor and m.id != gpu.id),
            key=lambda m: (m.architecture != gpu.architecture, _distance(gpu, m)),
        )
    )
