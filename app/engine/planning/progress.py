"""How far a plan has got, and how its caller stops it: the planner reports candidates done of
candidates to a `PlanProgress` between candidates, and stops when `update` raises
`PlanCancelled`. The planner never reads a clock or a database: what `update` does with the
count (store it, throttle it, check for a cancellation) is the caller's."""

from __future__ import annotations

from typing import Protocol

__all__ = ["PlanCancelled", "PlanProgress"]


class PlanCancelled(Exception):
    """Raised by `PlanProgress.update` to stop a plan between two candidates."""


class PlanProgress(Protocol):
    def update(self, done: int, total: int) -> None:
        """`done` of the plan's `total` candidates have their verdict (0 <= done <= total);
        raises `PlanCancelled` to stop the plan before the next one."""
        ...
