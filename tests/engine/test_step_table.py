"""The decode step table: its grid, and segments on one line sharing it.

Tolerance: a line through memoised timer values reproduces a timer affine in the context to
rounding (1e-14 relative: a few units in the last place of sums of a dozen terms)."""

from dataclasses import dataclass

import pytest

from app.engine.simulation.step_table import DecodeStepTable, Segment, grid_low
from app.engine.step_load import StepLoad

SEQS = 4


@dataclass(frozen=True)
class AffineTimer:
    def seconds(self, load: StepLoad) -> float:
        return 0.003 + 2e-5 * load.decode_seqs + 4e-8 * load.decode_context_tokens


@dataclass(frozen=True)
class KinkedTimer:
    """Memory-bound up to a mean context of 2000 tokens, compute-bound beyond (a roofline's
    max of two lines)."""

    def seconds(self, load: StepLoad) -> float:
        memory_s = 0.003 + 4e-8 * load.decode_context_tokens
        compute_s = 0.003 - 4e-8 * SEQS * 2000 + 8e-8 * load.decode_context_tokens
        return max(memory_s, compute_s)


@dataclass(frozen=True)
class GentlyCurvedTimer:
    """Affine but for a square term of a nanosecond at the contexts tested: a line over one
    segment misses the next point by some 1e-14 s, far more than rounding."""

    def seconds(self, load: StepLoad) -> float:
        context = load.decode_context_tokens
        return 0.003 + 4e-8 * context + 1e-17 * context * context


def line_s(segment: Segment, mean_context: int) -> float:
    """A step of `SEQS` decodes at `mean_context` each, as the loop times it."""
    base_s, slope, _, _, base = segment
    return base_s + slope * (SEQS * mean_context - SEQS * base)


def grid(start: int, stop: int) -> list[int]:
    points = [grid_low(start)]
    while points[-1] < stop:
        points.append(points[-1] + (1 if points[-1] < 128 else 1 << (points[-1].bit_length() - 7)))
    return points


def test_the_grid_has_every_token_below_128_then_64_points_a_doubling() -> None:
    assert [grid_low(m) for m in (0, 127, 128, 129, 255, 256, 1001, 1023, 1024, 1039)] == [
        0,
        127,
        128,
        128,
        254,
        256,
        1000,
        1016,
        1024,
        1024,
    ]
    assert len(grid(1024, 2048)) == 65  # 1024, 1040, ..., 2048


def test_segments_of_an_affine_timer_share_a_few_lines() -> None:
    timer = AffineTimer()
    table = DecodeStepTable(timer)
    points = grid(900, 3000)  # 110 segments
    segments = [table.segment(SEQS, low) for low in points[:-1]]
    # A line fitted over one segment predicts points far along it to a few units in the last
    # place only: a new line starts where it misses by more (every 20 segments or more here).
    runs = {id(segment): segment for segment in segments}.values()
    assert len(runs) < len(segments) / 10
    assert segments[0][4] == points[0] and segments[-1][3] == [points[-1]]
    for index, segment in enumerate(segments):  # at both ends of each segment
        for point in points[index : index + 2]:
            load = StepLoad(decode_seqs=SEQS, decode_context_tokens=SEQS * point)
            assert line_s(segment, point) == pytest.approx(timer.seconds(load), rel=1e-14)
    assert table.calls == len(points)  # joining calls the timer no more


def test_a_kink_starts_a_new_line() -> None:
    timer = KinkedTimer()
    table = DecodeStepTable(timer)
    points = grid(1500, 2600)
    segments = [table.segment(SEQS, low) for low in points[:-1]]
    runs = {id(table.segments[low << 32 | SEQS]) for low in points[:-1]}
    assert len(runs) == 2  # memory-bound up to 2000 (a grid point), compute-bound beyond
    for index, segment in enumerate(segments):  # at both ends of each segment
        for point in points[index : index + 2]:
            load = StepLoad(decode_seqs=SEQS, decode_context_tokens=SEQS * point)
            assert line_s(segment, point) == pytest.approx(timer.seconds(load), rel=1e-14)


def test_a_segment_joins_only_a_predecessor_already_in_the_table() -> None:
    table = DecodeStepTable(AffineTimer())
    points = grid(1024, 1200)
    for low in reversed(points[:-1]):  # each made before the one below it
        table.segment(SEQS, low)
    assert len({id(table.segments[low << 32 | SEQS]) for low in points[:-1]}) == len(points) - 1


def test_segments_of_a_curved_timer_keep_their_own_lines() -> None:
    timer = GentlyCurvedTimer()
    table = DecodeStepTable(timer)
    points = grid(1500, 2600)
    segments = [table.segment(SEQS, low) for low in points[:-1]]
    assert len({id(segment) for segment in segments}) == len(segments)
    for index, segment in enumerate(segments):  # at both ends of each segment
        for point in points[index : index + 2]:
            load = StepLoad(decode_seqs=SEQS, decode_context_tokens=SEQS * point)
            assert line_s(segment, point) == pytest.approx(timer.seconds(load), rel=1e-14)
