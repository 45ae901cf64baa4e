"""A GPU's relatives: the other GPUs whose measured tables, scaled to its datasheet, time an
engine it has no tables of (`app.catalog.profiles.choose_engine`,
`app.engine.profiles.ProfiledStepCost`'s `measured_on`).

The same vendor and architecture only, nearest datasheet first (|log| of the ratio of bf16 peaks
plus |log| of the ratio of memory bandwidths). Holding GPUs' own tables out on the published runs
(docs/validation/README.md), a relative of the same architecture, scaled, came closer than the
roofline (26.0 % MAE against 29.1 % on 28 figures) and one of another architecture did not (27.2 %
against 21.8 % on 44): another architecture's kernels, like another vendor's, are other software.
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


def nearest_relatives(
    gpu: Datasheet, measured: Iterable[Datasheet], *, any_architecture: bool = False
) -> tuple[str, ...]:
    """The ids of `measured` (GPUs with tables) that are `gpu`'s relatives, nearest first;
    `any_architecture`: of the vendor's every architecture, the same first (what the validation
    compared, `scripts/validate_published.py --scaled --any-architecture`)."""
    if gpu.architecture is None and not any_architecture:
        return ()
    kin = (
        m
        for m in measured
        if m.vendor == gpu.vendor
        and m.id != gpu.id
        and (any_architecture or m.architecture == gpu.architecture)
    )
    return tuple(
        other.id
        for other in sorted(
            kin, key=lambda m: (m.architecture != gpu.architecture, _distance(gpu, m), m.id)
        )
    )
