"""Searches over simulation probes: the fewest replicas that meet the SLOs, and the highest rate
one replica sustains.

The replica count is searched over whole numbers k, probing the per-replica rate demand / k, not
over a continuous rate: the answer is exactly "the smallest k whose probe meets the SLOs" (for a
verdict monotone in the rate), so a tighter SLO, whose probes fail wherever the looser one's do,
can never need fewer replicas. The search gallops up from the analytic minimum k_min (k_min,
k_min + 1, k_min + 3, k_min + 7, ...) and bisects the last gap, so the usual answer, k_min or
one more, costs one or two probes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.engine.planning.probes import ProbeOutcome, ProbeRunner

__all__ = ["LOW_LOAD_FRACTION", "ReplicaSearch", "refine_rate", "search_replicas"]

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
    runner: ProbeRunner, demand_rps: float, k_min: int, k_cap: int
) -> ReplicaSearch:
    """Smallest k in [k_min, k_cap] with `runner.run(demand_rps / k).meets`."""
    if k_cap < k_min:
        return ReplicaSearch(None, None, None)
    failing: int | None = None
    last_fail: ProbeOutcome | None = None
    step = 1
    k = k_min
    while True:
        outcome = runner.run(demand_rps / k)
        if outcome.meets:
            break
        failing, last_fail = k, outcome
        if k >= k_cap:
            return ReplicaSearch(None, last_fail, failing)
        k = min(k_min + 2 * step - 1, k_cap)
        step *= 2
    # k meets and `failing` (if any) misses: bisect the whole numbers between them.
    low = failing if failing is not None else k_min - 1
    high, best = k, outcome
    while high - low > 1:
        middle = (low + high) // 2
        probe = runner.run(demand_rps / middle)
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
        if runner.run(middle).meets:
            low = middle
        else:
            high = middle
    return low, high
