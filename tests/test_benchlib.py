"""scripts/benchlib.py's statistics: the interval printed beside a benchmark's median."""

from __future__ import annotations

import random
from types import ModuleType

from tests.scripts import load_script


def _benchlib() -> ModuleType:
    return load_script("benchlib")


def test_the_median_interval_is_the_binomial_order_statistics() -> None:
    """By hand: n = 21, P(B <= 5) = 0.013 and P(B <= 6) = 0.039, so the 6th and the 16th
    lowest; n = 10, P(B <= 1) = 0.011 and P(B <= 2) = 0.055, so the 2nd and the 9th; n = 5,
    P(B = 0) = 0.031 > 0.025, so no order statistic will do and the range is given."""
    interval = _benchlib().median_interval
    assert interval([float(v) for v in reversed(range(1, 22))]) == (6.0, 16.0)
    assert interval([float(v) for v in range(1, 11)]) == (2.0, 9.0)
    assert interval([3.0, 1.0, 2.0, 5.0, 4.0]) == (1.0, 5.0)
    assert interval([1.0] * 3 + [2.0] * 18, confidence=0.5) == (2.0, 2.0)


def test_the_median_interval_holds_the_median_at_least_as_often_as_it_says() -> None:
    """Pairs' ratios drawn from a skewed distribution (lognormal, median 1): the interval of 21
    holds the true median in 97.3 % of samples in theory (1 - 2 P(B <= 5)); over 4,000
    samples that is 97.3 +- 0.8 % (three standard errors)."""
    interval = _benchlib().median_interval
    draw = random.Random(13)
    trials = 4000
    held = 0
    for _ in range(trials):
        low, high = interval([draw.lognormvariate(0, 0.3) for _ in range(21)])
        held += low <= 1.0 <= high
    assert 0.965 <= held / trials <= 0.981
