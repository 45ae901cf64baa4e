"""Ridgeline's validation record: how far its answers were from published serving runs, per
kind of answer, and the interval a new answer of that kind states.

A comparison is one published figure (`docs/validation/published.json`) against Ridgeline's
answer for the same run; its `miss_pct` is where the measured figure lay in percent of the
answer (`100 (measured / answer - 1)`: positive where the run was slower than the answer). A
cell gathers the comparisons of one kind of answer: architecture family x engine x basis (what
timed it: measured tables, a relative's scaled, the roofline) x regime (a single request, under
load, near capacity; a simulated load may also be saturated) x metric (TTFT, TPOT, end to
end). Its interval is the range of its misses (less `TAIL` at each end), stated where it
holds at least `MIN_POINTS` from at least `MIN_SOURCES` sources; a kind with fewer takes the
interval of the nearest coarser cell that has them (family x metric, then metric), and says so.

Leave-one-source-out: each source's comparisons are checked against the interval computed
without that source's, so a source never validates itself; the fraction that fell inside is the
cell's `held_out_coverage`. A kind's misses also give the slowdown at a confidence
(`Record.slowdown`: capacity sized so the SLOs hold that often) and the least error an answer
of its family may claim (`Record.validated_error_pct`).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from app.engine.estimates import default_memory_plan
from app.engine.profiles import ProfiledStepCost
from app.engine.specs import ModelSpec
from app.engine.step_cost import StepCostModel

__all__ = [
    "MIN_POINTS",
    "MIN_SOURCES",
    "NEAR_CAPACITY",
    "RECORD",
    "TAIL",
    "Cell",
    "Comparison",
    "Interval",
    "Record",
    "StatedInterval",
    "basis_kind",
    "basis_kind_of",
    "cells",
    "coverage",
    "document",
    "family_of",
    "held_out",
    "interval_of",
    "kind_of",
    "regime_of",
    "shipped",
    "shipped_record",
]

TAIL = 0.0
"""The share of misses an interval leaves out at each end: 0, the whole range other sources
showed. Errors cluster by source, so pooled percentiles understate how far the next source
lands: of the 65 comparisons of 13 sources (2026-12-07) that have an interval with their own
source left out, the 10th-90th percentiles held 65 %, the 5th-95th 77 %, the whole range 82 %."""
MIN_POINTS = 4
"""Comparisons a cell needs to state an interval of its own."""
MIN_SOURCES = 4
"""Sources a cell's comparisons must come from to state an interval of its own: errors cluster
by source (one run's setup shifts all its figures alike), so many points of one source say
little about the next."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """One published figure against Ridgeline's answer for the same run."""

    point: str
    source: str
    family: str
    engine: str
    basis: str
    regime: str
    metric: str
    measured: float
    estimated: float
    timed_by: str = ""
    """The answer's basis as it names it (the profile's label, or the roofline)."""

    @property
    def miss_pct(self) -> float:
        """Where the measured figure lay, in percent of the answer (positive: slower)."""
        return 100.0 * (self.measured / self.estimated - 1.0)

    @property
    def error_pct(self) -> float:
        """The answer's error against the measurement (negative: optimistic)."""
        return 100.0 * (self.estimated / self.measured - 1.0)


@dataclass(frozen=True, slots=True)
class Interval:
    """Where measured figures lay, in percent of the answer: [low, high] from `n` comparisons."""

    low: float
    high: float
    n: int


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, linear between order statistics."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (position - below) * (ordered[above] - ordered[below])


def interval_of(misses: Iterable[float]) -> Interval | None:
    """`misses` less `TAIL` at each end; None with fewer than `MIN_POINTS`."""
    ordered = sorted(misses)
    if len(ordered) < MIN_POINTS:
        return None
    return Interval(
        round(_quantile(ordered, TAIL), 1), round(_quantile(ordered, 1.0 - TAIL), 1), len(ordered)
    )


@dataclass(frozen=True, slots=True)
class Cell:
    """One kind of answer's record."""

    family: str
    engine: str
    basis: str
    regime: str
    metric: str
    n: int
    sources: int
    mean_abs_error_pct: float
    median_error_pct: float
    interval: Interval | None
    interval_from: str
    """Which comparisons the interval is of: "cell", "family x metric", "metric", or "none"."""
    held_out_coverage: float | None
    """The share of the cell's comparisons inside the interval computed without their source."""
    misses: tuple[float, ...] = ()
    """Its comparisons' misses, sorted (percent of the answer, to 0.1)."""


_LEVELS = ("cell", "family x metric", "metric")


def _key(c: Comparison, level: str) -> tuple[str, ...]:
    if level == "cell":
        return (c.family, c.engine, c.basis, c.regime, c.metric)
    if level == "family x metric":
        return (c.family, c.metric)
    return (c.metric,)


def _level_interval(
    comparisons: Sequence[Comparison], first: Comparison, level: str, exclude: str | None
) -> Interval | None:
    """The interval of the comparisons at `level` of `first`'s kind (without `exclude`'s
    source); None with fewer than `MIN_SOURCES` sources or `MIN_POINTS` points."""
    key = _key(first, level)
    members = [c for c in comparisons if _key(c, level) == key and c.source != exclude]
    if len({c.source for c in members}) < MIN_SOURCES:
        return None
    return interval_of(c.miss_pct for c in members)


def _interval(
    comparisons: Sequence[Comparison], first: Comparison, exclude: str | None
) -> tuple[Interval | None, str]:
    """The interval for answers of `first`'s kind from `comparisons` (without `exclude`'s
    source): the cell's own, else the nearest coarser level with enough."""
    for level in _LEVELS:
        found = _level_interval(comparisons, first, level, exclude)
        if found is not None:
            return found, level
    return None, "none"


def held_out(comparisons: Sequence[Comparison]) -> list[tuple[Comparison, bool | None]]:
    """Each comparison with whether it fell inside the interval its kind of answer states when
    computed without its source (None: no interval without it)."""
    found: list[tuple[Comparison, bool | None]] = []
    for c in comparisons:
        interval, _ = _interval(comparisons, c, c.source)
        found.append((c, None if interval is None else interval.low <= c.miss_pct <= interval.high))
    return found


def coverage(checked: Iterable[tuple[Comparison, bool | None]]) -> tuple[int, float | None]:
    """(comparisons with an interval, the share of them inside it)."""
    results = [inside for _, inside in checked if inside is not None]
    return len(results), (round(sum(results) / len(results), 2) if results else None)


def cells(comparisons: Sequence[Comparison]) -> list[Cell]:
    """The record: one cell per kind of answer the comparisons hold, sorted by kind."""
    return _cells(comparisons, held_out(comparisons))


def _cells(
    comparisons: Sequence[Comparison], held: Sequence[tuple[Comparison, bool | None]]
) -> list[Cell]:
    """`cells`, given `held_out(comparisons)`."""
    checked: dict[tuple[str, ...], list[tuple[Comparison, bool | None]]] = defaultdict(list)
    for c, inside in held:
        checked[_key(c, "cell")].append((c, inside))
    found = []
    for key, members in sorted(checked.items()):
        first = members[0][0]
        interval, level = _interval(comparisons, first, None)
        errors = sorted(c.error_pct for c, _ in members)
        family, engine, basis, regime, metric = key
        found.append(
            Cell(
                family=family,
                engine=engine,
                basis=basis,
                regime=regime,
                metric=metric,
                n=len(members),
                sources=len({c.source for c, _ in members}),
                mean_abs_error_pct=round(sum(abs(e) for e in errors) / len(errors), 1),
                median_error_pct=round(_quantile(errors, 0.5), 1) + 0.0,
                interval=interval,
                interval_from=level,
                held_out_coverage=coverage(members)[1],
                misses=tuple(sorted(round(c.miss_pct, 1) for c, _ in members)),
            )
        )
    return found


def document(comparisons: Sequence[Comparison]) -> dict[str, Any]:
    """The record as the service ships it (`data/record.json`)."""
    held = held_out(comparisons)
    return {
        "about": (
            "Ridgeline's answers against published serving runs (docs/validation/published.json): "
            "per kind of answer, n, mean absolute and median error (percent; negative: the "
            "answer was faster than the run), and the interval where measured figures lay in "
            "percent of the answer, with the share of comparisons inside it when their own "
            "source is held out. Written by `make validate`."
        ),
        "tail": TAIL,
        "min_points": MIN_POINTS,
        "min_sources": MIN_SOURCES,
        "held_out_coverage": coverage(held)[1],
        "comparisons": len(comparisons),
        "sources": len({c.source for c in comparisons}),
        "cells": [_cell_fields(cell) for cell in _cells(comparisons, held)],
        "levels": _levels(comparisons, held),
        "points": [
            {
                "point": c.point,
                "source": c.source,
                "family": c.family,
                "engine": c.engine,
                "basis": c.basis,
                "regime": c.regime,
                "metric": c.metric,
                "measured": c.measured,
                "estimated": round(c.estimated, 3),
            }
            for c in comparisons
        ],
    }


def _levels(
    comparisons: Sequence[Comparison], checked: Sequence[tuple[Comparison, bool | None]]
) -> list[dict[str, Any]]:
    """The coarser kinds an answer without a cell of its own falls back to: each family's
    metric, each metric; their intervals and held-out coverage (`checked`: `held_out`)."""
    found = []
    for level in _LEVELS[1:]:
        keys = sorted({_key(c, level) for c in comparisons})
        for key in keys:
            members = [c for c in comparisons if _key(c, level) == key]
            interval = _level_interval(members, members[0], level, None)
            found.append(
                {
                    "level": level,
                    "family": key[0] if len(key) == 2 else None,
                    "metric": key[-1],
                    "n": len(members),
                    "sources": len({c.source for c in members}),
                    "mean_abs_error_pct": round(
                        sum(abs(c.error_pct) for c in members) / len(members), 1
                    ),
                    "interval_pct": None if interval is None else [interval.low, interval.high],
                    "held_out_coverage": coverage(
                        [(c, inside) for c, inside in checked if _key(c, level) == key]
                    )[1],
                    "misses_pct": sorted(round(c.miss_pct, 1) for c in members),
                }
            )
    return found


def _cell_fields(cell: Cell) -> dict[str, Any]:
    fields = {
        name: getattr(cell, name)
        for name in (
            "family",
            "engine",
            "basis",
            "regime",
            "metric",
            "n",
            "sources",
            "mean_abs_error_pct",
            "median_error_pct",
        )
    }
    interval = cell.interval
    fields["interval_pct"] = None if interval is None else [interval.low, interval.high]
    fields["interval_n"] = None if interval is None else interval.n
    fields["interval_from"] = cell.interval_from
    fields["held_out_coverage"] = cell.held_out_coverage
    fields["misses_pct"] = list(cell.misses)
    return fields


RECORD = Path(__file__).parent / "data" / "record.json"
"""The record the service ships."""


def shipped() -> dict[str, Any]:
    """The shipped record, as `document` wrote it."""
    loaded: dict[str, Any] = json.loads(RECORD.read_text())
    return loaded


@dataclass(frozen=True, slots=True)
class StatedInterval:
    """The interval an answer states for one of its figures: where measured figures of runs of
    its kind lay, in percent of the answer, and how often runs of another source fell inside."""

    low_pct: float
    high_pct: float
    n: int
    sources: int
    held_out_coverage: float | None
    of: str
    """Which comparisons: the answer's own kind, or the coarser kind it fell back to."""


class Record:
    """The shipped record, indexed for answers (`interval`)."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.cells: dict[tuple[str, ...], Mapping[str, Any]] = {
            tuple(cell[k] for k in ("family", "engine", "basis", "regime", "metric")): cell
            for cell in document["cells"]
        }
        self.levels: dict[tuple[str | None, str], Mapping[str, Any]] = {
            (level["family"], level["metric"]): level for level in document["levels"]
        }

    def interval(
        self, family: str, engine: str, basis: str, regime: str, metric: str
    ) -> StatedInterval | None:
        """The interval of an answer of this kind: its cell's where published runs of its
        kind exist, else its family's for the metric, else the metric's; None where no
        published run measured the metric."""
        cell = self.cells.get((family, engine, basis, regime, metric))
        if cell is not None and cell["interval_pct"] is not None:
            low, high = cell["interval_pct"]
            of = f"{family} {engine} {basis} {regime} {metric} ({cell['interval_from']})"
            return StatedInterval(
                low, high, cell["interval_n"], cell["sources"], cell["held_out_coverage"], of
            )
        found = self._fallback(family, metric)
        if found is None:
            return None
        level, of = found
        low, high = level["interval_pct"]
        return StatedInterval(
            low, high, level["n"], level["sources"], level["held_out_coverage"], of
        )

    def _fallback(self, family: str, metric: str) -> tuple[Mapping[str, Any], str] | None:
        """The level whose interval an answer without one of its own cell takes: its family's
        `metric`, else the metric's; with what to call it. None where neither has one."""
        for key, of in (((family, metric), f"{family} {metric}"), ((None, metric), metric)):
            level = self.levels.get(key)
            if level is not None and level["interval_pct"] is not None:
                return level, of
        return None

    def slowdown(  # noqa: PLR0917 - an answer's kind, then the quantile
        self, family: str, engine: str, basis: str, regime: str, metric: str, quantile: float
    ) -> float | None:
        """The factor a measured figure of an answer of this kind stays under with probability
        `quantile`: 1 plus the `quantile` of the misses of the comparisons its interval is of
        (its cell's own, else its family's metric, else the metric), over 100; None where no
        published run measured the metric."""
        cell = self.cells.get((family, engine, basis, regime, metric))
        misses: Sequence[float] | None = None
        if cell is not None and cell["interval_from"] == "cell":
            misses = cell["misses_pct"]
        elif (found := self._fallback(family, metric)) is not None:
            misses = found[0]["misses_pct"]
        if not misses:
            return None
        return 1.0 + _quantile(sorted(misses), quantile) / 100.0

    def answer_slowdown(
        self, family: str, engine: str, basis: str, regime: str, quantile: float
    ) -> float | None:
        """The slowdown a latency answer of this kind must allow for at `quantile`: the larger
        of its TTFT's and its TPOT's (`slowdown`); None where no published run informs either."""
        factors = [
            k
            for metric in ("ttft_ms", "tpot_ms")
            if (k := self.slowdown(family, engine, basis, regime, metric, quantile)) is not None
        ]
        return max(factors) if factors else None

    def validated_error_pct(self, family: str, metric: str) -> float | None:
        """The mean absolute error published runs showed for a family's `metric` (from at
        least `MIN_SOURCES` sources), else for the metric across families; None where no run
        measured it: the least error an answer of that family may claim."""
        for key in ((family, metric), (None, metric)):
            level = self.levels.get(key)
            if level is not None and level["sources"] >= MIN_SOURCES:
                found: float = level["mean_abs_error_pct"]
                return found
        return None


@cache
def shipped_record() -> Record:
    """The shipped record, read once."""
    return Record(shipped())


def family_of(model: ModelSpec) -> str:
    """The architecture family the record groups a model's answers by: MLA, gpt-oss (MoE with
    attention sinks), other MoE, dense."""
    if model.mla is not None:
        return "mla"
    if model.moe is not None:
        return "gpt-oss" if model.attention_sinks else "moe"
    return "dense"


def kind_of(model: ModelSpec, engine: str, basis: Mapping[str, str]) -> tuple[str, str, str]:
    """(family, engine, basis kind) of an answer for `model` under `engine` whose op families
    `basis` names: the kind the record groups it by, but for its regime."""
    return (family_of(model), engine, basis_kind_of(basis))


def basis_kind(cost: StepCostModel) -> str:
    """What timed an answer: measured tables for every op family of its step, a relative's
    scaled, partly measured, or the roofline."""
    if not isinstance(cost, ProfiledStepCost):
        return "roofline"
    return basis_kind_of(cost.basis)


def basis_kind_of(basis: Mapping[str, str]) -> str:
    """`basis_kind` of an answer's `target.basis` (its label per op family)."""
    labels = basis.values()
    if any(" scaled to " in label for label in labels):
        return "scaled"
    roofline = [label.startswith("roofline") for label in labels]
    if all(roofline):
        return "roofline"
    return "partly measured" if any(roofline) else "measured"


NEAR_CAPACITY = 0.8
"""Sequences that hold this share of the replica's KV cache or more are near capacity."""


def regime_of(cost: StepCostModel, batch: int, tokens_each: int) -> str:
    """A single request, under load, or near capacity (its batch's KV at 80 % of the cache or
    more)."""
    if batch <= 1:
        return "single request"
    held = default_memory_plan(cost).replica_kv_tokens
    return "near capacity" if held and batch * tokens_each >= NEAR_CAPACITY * held else "under load"
