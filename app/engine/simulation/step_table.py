"""Decode-only step times by interpolation between memoised timer calls: what lets a run of
100,000 requests call the timer some ten thousand times instead of half a million."""

from __future__ import annotations

from app.engine.simulation.config import StepTimer
from app.engine.specs import SpecError
from app.engine.step_load import StepLoad

__all__ = ["DecodeStepTable", "checked"]


class DecodeStepTable:
    """Decode-only step times by linear interpolation in the context, from memoised timer calls.

    For `seqs` decodes whose mean context is `m` tokens, the timer is called at mean contexts on
    a grid (every token below 128, then 64 points per doubling: spacing at most 1/64 of `m`) and
    interpolated between the two grid points around `m`. Exact, to rounding, for a timer
    affine in `decode_context_tokens` at fixed `seqs` (linear formulas; a memory-bound decode
    roofline); within the curvature over 1/64 of `m` otherwise. A run of 100,000 requests then
    calls the timer some ten thousand times for its decode steps instead of half a million.
    """

    __slots__ = ("_points", "_timer", "segments")

    def __init__(self, timer: StepTimer) -> None:
        self._timer = timer
        self._points: dict[tuple[int, int], float] = {}
        self.segments: dict[int, tuple[float, float]] = {}
        """grid mean context << 32 | seqs -> (seconds there, seconds per extra context token):
        an int key hashes faster than a tuple, and `seqs` is far below 2**32."""

    @property
    def calls(self) -> int:
        """Timer calls made so far."""
        return len(self._points)

    def _point(self, seqs: int, mean_context: int) -> float:
        key = (seqs, mean_context)
        step_s = self._points.get(key)
        if step_s is None:
            load = StepLoad(decode_seqs=seqs, decode_context_tokens=seqs * mean_context)
            step_s = checked(self._timer.seconds(load))
            self._points[key] = step_s
        return step_s

    def segment(self, seqs: int, low: int, spacing: int) -> tuple[float, float]:
        """Fill and return `segments[low << 32 | seqs]`."""
        low_s = self._point(seqs, low)
        high_s = self._point(seqs, low + spacing)
        segment = (low_s, (high_s - low_s) / (seqs * spacing))
        self.segments[low << 32 | seqs] = segment
        return segment


def checked(step_s: float) -> float:
    if not step_s > 0:
        raise SpecError("timer", f"a step must take positive time, got {step_s} s")
    return step_s
