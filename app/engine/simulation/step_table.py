"""Decode-only step times by interpolation between memoised timer calls: what lets a run of
100,000 requests call the timer some ten thousand times instead of half a million."""

from __future__ import annotations

import math
from collections.abc import Callable

from app.engine.simulation.config import StepTimer
from app.engine.specs import SpecError
from app.engine.step_load import StepLoad

__all__ = ["DecodeStepTable", "Segment", "checked", "grid_low"]

Segment = tuple[float, float, float, list[int], int]
"""A line of decode step times over a run of the grid, for one batch size `seqs`: (seconds at
the run's first grid point `base`, seconds per extra context token, seconds per step of the
batch's growth (`seqs` tokens), [the run's end: the grid point after it], `base`). A step at
total context C takes `seconds + slope * (C - seqs * base)`."""


class DecodeStepTable:
    """Decode-only step times by linear interpolation in the context, from memoised timer calls.

    For `seqs` decodes whose mean context is `m` tokens, the timer is called at mean contexts on
    a grid (every token below 128, then 64 points per doubling: spacing at most 1/64 of `m`) and
    interpolated between the two grid points around `m`. Exact, to rounding, for a timer
    affine in `decode_context_tokens` at fixed `seqs` (linear formulas; a memory-bound decode
    roofline); within the curvature over 1/64 of `m` otherwise. A run of 100,000 requests then
    calls the timer some ten thousand times for its decode steps instead of half a million.
    Adjacent segments on one line (to rounding) share it, so that the loop runs the steps
    across them as one arithmetic progression (`segment`).
    """

    __slots__ = ("_points", "_step_seconds", "_timer", "segments")

    def __init__(
        self,
        timer: StepTimer,
        step_seconds: Callable[[float, float, float, float, float, float], float] | None = None,
    ) -> None:
        """`step_seconds`, when given, is the timer's positional entry point (StepLoad's fields
        in order; `StepCostModel.step_seconds`): the same seconds, without a StepLoad."""
        self._timer = timer
        self._step_seconds = step_seconds
        self._points: dict[tuple[int, int], float] = {}
        self.segments: dict[int, Segment] = {}
        """grid mean context `low` << 32 | seqs -> the `Segment` from `low` (an int key hashes
        faster than a tuple, and `seqs` is far below 2**32)."""

    @property
    def calls(self) -> int:
        """Timer calls made so far."""
        return len(self._points)

    def _point(self, seqs: int, mean_context: int) -> float:
        key = (seqs, mean_context)
        step_s = self._points.get(key)
        if step_s is None:
            if self._step_seconds is not None:
                step_s = checked(self._step_seconds(0, 0, 0.0, 0, seqs, seqs * mean_context))
            else:
                load = StepLoad(decode_seqs=seqs, decode_context_tokens=seqs * mean_context)
                step_s = checked(self._timer.seconds(load))
            self._points[key] = step_s
        return step_s

    def segment(self, seqs: int, low: int) -> Segment:
        """Fill and return `segments[low << 32 | seqs]`; `low` is a grid point (`grid_low`).

        A segment whose predecessor (the one ending at `low`) is in the table and whose far
        point lies on the predecessor's line, within `_ON_LINE_ULPS` units in the last place,
        joins it: one line, one run of steps for the loop. The step times it gives then differ
        from its own two points' line by rounding only (a timer affine in the context, such as
        a memory-bound decode roofline, has every segment on one line)."""
        spacing = 1 if low < _FINE else 1 << (low.bit_length() - 7)
        high = low + spacing
        low_s = self._point(seqs, low)
        high_s = self._point(seqs, high)
        # The segment ending at `low` starts at the grid point below it.
        before = self.segments.get(grid_low(low - 1) << 32 | seqs) if low else None
        if before is not None:
            base_s, slope, _, run_end, base = before
            on_line_s = base_s + slope * (seqs * (high - base))
            if run_end[0] == low and abs(on_line_s - high_s) <= _ON_LINE_ULPS * math.ulp(high_s):
                run_end[0] = high
                self.segments[low << 32 | seqs] = before
                return before
        slope = (high_s - low_s) / (seqs * spacing)
        segment = (low_s, slope, slope * seqs, [high], low)
        self.segments[low << 32 | seqs] = segment
        return segment


def grid_low(mean_context: int) -> int:
    """The grid point at or below `mean_context`: itself below 128, else the multiple below
    of the spacing 2**(bit_length - 7), which keeps its top 7 bits (so the same bit length
    and spacing: `DecodeStepTable.segment` finds the spacing from the point alone)."""
    if mean_context < _FINE:
        return mean_context
    return mean_context - mean_context % (1 << (mean_context.bit_length() - 7))


_FINE = 128
"""Below this mean context the grid has every token; from it, 64 points a doubling."""
_ON_LINE_ULPS = 4
"""How near (in units in the last place) a segment's far point must lie to its predecessor's
line to join it: a few roundings of the timer's own sums."""


def checked(step_s: float) -> float:
    if not step_s > 0:
        raise SpecError("timer", f"a step must take positive time, got {step_s} s")
    return step_s
