"""What answers say of their own uncertainty, from the validation record."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ErrorInterval", "error_interval_models", "error_intervals_field"]


class ErrorInterval(BaseModel):
    """Where measured figures of published serving runs of this answer's kind lay, in percent
    of the answer (negative: the run was faster than the answer). A figure of a new run is
    expected within it about as often as `held_out_coverage` says: the share of published
    comparisons that fell inside the interval their kind stated when their own source was left
    out of it."""

    model_config = ConfigDict(frozen=True)

    low_pct: float = Field(description="Lower end, percent of the answer's figure.")
    high_pct: float = Field(description="Upper end, percent of the answer's figure.")
    n: int = Field(description="Published comparisons the interval is the range of.")
    sources: int = Field(description="Distinct sources (publications) among them.")
    held_out_coverage: float | None = Field(
        description=(
            "Share of comparisons of this kind inside the interval stated without their own "
            "source; null where none could be checked."
        )
    )
    of: str = Field(
        description=(
            "Which comparisons: the answer's own kind (family, engine, basis, regime, metric) "
            "or the coarser kind it fell back to (family and metric, or the metric)."
        )
    )


def error_intervals_field(keys: str) -> Any:
    """The `error_interval_pct` field of an answer whose figures are keyed by `keys` (a
    sentence fragment naming them)."""
    return Field(
        default_factory=dict,
        description=(
            f"By {keys}, where published serving runs of this answer's kind (architecture "
            "family, engine, what timed it, load) measured the figure, in percent of the "
            "answer, from Ridgeline's validation record of published runs. Null, with the "
            "reason in `warnings`, for ideal and custom efficiencies and metrics no run "
            "measured."
        ),
    )


def error_interval_models(
    intervals: Mapping[str, object | None],
) -> dict[str, ErrorInterval | None]:
    """An answer's `error_interval_pct` from its stated intervals (read by attribute)."""
    return {
        key: None
        if interval is None
        else ErrorInterval.model_validate(interval, from_attributes=True)
        for key, interval in intervals.items()
    }
