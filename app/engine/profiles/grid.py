"""Measured tables and their interpolation: log-log, multilinear, never beyond the measurements.

Kernel times grow as powers of their sizes over wide ranges (a GEMM's time ~ M once it is
compute-bound, ~ M^0 while it is bound by reading its weights), so between two measured sizes
the time is interpolated linearly in log(size) and log(time). A query outside a table's range on
any axis, or next to a cell that was not measured, has no answer here: the caller falls back to
the roofline and says so.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Curve", "Grid"]


def _bracket(logs: Sequence[float], x: float) -> tuple[int, float] | None:
    """(i, w): `x` lies between logs[i] and logs[i+1] at fraction w; None outside."""
    if x < logs[0] - 1e-12 or x > logs[-1] + 1e-12:
        return None
    last = len(logs) - 2
    if last < 0:
        return 0, 0.0
    i = bisect_right(logs, x) - 1
    if i < 0:
        i = 0
    elif i > last:
        i = last
    low = logs[i]
    w = (x - low) / (logs[i + 1] - low)
    return i, 0.0 if w < 0.0 else 1.0 if w > 1.0 else w


@dataclass(frozen=True, slots=True)
class Grid:
    """Values measured on the full product of `axes` (row-major, last axis fastest); `None` where
    a cell was not measured. Axes ascending and positive; values positive."""

    axes: tuple[tuple[float, ...], ...]
    values: tuple[float | None, ...]
    _log_axes: tuple[tuple[float, ...], ...] = field(init=False, repr=False, compare=False)
    _log_values: tuple[float | None, ...] = field(init=False, repr=False, compare=False)
    _strides: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size = math.prod(len(axis) for axis in self.axes)
        if len(self.values) != size:
            raise ValueError(f"a grid of {size} cells has {len(self.values)} values")
        for axis in self.axes:
            if not axis or any(b <= a for a, b in itertools.pairwise(axis)) or axis[0] <= 0:
                raise ValueError(f"axis {axis} must be positive and strictly ascending")
        if any(v is not None and not v > 0 for v in self.values):
            raise ValueError("measured values must be positive")
        strides = []
        stride = 1
        for axis in reversed(self.axes):
            strides.append(stride)
            stride *= len(axis)
        object.__setattr__(self, "_strides", tuple(reversed(strides)))
        object.__setattr__(
            self, "_log_axes", tuple(tuple(math.log(x) for x in axis) for axis in self.axes)
        )
        object.__setattr__(
            self,
            "_log_values",
            tuple(None if v is None else math.log(v) for v in self.values),
        )

    def __reduce__(
        self,
    ) -> tuple[type[Grid], tuple[tuple[tuple[float, ...], ...], tuple[float | None, ...]]]:
        # Rebuilt from its fields (what crosses to a heavy-work process): the compiled class
        # cannot set a frozen field the way pickle's default does.
        return Grid, (self.axes, self.values)

    def bounds(self, axis: int) -> tuple[float, float]:
        return self.axes[axis][0], self.axes[axis][-1]

    def at2(self, x: float, y: float) -> float | None:
        """`at(x, y)` of a two-axis grid, without the general loop (the simulator's hot path
        reads attention tables here, a few microseconds a step)."""
        if not (x > 0 and y > 0):
            return None
        log_x, log_y = self._log_axes
        found_x, found_y = _bracket(log_x, math.log(x)), _bracket(log_y, math.log(y))
        if found_x is None or found_y is None:
            return None
        (i, wx), (j, wy) = found_x, found_y
        width, values = len(log_y), self._log_values
        total = 0.0
        for di, weight_x in ((0, 1.0 - wx), (1, wx)):
            if weight_x == 0.0:
                continue
            for dj, weight_y in ((0, 1.0 - wy), (1, wy)):
                if weight_y == 0.0:
                    continue
                value = values[(i + di) * width + j + dj]
                if value is None:
                    return None
                total += weight_x * weight_y * value
        return math.exp(total)

    def at(self, *point: float) -> float | None:
        """The value at `point`, interpolated log-log between the measured cells around it;
        None outside the measured range or beside an unmeasured cell."""
        if len(point) != len(self.axes):
            raise ValueError(f"a point of this grid has {len(self.axes)} coordinates")
        brackets = []
        for logs, x in zip(self._log_axes, point, strict=True):
            if not x > 0:
                return None
            found = _bracket(logs, math.log(x))
            if found is None:
                return None
            brackets.append(found)
        total = 0.0
        for corner in range(1 << len(brackets)):
            weight, index = 1.0, 0
            for axis, (i, w) in enumerate(brackets):
                upper = (corner >> axis) & 1
                weight *= w if upper else 1.0 - w
                index += (i + upper) * self._strides[axis]
            if weight == 0.0:
                continue
            value = self._log_values[index]
            if value is None:
                return None
            total += weight * value
        return math.exp(total)


@dataclass(frozen=True, slots=True)
class Curve:
    """A one-axis table, log-log between its points, for the hot path: built once per model
    from a `Grid`, read in about a microsecond. Beyond its last point the work is split into
    equal parts that fit (`ceil(x / x_max)` runs of `x / parts`), the way a larger GEMM or
    message is several of the measured size; below its first point there is no answer."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    _lx: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _ly: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.xs or len(self.xs) != len(self.ys):
            raise ValueError("a curve needs as many values as points, at least one")
        object.__setattr__(self, "_lx", tuple(math.log(x) for x in self.xs))
        object.__setattr__(self, "_ly", tuple(math.log(y) for y in self.ys))

    def __reduce__(self) -> tuple[type[Curve], tuple[tuple[float, ...], tuple[float, ...]]]:
        return Curve, (self.xs, self.ys)

    def at(self, x: float) -> float | None:
        if x > self.xs[-1]:
            parts = math.ceil(x / self.xs[-1])
            one = self.at(x / parts)
            return None if one is None else parts * one
        found = _bracket(self._lx, math.log(x)) if x > 0 else None
        if found is None:
            return None
        i, w = found
        if w == 0.0:
            return self.ys[i]
        return math.exp(self._ly[i] + w * (self._ly[i + 1] - self._ly[i]))
