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


class RecordCell(BaseModel):
    """One kind of answer's record against published runs."""

    family: str = Field(description="Architecture family: dense, moe, mla or gpt-oss.")
    engine: str = Field(description="The serving engine the runs used (`unstated` if unnamed).")
    basis: str = Field(
        description="What timed the answers: measured, partly measured, scaled or roofline."
    )
    regime: str = Field(description="Single request, under load, near capacity or saturated.")
    metric: str = Field(description="`ttft_ms`, `tpot_ms` or `e2e_ms`.")
    n: int = Field(description="Published comparisons of this kind.")
    sources: int = Field(description="Distinct sources among them.")
    mean_abs_error_pct: float = Field(description="Mean absolute error of the answers, percent.")
    median_error_pct: float = Field(
        description="Median signed error, percent (negative: answers faster than the runs)."
    )
    interval_pct: list[float] | None = Field(
        description="[low, high]: where measured figures lay, in percent of the answer."
    )
    interval_n: int | None = Field(description="Comparisons the interval is the range of.")
    interval_from: str = Field(
        description="`cell`, `family x metric`, `metric` (a coarser kind), or `none`."
    )
    held_out_coverage: float | None = Field(
        description="Share of this kind's comparisons inside the interval without their source."
    )


class RecordLevel(BaseModel):
    """A coarser kind answers fall back to: a family's metric, or a metric."""

    level: str = Field(description="`family x metric` or `metric`.")
    family: str | None = Field(description="The family; null at the metric level.")
    metric: str = Field(description="`ttft_ms`, `tpot_ms` or `e2e_ms`.")
    n: int = Field(description="Published comparisons.")
    sources: int = Field(description="Distinct sources among them.")
    interval_pct: list[float] | None = Field(description="[low, high], percent of the answer.")
    held_out_coverage: float | None = Field(
        description="Share inside the interval stated without their own source."
    )


class RecordPoint(BaseModel):
    """One published figure against Ridgeline's answer for the same run."""

    point: str = Field(description="The figure's id in the published set.")
    source: str = Field(description="Where it was published (URL).")
    family: str = Field(description="Architecture family.")
    engine: str = Field(description="The run's serving engine.")
    basis: str = Field(description="What timed Ridgeline's answer.")
    regime: str = Field(description="The run's load.")
    metric: str = Field(description="`ttft_ms`, `tpot_ms` or `e2e_ms`.")
    measured: float = Field(description="The published figure, milliseconds.")
    estimated: float = Field(description="Ridgeline's answer, milliseconds.")


class ValidationRecord(BaseModel):
    """Ridgeline's answers against published serving runs: where it is strong and where it is
    weak, with every comparison and its source."""

    about: str = Field(description="What the record is and how it was made.")
    tail: float = Field(description="Share of misses an interval leaves out at each end.")
    min_points: int = Field(description="Comparisons a kind needs for an interval of its own.")
    min_sources: int = Field(description="Sources those comparisons must come from.")
    held_out_coverage: float | None = Field(
        description="Share of all comparisons inside their kind's interval without their source."
    )
    comparisons: int = Field(description="Published figures compared.")
    sources: int = Field(description="Distinct sources (publications).")
    cells: list[RecordCell] = Field(description="One per kind of answer.")
    levels: list[RecordLevel] = Field(description="The coarser kinds answers fall back to.")
    points: list[RecordPoint] = Field(description="Every comparison.")
