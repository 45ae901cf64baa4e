"""Time: the roofline of one op class, the ring all-reduce, and the timed breakdown of a step.

The formulas are docs/model.md's (section 3): an op class takes
`max(FLOPs / (peak * eta_compute), bytes / (bandwidth * eta_memory))`; a ring all-reduce of
`size` bytes over `t` GPUs takes `2*(t-1)/t * size / (link bandwidth * eta_communication)` plus
`2*(t-1)` link latencies; a step adds `efficiency.overhead_ms` once.
`app.engine.step_cost.StepCostModel` applies them; this module holds the pieces and the results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.engine.counting import OpClass
from app.engine.specs import Efficiency, InterconnectSpec

__all__ = [
    "Bound",
    "OpTime",
    "OpTimeRow",
    "StepTime",
    "TimeTotals",
    "allreduce_seconds",
    "roofline_seconds",
]


class Bound(StrEnum):
    """Which roof limits the work."""

    COMPUTE = "compute"
    MEMORY = "memory"


def roofline_seconds(
    flops: float, bytes_moved: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float
) -> float:
    """Seconds of work bound by whichever of compute and memory is slower (Williams 2009)."""
    return max(flops / peak_flops_per_s, bytes_moved / bandwidth_bytes_per_s)


def allreduce_seconds(
    size_bytes: float, tp: int, interconnect: InterconnectSpec, efficiency: Efficiency
) -> float:
    """One ring all-reduce of `size_bytes` per GPU across `tp` GPUs; 0 when tp == 1.

    Ring: each GPU sends and receives 2*(t-1)/t of the buffer one way, in 2*(t-1) steps
    (reduce-scatter then all-gather), each paying the link latency.
    """
    if tp <= 1:
        return 0.0
    bandwidth = interconnect.unidirectional_bytes_per_s * efficiency.communication
    # Ring all-reduce volume 2*(t-1)/t * size over the one-way link, plus 2*(t-1) latencies.
    return 2.0 * (tp - 1) / tp * size_bytes / bandwidth + 2.0 * (tp - 1) * interconnect.latency_s


@dataclass(frozen=True, slots=True)
class OpTime:
    """One op class on one GPU: seconds if compute alone limited it, and if memory alone did."""

    op_class: OpClass
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> Bound:
        return Bound.COMPUTE if self.compute_s >= self.memory_s else Bound.MEMORY


OpTimeRow = tuple[OpClass, float, float]
"""An `OpTime`'s fields in order as a plain tuple: what `TimeTotals` sums without building the
records (a frozen dataclass costs a microsecond to build)."""


@dataclass(frozen=True, slots=True)
class StepTime:
    """A step's time on one GPU (all GPUs of a TP group run in lockstep), in seconds."""

    ops: tuple[OpTime, ...]
    communication_s: float
    overhead_s: float

    @property
    def compute_s(self) -> float:
        """Sum of the op classes' compute times (what the step takes if memory were free)."""
        return sum(op.compute_s for op in self.ops)

    @property
    def memory_s(self) -> float:
        """Sum of the op classes' memory times (what the step takes if compute were free)."""
        return sum(op.memory_s for op in self.ops)

    @property
    def total_s(self) -> float:
        return sum(op.seconds for op in self.ops) + self.communication_s + self.overhead_s

    @property
    def bound(self) -> Bound:
        """The step's roofline as a whole: compute-bound when its compute time is at least its
        memory time (for one op class at full efficiency: arithmetic intensity >= ridge)."""
        return Bound.COMPUTE if self.compute_s >= self.memory_s else Bound.MEMORY

    @property
    def communication_share(self) -> float:
        """Fraction of the step spent in tensor-parallel all-reduces."""
        total = self.total_s
        return self.communication_s / total if total > 0 else 0.0

    def op(self, op_class: OpClass) -> OpTime:
        """The time of `op_class`; zeros when the step has none."""
        for op in self.ops:
            if op.op_class is op_class:
                return op
        return OpTime(op_class, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class TimeTotals:
    """A `StepTime` summed: the same floats as its properties, without its per-op records."""

    compute_s: float
    memory_s: float
    total_s: float
    communication_s: float
    overhead_s: float

    @classmethod
    def of(cls, rows: Sequence[OpTimeRow], communication_s: float, overhead_s: float) -> TimeTotals:
        """The totals of `StepTime(ops, communication_s, overhead_s)` whose ops are `rows`,
        summed in their order as `StepTime`'s properties sum them."""
        compute_s = memory_s = seconds = 0.0
        for _, op_compute_s, op_memory_s in rows:
            compute_s += op_compute_s
            memory_s += op_memory_s
            # `OpTime.seconds`, max(compute, memory), without the call.
            seconds += op_memory_s if op_memory_s > op_compute_s else op_compute_s
        return cls(
            compute_s, memory_s, seconds + communication_s + overhead_s, communication_s, overhead_s
        )

    @property
    def bound(self) -> Bound:
        """`StepTime.bound`."""
        return Bound.COMPUTE if self.compute_s >= self.memory_s else Bound.MEMORY

    @property
    def communication_share(self) -> float:
        """`StepTime.communication_share`."""
        total = self.total_s
        return self.communication_s / total if total > 0 else 0.0
