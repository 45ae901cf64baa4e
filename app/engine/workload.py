"""What a serving replica is asked to do: request lengths, arrival times, and the trace they make.

A workload is either a Poisson stream (`PoissonWorkload`: a rate, a count, and a length
distribution for prompts and outputs) or a given `Trace` of (arrival time, prompt tokens, output
tokens) rows. Both end as a `Trace`, which is what the serving simulator consumes.

Length distributions come in two shapes, both sampled by inverse transform so that one seed gives
one sample whatever the shape:

- `PercentileLengths` from three published percentiles (p50, p90, p99), as serving dashboards and
  papers report them. Between and beyond the percentiles the log-length is linear in the normal
  score `z`: a log-normal through p50 and p90 below p90, and another through p90 and p99 above it.
  When the three percentiles lie on one log-normal this is exactly that log-normal; otherwise it
  is the log-normal with a heavier (or lighter) upper tail that passes through all three.
- `HistogramLengths` from bins `[edge_i, edge_{i+1})` with weights: uniform within each bin.

Samples are whole token counts, rounded and clamped to `[1, max_tokens]`. Determinism: the same
seed gives the same trace; the arrival gaps, prompt lengths and output lengths come from three
independent streams spawned from the seed, so changing the rate rescales the arrival times
without changing any request's lengths (common random numbers, which keeps a search over rates
smooth).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Final, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.engine.specs import SpecError

__all__ = [
    "ClosedLoopWorkload",
    "HistogramLengths",
    "LengthDistribution",
    "PercentileLengths",
    "PoissonWorkload",
    "Trace",
]

# Normal scores of the 90th and 99th percentiles: Phi^-1(0.9), Phi^-1(0.99).
_Z90: Final = NormalDist().inv_cdf(0.90)
_Z99: Final = NormalDist().inv_cdf(0.99)


def _clamp_round(tokens: NDArray[np.float64], max_tokens: int | None) -> NDArray[np.int64]:
    upper = np.inf if max_tokens is None else float(max_tokens)
    return np.clip(np.rint(tokens), 1.0, upper).astype(np.int64)


@dataclass(frozen=True, slots=True)
class PercentileLengths:
    """Token lengths with the given 50th, 90th and 99th percentiles (see the module docstring).

    The lower half mirrors the p50-p90 log-normal, so p10 = p50^2 / p90. Equal percentiles give a
    constant length. `max_tokens` (None: unbounded) clamps the upper tail, as a model's context
    limit or a client's `max_tokens` does.
    """

    p50: float
    p90: float
    p99: float
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.p50 >= 1:
            raise SpecError("p50", f"must be at least 1 token, got {self.p50}")
        if not self.p90 >= self.p50:
            raise SpecError("p90", f"{self.p90} is below p50 {self.p50}")
        if not self.p99 >= self.p90:
            raise SpecError("p99", f"{self.p99} is below p90 {self.p90}")
        if not math.isfinite(self.p99):
            raise SpecError("p99", "must be finite")
        if self.max_tokens is not None and self.max_tokens < self.p99:
            raise SpecError("max_tokens", f"{self.max_tokens} is below p99 {self.p99}")

    @property
    def _sigma_low(self) -> float:
        """Log-normal shape below p90: d ln(tokens) / dz."""
        return math.log(self.p90 / self.p50) / _Z90

    @property
    def _sigma_high(self) -> float:
        """Log-normal shape above p90."""
        return math.log(self.p99 / self.p90) / (_Z99 - _Z90)

    def _from_scores(self, z: NDArray[np.float64]) -> NDArray[np.float64]:
        below = math.log(self.p50) + self._sigma_low * z
        above = math.log(self.p90) + self._sigma_high * (z - _Z90)
        return np.exp(np.where(z <= _Z90, below, above))

    def quantile(self, q: float) -> float:
        """The continuous (unrounded, unclamped) length at cumulative probability `q` in (0, 1)."""
        if not 0 < q < 1:
            raise SpecError("q", f"must be in (0, 1), got {q}")
        z = np.array([NormalDist().inv_cdf(q)])
        return float(self._from_scores(z)[0])

    def sample(self, rng: np.random.Generator, count: int) -> NDArray[np.int64]:
        """`count` whole token lengths, drawn with `count` standard normals from `rng`."""
        return _clamp_round(self._from_scores(rng.standard_normal(count)), self.max_tokens)


@dataclass(frozen=True, slots=True)
class HistogramLengths:
    """Token lengths from weighted bins: bin i covers whole lengths `edges_tokens[i]` up to but
    not including `edges_tokens[i + 1]`, uniformly, with probability `weights[i] / sum(weights)`.

    Weights are relative (counts or fractions alike); a zero weight empties its bin.
    """

    edges_tokens: tuple[int, ...]
    weights: tuple[float, ...]
    _cdf: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        edges, weights = self.edges_tokens, self.weights
        if len(edges) < 2:
            raise SpecError("edges_tokens", "needs at least two edges (one bin)")
        if len(weights) != len(edges) - 1:
            raise SpecError(
                "weights", f"{len(weights)} weights for {len(edges) - 1} bins; need one per bin"
            )
        if edges[0] < 1:
            raise SpecError("edges_tokens", f"lengths start at 1 token, got {edges[0]}")
        if any(hi <= lo for lo, hi in itertools.pairwise(edges)):
            raise SpecError("edges_tokens", "must be strictly increasing")
        if any(not (w >= 0 and math.isfinite(w)) for w in weights):
            raise SpecError("weights", "must be finite and not negative")
        total = math.fsum(weights)
        if not total > 0:
            raise SpecError("weights", "at least one bin needs a positive weight")
        cumulative = np.concatenate([[0.0], np.cumsum(weights) / total])
        cumulative[-1] = 1.0
        object.__setattr__(self, "_cdf", tuple(cumulative.tolist()))

    def quantile(self, q: float) -> float:
        """The continuous length at cumulative probability `q` in (0, 1); whole lengths are its
        floor."""
        if not 0 < q < 1:
            raise SpecError("q", f"must be in (0, 1), got {q}")
        return float(np.interp(q, self._cdf, self.edges_tokens))

    def sample(self, rng: np.random.Generator, count: int) -> NDArray[np.int64]:
        """`count` whole token lengths, drawn with `count` uniforms from `rng`."""
        continuous = np.interp(rng.random(count), self._cdf, self.edges_tokens)
        return np.clip(
            np.floor(continuous), self.edges_tokens[0], self.edges_tokens[-1] - 1
        ).astype(np.int64)


LengthDistribution: TypeAlias = PercentileLengths | HistogramLengths


def _readonly(values: ArrayLike, dtype: type[np.generic], name: str) -> NDArray[np.generic]:
    try:
        array = np.array(values, dtype=dtype, copy=True)
    except (TypeError, ValueError) as error:
        raise SpecError(name, f"not an array of numbers: {error}") from None
    if array.ndim != 1:
        raise SpecError(name, f"must be one-dimensional, got shape {array.shape}")
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests in arrival order: row i arrives at `arrival_s[i]` seconds with a prompt of
    `prompt_tokens[i]` tokens and asks for `output_tokens[i]` tokens (the first one included).

    The arrays are read-only copies of what was given. Arrival times are non-negative and
    non-decreasing; both lengths are at least 1.
    """

    arrival_s: NDArray[np.float64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]

    def __post_init__(self) -> None:
        arrival = _readonly(self.arrival_s, np.float64, "trace.arrival_s")
        prompt = _readonly(self.prompt_tokens, np.int64, "trace.prompt_tokens")
        output = _readonly(self.output_tokens, np.int64, "trace.output_tokens")
        if not len(arrival) == len(prompt) == len(output):
            raise SpecError(
                "trace",
                f"columns differ in length: {len(arrival)} arrivals, {len(prompt)} prompts, "
                f"{len(output)} outputs",
            )
        if len(arrival) == 0:
            raise SpecError("trace", "needs at least one request")
        if not np.all(np.isfinite(arrival)) or arrival[0] < 0:
            raise SpecError("trace.arrival_s", "must be finite and not negative")
        if np.any(np.diff(arrival) < 0):
            raise SpecError("trace.arrival_s", "must be non-decreasing (sort the trace by arrival)")
        if prompt.min() < 1:
            raise SpecError("trace.prompt_tokens", "every prompt needs at least 1 token")
        if output.min() < 1:
            raise SpecError("trace.output_tokens", "every request produces at least 1 token")
        object.__setattr__(self, "arrival_s", arrival)
        object.__setattr__(self, "prompt_tokens", prompt)
        object.__setattr__(self, "output_tokens", output)

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[float, int, int]]) -> Trace:
        """A trace from (arrival_s, prompt_tokens, output_tokens) rows, already in arrival
        order."""
        table = list(rows)
        return cls(
            arrival_s=np.array([row[0] for row in table], dtype=np.float64),
            prompt_tokens=np.array([row[1] for row in table], dtype=np.int64),
            output_tokens=np.array([row[2] for row in table], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.arrival_s)


@dataclass(frozen=True, slots=True)
class PoissonWorkload:
    """`num_requests` requests arriving as a Poisson process of `requests_per_s`, starting at 0,
    with independently drawn prompt and output lengths."""

    requests_per_s: float
    num_requests: int
    prompt_tokens: LengthDistribution
    output_tokens: LengthDistribution

    def __post_init__(self) -> None:
        if not (self.requests_per_s > 0 and math.isfinite(self.requests_per_s)):
            raise SpecError("requests_per_s", f"must be positive, got {self.requests_per_s}")
        if self.num_requests < 1:
            raise SpecError("num_requests", f"must be at least 1, got {self.num_requests}")

    def trace(self, seed: int) -> Trace:
        """The requests for `seed` (a non-negative integer): same seed, same trace."""
        gaps_rng, prompt_rng, output_rng = _streams(seed)
        # Poisson process: independent exponential gaps of mean 1/rate.
        arrival_s = np.cumsum(gaps_rng.standard_exponential(self.num_requests))
        arrival_s /= self.requests_per_s
        return Trace(
            arrival_s=arrival_s,
            prompt_tokens=self.prompt_tokens.sample(prompt_rng, self.num_requests),
            output_tokens=self.output_tokens.sample(output_rng, self.num_requests),
        )


@dataclass(frozen=True, slots=True)
class ClosedLoopWorkload:
    """`num_requests` requests sent by users as earlier ones finish (`ClosedLoop` says how
    many and how soon): independently drawn prompt and output lengths, no arrival process. The
    lengths are those a `PoissonWorkload` of the same distributions draws for the same seed."""

    num_requests: int
    prompt_tokens: LengthDistribution
    output_tokens: LengthDistribution

    def __post_init__(self) -> None:
        if self.num_requests < 1:
            raise SpecError("num_requests", f"must be at least 1, got {self.num_requests}")

    def trace(self, seed: int) -> Trace:
        """The requests for `seed`, all at 0: the loop sends each when a user is free."""
        _, prompt_rng, output_rng = _streams(seed)
        return Trace(
            arrival_s=np.zeros(self.num_requests),
            prompt_tokens=self.prompt_tokens.sample(prompt_rng, self.num_requests),
            output_tokens=self.output_tokens.sample(output_rng, self.num_requests),
        )


def _streams(seed: int) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """Independent generators of arrival gaps, prompt and output lengths for `seed`."""
    if seed < 0:
        raise SpecError("seed", f"must not be negative, got {seed}")
    gaps, prompts, outputs = (
        np.random.Generator(np.random.PCG64(child))
        for child in np.random.SeedSequence(seed).spawn(3)
    )
    return gaps, prompts, outputs
