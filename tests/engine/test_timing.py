"""Roofline time of one op class, the ring all-reduce and the step breakdown."""

from __future__ import annotations

import pytest

from app.engine.counting import OpClass
from app.engine.specs import Efficiency, InterconnectSpec
from app.engine.timing import Bound, OpTime, StepTime, allreduce_seconds, roofline_seconds

NVLINK4 = InterconnectSpec("nvlink4", 900e9, latency_s=2e-6)


def test_roofline_takes_the_slower_roof() -> None:
    # 1e12 FLOP at 1e15 FLOP/s = 1 ms; 1e9 B at 1e12 B/s = 1 ms; 2e9 B -> 2 ms.
    assert roofline_seconds(1e12, 1e9, 1e15, 1e12) == pytest.approx(1e-3)
    assert roofline_seconds(1e12, 2e9, 1e15, 1e12) == pytest.approx(2e-3)


def test_allreduce_is_free_on_one_gpu() -> None:
    assert allreduce_seconds(1e9, 1, NVLINK4, Efficiency()) == 0.0


def test_ring_allreduce_by_hand() -> None:
    # 8 GPUs, 16 MB: 2*7/8*16e6 / (450e9 * 0.8) + 14 * 2 us = 77.78 us + 28 us.
    seconds = allreduce_seconds(16e6, 8, NVLINK4, Efficiency(communication=0.8))
    assert seconds == pytest.approx(2 * 7 / 8 * 16e6 / 360e9 + 14 * 2e-6, rel=1e-12)


def test_step_time_sums_and_bounds() -> None:
    step = StepTime(
        (OpTime(OpClass.FFN, 3e-3, 1e-3), OpTime(OpClass.DECODE_ATTENTION, 0.5e-3, 2e-3)),
        communication_s=0.5e-3,
        overhead_s=1e-3,
    )
    assert step.total_s == pytest.approx(3e-3 + 2e-3 + 0.5e-3 + 1e-3)
    assert step.compute_s == pytest.approx(3.5e-3)
    assert step.memory_s == pytest.approx(3e-3)
    assert step.bound is Bound.COMPUTE
    assert step.op(OpClass.FFN).bound is Bound.COMPUTE
    assert step.op(OpClass.DECODE_ATTENTION).bound is Bound.MEMORY
    assert step.op(OpClass.LM_HEAD).seconds == 0.0
    assert step.communication_share == pytest.approx(0.5 / 6.5)
