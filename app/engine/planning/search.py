"""Searches over simulation probes: the fewest replicas that meet the SLOs, and the highest rate
one replica sustains.

The replica count is searched over whole numbers k, probing the per-replica rate demand / k, not
over a continuous rate: the answer is exactly "the smallest k whose probe meets the SLOs" (for a
verdict monotone in the rate), so a tighter SLO, whose probes fail wherever the looser one's do,
can never need fewer replicas. The search starts from a guess (the planner's estimate of the
answer, or what a sibling candidate needed), gallops away from it (k + 1, k + 3, k + 7, ...
after a miss; k - 1, k - 2, k - 4, ... after a meet, never below the analytic minimum k_min)
and bisects the last gap, so a right guess costs two probes, that k and k - 1, and a guess
beyond the cost cap (more replicas than could beat the plans found) one, at the cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.engine.planning.probes import ProbeOutcome, ProbeRunner
from app.engine.specs import SpecError

__all__ = [
    "LOW_LOAD_FRACTION",
    "ReplicaSearch",
    "highest_rate",
    "refine_rate",
    "search_replicas",
    "slowed_rate",
]

LOW_LOAD_FRACTION = 1 / 8
"""Replica searches go down to this fraction of the analytic capacity per replica; an SLO still
missed there is reported unreachable (a probe at lower load costs more and says little more)."""


@dataclass(frozen=True, slots=True)
class ReplicaSearch:
    """`replicas`: the fewest in [k_min, k_cap] whose probe meets the SLOs (None: none does);
    `outcome` its probe, or the last failing one when there is none."""

    replicas: int | None
    outcome: ProbeOutcome | None
    largest_failing: int | None
    """The largest k probed that missed (its rate demand / k is known to fail)."""


def search_replicas(
    runner: ProbeRunner,
    demand_rps: float,
    k_min: int,
    k_cap: int,
    *,
    first: int | None = None,
) -> ReplicaSearch:
    """Smallest k in [k_min, k_cap] with `runner.verdict(demand_rps / k).meets`.

    The first probe is at `first` (clamped into [k_min, k_cap]; k_min when None): a good guess
    settles the usual answer with two probes, that k and k - 1. From a miss the search gallops
    up (first + 1, + 3, + 7, ...), from a meet down (first - 1, - 2, - 4, ...), then bisects the
    last gap; whatever the guess, it ends on a k that meets beside k - 1 that misses (or k_min),
    so the answer does not depend on it for a verdict monotone in the rate."""
    if k_cap < k_min:
        return ReplicaSearch(None, None, None)
    start = k_min if first is None else min(max(first, k_min), k_cap)
    outcome = runner.verdict(demand_rps / start)
    # Bracket: `low` misses (k_min - 1: nothing below k_min is searched), `high` meets.
    low, high, best = k_min - 1, start, outcome
    failing: int | None = None
    if outcome.meets:
        step = 1
        while high - low > 1:
            k = max(start - step, low + 1)
            probe = runner.verdict(demand_rps / k)
            step *= 2
            if not probe.meets:
                low, failing = k, k
                break
            high, best = k, probe
    else:
        low, failing = start, start
        step = 1
        while True:
            if low >= k_cap:
                return ReplicaSearch(None, best, failing)
            k = min(start + 2 * step - 1, k_cap)
            step *= 2
            probe = runner.verdict(demand_rps / k)
            if probe.meets:
                high, best = k, probe
                break
            low, failing, best = k, k, probe
    # `low` misses (or lies below k_min) and `high` meets: bisect the whole numbers between.
    while high - low > 1:
        middle = (low + high) // 2
        probe = runner.verdict(demand_rps / middle)
        if probe.meets:
            high, best = middle, probe
        else:
            low, failing = middle, middle
    return ReplicaSearch(high, best, failing)


def refine_rate(
    runner: ProbeRunner,
    meets_rps: float,
    fails_rps: float,
    *,
    first_guess_rps: float | None = None,
    relative_tolerance: float = 0.05,
    max_probes: int = 3,
) -> tuple[float, float]:
    """Narrow [meets_rps, fails_rps] (a rate known to meet the SLOs, one known or bounded to
    fail) until their ratio is within 1 + `relative_tolerance` or `max_probes` probes are spent;
    returns the narrowed pair. The first probe is at `first_guess_rps` when it lies inside (the
    analytic bound less the tolerance: the bound is often close), later ones at the geometric
    midpoint."""
    low, high = meets_rps, fails_rps
    guess = first_guess_rps
    for _ in range(max_probes):
        if not math.isfinite(high) or high <= low * (1 + relative_tolerance):
            break
        middle = guess if guess is not None and low < guess < high else math.sqrt(low * high)
        guess = None
        if runner.verdict(middle).meets:
            low = middle
        else:
            high = middle
    return low, high


def highest_rate(
    runner: ProbeRunner,
    start_rps: float,
    bound_rps: float,
    *,
    relative_tolerance: float,
    max_probes: int,
) -> tuple[float, float]:
    """(met, failing): the highest rate one replica sustains within `runner`'s SLOs, narrowed
    to `relative_tolerance`: probe at `start_rps`, halve while it misses (down to
    `LOW_LOAD_FRACTION` of the analytic bound `bound_rps`, the first rate known to fail), then
    bisect (`refine_rate`). `SpecError` naming `slo` when it misses even at that low load."""
    floor = bound_rps * LOW_LOAD_FRACTION
    failing = bound_rps
    rate = start_rps
    while True:
        outcome = runner.run(rate)
        if outcome.meets:
            break
        failing = rate
        if rate <= floor:
            raise SpecError(
                "slo",
                f"unreachable even at low load: at {rate:.3g} requests/s per replica "
                f"({LOW_LOAD_FRACTION:.3g} of its analytic capacity): {'; '.join(outcome.misses)}",
            )
        rate = max(rate / 2, floor)
    return refine_rate(
        runner, rate, failing, relative_tolerance=relative_tolerance, max_probes=max_probes
    )


def slowed_rate(
    runner: ProbeRunner,
    slowdown: float,
    start_rps: float,
    bound_rps: float,
    *,
    relative_tolerance: float,
    max_probes: int,
) -> float | None:
    """The highest rate one replica sustains within `runner`'s SLOs if every step takes
    `slowdown` times as long as timed: such a replica serves rate r as the timed one serves
    slowdown x r, every latency `slowdown` times as long, so it sustains R(SLO / slowdown) /
    slowdown, R being `highest_rate`; None where no load meets the SLOs that slow. Its probes
    count in `runner.simulations` and draw on its budget."""
    slowed = runner.like(slo=runner.slo.scaled(1.0 / slowdown))
    try:
        met, _ = highest_rate(
            slowed,
            min(start_rps, bound_rps),
            bound_rps,
            relative_tolerance=relative_tolerance,
            max_probes=max_probes,
        )
    except SpecError as error:
        if error.field != "slo":  # the budget spent is no verdict on the SLOs
            raise
        met = None
    runner.simulations += slowed.simulations
    return None if met is None else met / slowdown
