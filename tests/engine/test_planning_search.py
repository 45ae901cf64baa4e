"""The replica search: the smallest whole k whose probe at demand / k meets the SLOs, whatever the
first guess, and how many probes a guess costs.

The probes are a stand-in whose verdict is "meets" at or below a sustainable rate: exactly the
monotone verdict the search assumes, so its answer is known by hand (the smallest k with
demand / k <= the rate)."""

from __future__ import annotations

import math
from typing import cast

import pytest

from app.engine.planning.probes import ProbeOutcome, ProbeRunner
from app.engine.planning.search import search_replicas

DEMAND = 24.0  # requests/s: the 20 requests/s of the planner's benchmark with 20 % headroom


class ThresholdRunner:
    """Meets the SLOs at rates up to `sustainable_rps`; counts distinct rates probed."""

    def __init__(self, sustainable_rps: float) -> None:
        self.sustainable_rps = sustainable_rps
        self.rates: list[float] = []

    def verdict(self, requests_per_s: float) -> ProbeOutcome:
        if requests_per_s not in self.rates:
            self.rates.append(requests_per_s)
        meets = requests_per_s <= self.sustainable_rps
        return ProbeOutcome(
            requests_per_s=requests_per_s,
            meets=meets,
            ttft_p50_ms=0.0,
            ttft_p99_ms=0.0,
            tpot_p50_ms=0.0,
            tpot_p99_ms=0.0,
            ttft_p99_ms_by_bucket=(),
            saturated=False,
            rejected_requests=0,
            misses=() if meets else ("too fast",),
        )


def search(
    sustainable_rps: float, k_min: int, k_cap: int, first: int | None
) -> tuple[int | None, int | None, int]:
    runner = ThresholdRunner(sustainable_rps)
    found = search_replicas(cast(ProbeRunner, runner), DEMAND, k_min, k_cap, first=first)
    return found.replicas, found.largest_failing, len(runner.rates)


@pytest.mark.parametrize("sustainable_rps", [0.5, 0.89, 2.0, 3.1, 4.38, 6.22, 24.0, 100.0])
def test_every_first_guess_finds_the_smallest_k_that_meets(sustainable_rps: float) -> None:
    k_min, k_cap = 1, 40
    # By hand: demand / k <= rate  <=>  k >= demand / rate.
    answer = math.ceil(DEMAND / sustainable_rps - 1e-12)
    expected = answer if answer <= k_cap else None
    for first in (None, *range(k_min, k_cap + 3)):
        replicas, failing, _ = search(sustainable_rps, k_min, k_cap, first)
        assert replicas == expected, first
        if expected is None:
            assert failing == k_cap  # the last probe is the cheapest k the cap allows
        else:
            # The rate the sizing narrows from: k - 1 missed (none below k_min was probed).
            assert failing == (expected - 1 if expected > k_min else None), first


def test_a_right_guess_costs_two_probes_and_a_hopeless_one_costs_one() -> None:
    # 3.1 requests/s sustained: 24 / 3.1 = 7.7, so 8 replicas, and 7 miss.
    assert search(3.1, 5, 17, first=8) == (8, 7, 2)
    # Guessing one low or one high costs one probe more.
    assert search(3.1, 5, 17, first=7) == (8, 7, 2)  # 7 misses, 8 meets
    assert search(3.1, 5, 17, first=9) == (8, 7, 3)  # 9 and 8 meet, 7 misses
    # From k_min, as the search did before it took a guess: 5, 6, 8, then 7.
    assert search(3.1, 5, 17, first=None) == (8, 7, 4)
    # A cap below the answer (more replicas would cost more than the plans found): the guess
    # is clamped to the cap, which misses, and nothing cheaper is probed.
    assert search(3.1, 5, 6, first=8) == (None, 6, 1)
    # The analytic minimum meets: nothing below it is probed, and no rate is known to miss.
    assert search(3.1, 8, 17, first=12) == (8, None, 4)  # 12, 11, 10, 8
