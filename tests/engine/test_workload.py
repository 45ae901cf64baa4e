"""Length distributions, Poisson arrivals and traces, against closed forms.

Sampling tests draw 10**6 values with a fixed seed, so each statistic sits within a fraction of a
percent of its closed form; the tolerances below are several standard errors wide and say so.
"""

import math
from statistics import NormalDist

import numpy as np
import pytest

from app.engine.specs import SpecError
from app.engine.workload import HistogramLengths, PercentileLengths, PoissonWorkload, Trace

SAMPLES = 1_000_000
Z90 = 1.2815515655446004  # Phi^-1(0.90)
Z99 = 2.3263478740408408  # Phi^-1(0.99)


def rng(seed: int = 7) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- PercentileLengths ---------------------------------------------------------------------------


def test_percentile_lengths_pass_through_the_three_percentiles_exactly() -> None:
    lengths = PercentileLengths(p50=1000, p90=3000, p99=8000)
    assert lengths.quantile(0.50) == pytest.approx(1000, rel=1e-12)
    assert lengths.quantile(0.90) == pytest.approx(3000, rel=1e-12)
    assert lengths.quantile(0.99) == pytest.approx(8000, rel=1e-12)
    # Below p90 it is the log-normal through p50 and p90, so p10 mirrors p90: p50^2 / p90.
    assert lengths.quantile(0.10) == pytest.approx(1000**2 / 3000, rel=1e-12)


def test_percentile_lengths_samples_reproduce_the_percentiles() -> None:
    lengths = PercentileLengths(p50=1000, p90=3000, p99=8000)
    sample = lengths.sample(rng(), SAMPLES)
    p50, p90, p99 = np.quantile(sample, [0.50, 0.90, 0.99])
    # Standard error of a sample quantile: sqrt(q(1-q)/n) / pdf; for p99 here 0.35 %, so 1.5 %
    # is four of them; p50 and p90 are tighter still.
    assert p50 == pytest.approx(1000, rel=0.015)
    assert p90 == pytest.approx(3000, rel=0.015)
    assert p99 == pytest.approx(8000, rel=0.015)
    assert sample.dtype == np.int64
    assert sample.min() >= 1


def test_consistent_percentiles_give_the_log_normal_and_its_mean() -> None:
    # p50 = 200 with sigma = 0.8: p90 = 200 e^(0.8 z90), p99 = 200 e^(0.8 z99).
    sigma = 0.8
    lengths = PercentileLengths(
        p50=200, p90=200 * math.exp(sigma * Z90), p99=200 * math.exp(sigma * Z99)
    )
    sample = lengths.sample(rng(), SAMPLES)
    # Log-normal mean: median * exp(sigma^2 / 2) = 275.4; rounding to whole tokens moves it by
    # well under 0.1 %, sampling error is 0.1 % (CV 0.95 / sqrt(10^6)).
    assert sample.mean() == pytest.approx(200 * math.exp(sigma**2 / 2), rel=0.005)
    assert lengths.quantile(0.75) == pytest.approx(
        200 * math.exp(sigma * NormalDist().inv_cdf(0.75)), rel=1e-12
    )


def test_equal_percentiles_give_a_constant_length() -> None:
    sample = PercentileLengths(p50=7, p90=7, p99=7).sample(rng(), 1000)
    assert set(sample.tolist()) == {7}


def test_max_tokens_clamps_the_tail() -> None:
    lengths = PercentileLengths(p50=100, p90=400, p99=1000, max_tokens=1000)
    sample = lengths.sample(rng(), SAMPLES)
    assert sample.max() == 1000
    # Everything at or above p99 (1 %, plus the half-token rounding band) lands on the cap.
    assert np.mean(sample == 1000) == pytest.approx(0.01, rel=0.05)


def test_short_lengths_clamp_to_one_token() -> None:
    sample = PercentileLengths(p50=1, p90=50, p99=60).sample(rng(), 10_000)
    assert sample.min() == 1
    # Everything below 1.5 tokens rounds (or clamps) to 1: Phi(ln 1.5 / sigma) with the lower
    # log-normal's sigma = ln(50/1) / z90, 0.553. Standard error on 10^4 draws: 0.005.
    sigma = math.log(50) / Z90
    assert np.mean(sample == 1) == pytest.approx(NormalDist().cdf(math.log(1.5) / sigma), abs=0.02)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"p50": 0, "p90": 5, "p99": 9}, "p50"),
        ({"p50": 10, "p90": 5, "p99": 90}, "p90"),
        ({"p50": 10, "p90": 50, "p99": 40}, "p99"),
        ({"p50": 10, "p90": 50, "p99": 90, "max_tokens": 80}, "max_tokens"),
    ],
)
def test_percentile_lengths_reject_impossible_percentiles(
    kwargs: dict[str, float], field: str
) -> None:
    with pytest.raises(SpecError) as error:
        PercentileLengths(**kwargs)  # type: ignore[arg-type]
    assert error.value.field == field


# -- HistogramLengths ----------------------------------------------------------------------------


def test_histogram_lengths_reproduce_bin_masses_and_quantiles() -> None:
    # Three quarters of the mass on 1..100, a quarter on 101..1000.
    lengths = HistogramLengths(edges_tokens=(1, 101, 1001), weights=(3.0, 1.0))
    sample = lengths.sample(rng(), SAMPLES)
    # Binomial standard error of 0.75 on 10^6 draws: 0.00043; 0.002 is 4.6 of them.
    assert np.mean(sample < 101) == pytest.approx(0.75, abs=0.002)
    # Uniform within a bin: the median is 1 + 100 * 0.5/0.75, the p90 101 + 900 * 0.15/0.25.
    assert lengths.quantile(0.5) == pytest.approx(1 + 100 * 0.5 / 0.75, rel=1e-12)
    assert lengths.quantile(0.9) == pytest.approx(101 + 900 * 0.15 / 0.25, rel=1e-12)
    p50, p90 = np.quantile(sample, [0.5, 0.9])
    assert p50 == pytest.approx(67.67, abs=1.5)  # whole tokens: the floor of the continuous one
    assert p90 == pytest.approx(641.0, abs=4.0)  # 0.6 % of the bin width of 900
    # Mean: 0.75 * (1 + 100)/2 + 0.25 * (101 + 1000)/2 = 175.5 over whole tokens.
    assert sample.mean() == pytest.approx(0.75 * 50.5 + 0.25 * 550.5, rel=0.005)
    assert sample.min() == 1
    assert sample.max() == 1000


def test_histogram_zero_weight_bin_stays_empty() -> None:
    lengths = HistogramLengths(edges_tokens=(1, 10, 20, 30), weights=(1.0, 0.0, 1.0))
    sample = lengths.sample(rng(), 100_000)
    assert not np.any((sample >= 10) & (sample < 20))
    assert np.mean(sample < 10) == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize(
    ("edges", "weights", "field"),
    [
        ((1,), (), "edges_tokens"),
        ((1, 10), (1.0, 2.0), "weights"),
        ((0, 10), (1.0,), "edges_tokens"),
        ((1, 10, 10), (1.0, 1.0), "edges_tokens"),
        ((1, 10), (-1.0,), "weights"),
        ((1, 10), (0.0,), "weights"),
    ],
)
def test_histogram_lengths_reject_impossible_bins(
    edges: tuple[int, ...], weights: tuple[float, ...], field: str
) -> None:
    with pytest.raises(SpecError) as error:
        HistogramLengths(edges_tokens=edges, weights=weights)
    assert error.value.field == field


# -- PoissonWorkload -----------------------------------------------------------------------------


def constant(tokens: int) -> PercentileLengths:
    return PercentileLengths(p50=tokens, p90=tokens, p99=tokens)


def test_poisson_arrivals_have_exponential_gaps_at_the_rate() -> None:
    trace = PoissonWorkload(4.0, SAMPLES, constant(10), constant(5)).trace(seed=1)
    gaps = np.diff(np.concatenate([[0.0], trace.arrival_s]))
    # Exponential gaps: mean 1/rate and standard deviation equal to the mean (0.1 % errors).
    assert gaps.mean() == pytest.approx(0.25, rel=0.005)
    assert gaps.std() == pytest.approx(0.25, rel=0.005)
    # Counts per second are Poisson: variance equals the mean, 4.
    counts = np.bincount(trace.arrival_s.astype(np.int64))[:-1]
    assert counts.mean() == pytest.approx(4.0, rel=0.01)
    assert counts.var() == pytest.approx(4.0, rel=0.03)


def test_same_seed_same_trace_and_rate_only_rescales_arrivals() -> None:
    prompts = PercentileLengths(p50=1000, p90=3000, p99=8000)
    outputs = PercentileLengths(p50=200, p90=500, p99=1000)
    slow = PoissonWorkload(2.0, 1000, prompts, outputs)
    fast = PoissonWorkload(8.0, 1000, prompts, outputs)
    first, again = slow.trace(seed=42), slow.trace(seed=42)
    assert np.array_equal(first.arrival_s, again.arrival_s)
    assert np.array_equal(first.prompt_tokens, again.prompt_tokens)
    assert np.array_equal(first.output_tokens, again.output_tokens)
    # Common random numbers: same lengths at any rate, arrival times scaled by 2/8.
    quick = fast.trace(seed=42)
    assert np.array_equal(first.prompt_tokens, quick.prompt_tokens)
    assert np.array_equal(first.output_tokens, quick.output_tokens)
    assert quick.arrival_s == pytest.approx(first.arrival_s / 4, rel=1e-12)
    other = slow.trace(seed=43)
    assert not np.array_equal(first.prompt_tokens, other.prompt_tokens)
    assert not np.array_equal(first.arrival_s, other.arrival_s)


def test_poisson_workload_rejects_bad_inputs() -> None:
    with pytest.raises(SpecError) as error:
        PoissonWorkload(0.0, 10, constant(1), constant(1))
    assert error.value.field == "requests_per_s"
    with pytest.raises(SpecError) as error:
        PoissonWorkload(1.0, 0, constant(1), constant(1))
    assert error.value.field == "num_requests"
    with pytest.raises(SpecError) as error:
        PoissonWorkload(1.0, 1, constant(1), constant(1)).trace(seed=-1)
    assert error.value.field == "seed"


# -- Trace ---------------------------------------------------------------------------------------


def test_trace_from_rows_keeps_read_only_columns() -> None:
    trace = Trace.from_rows([(0.0, 10, 2), (0.5, 20, 3)])
    assert len(trace) == 2
    assert trace.arrival_s.tolist() == [0.0, 0.5]
    assert trace.prompt_tokens.tolist() == [10, 20]
    assert trace.output_tokens.tolist() == [2, 3]
    with pytest.raises(ValueError, match="read-only"):
        trace.prompt_tokens[0] = 5


def test_trace_copies_its_input() -> None:
    arrivals = np.array([0.0, 1.0])
    trace = Trace(arrivals, np.array([1, 1]), np.array([1, 1]))
    arrivals[0] = 9.0
    assert trace.arrival_s[0] == 0.0


@pytest.mark.parametrize(
    ("rows", "field"),
    [
        ([], "trace"),
        ([(1.0, 10, 2), (0.5, 10, 2)], "trace.arrival_s"),
        ([(-1.0, 10, 2)], "trace.arrival_s"),
        ([(math.nan, 10, 2)], "trace.arrival_s"),
        ([(0.0, 0, 2)], "trace.prompt_tokens"),
        ([(0.0, 10, 0)], "trace.output_tokens"),
    ],
)
def test_trace_rejects_impossible_rows(rows: list[tuple[float, int, int]], field: str) -> None:
    with pytest.raises(SpecError) as error:
        Trace.from_rows(rows)
    assert error.value.field == field


def test_trace_rejects_columns_of_different_lengths() -> None:
    with pytest.raises(SpecError) as error:
        Trace(np.array([0.0, 1.0]), np.array([1]), np.array([1, 1]))
    assert error.value.field == "trace"
