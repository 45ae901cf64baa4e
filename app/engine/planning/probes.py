"""Simulation probes: one replica serving the plan's sample of requests at a given rate, and
whether the latency SLOs hold there.

Every probe of a plan serves the same requests (`ProbeSample`): their lengths are drawn once, and
their arrival times are drawn once at 1 request/s and divided by the probe's rate (common random
numbers, as `app.engine.workload` does for a Poisson stream). So two probes differ only in the
rate, and the verdict "meets the SLO" moves smoothly with it instead of with sampling noise.
A trace is replayed the same way: its first rows, time-scaled.

A probe meets the SLOs when the simulated run is not saturated and the p99 over its requests of
TTFT (overall and per prompt-length bucket) and of TPOT are within the objectives. Requests the
KV cache can never hold count as missing the TTFT objective.

The p99 of a probe is an order statistic of one simulated stretch of traffic: its requests are
not independent (a burst delays many of them at once), so its sampling error is larger than the
binomial figure for independent draws; more `probe_requests` (a longer stretch) narrow it.

Work is bounded: every probe of a plan draws on one `StepBudget` of simulated steps, and a plan
that would need more raises `SpecError` naming `probe_requests`.

A search needs only the verdict, and a probe expected to miss (above the rate the runner is told
is likely to fail, `prefix_above_rps`) first serves only the first quarter of its requests
(`ProbeRunner.verdict`). Until the first request it leaves out arrives, that prefix run is the
full run, step for step (a replica schedules only what has arrived): a request served by then
has its full-run TTFT, and one still waiting has at least the time it has waited. When enough of
them already exceed the TTFT objective to put the full run's p99 above it, the probe misses and
stops there; otherwise the full run decides. The verdict is the full run's either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from app.engine.planning.inputs import Slo, Traffic
from app.engine.simulation import (
    SchedulerConfig,
    SimulationResult,
    SimulationTooLong,
    StepTimer,
    simulate,
)
from app.engine.specs import SpecError
from app.engine.units import MS_PER_S
from app.engine.workload import PoissonWorkload, Trace

__all__ = ["ProbeOutcome", "ProbeRunner", "ProbeSample", "StepBudget", "build_sample"]

_MEAN_SAMPLE = 100_000  # draws for the traffic's mean lengths (relative error ~0.3 %)
PREFIX_SHARE = 4
"""A probe expected to miss first serves 1 / PREFIX_SHARE of its requests (`verdict`)."""
_PREFIX_LEAST = 400  # requests below which a sample is served whole: a prefix would prove little
_NEVER_S = 1e30  # the TTFT of a request the KV cache cannot hold: beyond any objective


@dataclass(frozen=True, eq=False)
class ProbeSample:
    """The requests every probe serves, arriving at 1 request/s (`unit_arrival_s`)."""

    unit_arrival_s: NDArray[np.float64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    mean_prompt_tokens: float
    """Of the traffic (not only the sample): what cost per token is computed with."""
    mean_output_tokens: float

    def __len__(self) -> int:
        return len(self.unit_arrival_s)

    def trace(self, requests_per_s: float) -> Trace:
        """The sample arriving at `requests_per_s`."""
        return Trace(
            arrival_s=self.unit_arrival_s / requests_per_s,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
        )

    def prompt_only(self) -> ProbeSample:
        """The same requests producing one token each: a prefill pool's work."""
        return ProbeSample(
            unit_arrival_s=self.unit_arrival_s,
            prompt_tokens=self.prompt_tokens,
            output_tokens=np.ones_like(self.output_tokens),
            mean_prompt_tokens=self.mean_prompt_tokens,
            mean_output_tokens=1.0,
        )


def build_sample(traffic: Traffic, count: int, seed: int) -> ProbeSample:
    """`count` requests of `traffic` (all of a shorter trace) at 1 request/s."""
    if traffic.trace is not None:
        trace = traffic.trace
        span_s = float(trace.arrival_s[-1] - trace.arrival_s[0])
        if not span_s > 0:
            raise SpecError("traffic.trace", "all requests arrive at once: the trace has no rate")
        # Mean rate of the trace: (n - 1) gaps over its span; scale it to 1 request/s.
        trace_rate = (len(trace) - 1) / span_s
        rows = min(count, len(trace))
        return ProbeSample(
            unit_arrival_s=(trace.arrival_s[:rows] - trace.arrival_s[0]) * trace_rate,
            prompt_tokens=trace.prompt_tokens[:rows],
            output_tokens=trace.output_tokens[:rows],
            mean_prompt_tokens=float(trace.prompt_tokens.mean()),
            mean_output_tokens=float(trace.output_tokens.mean()),
        )
    prompts, outputs = traffic.prompt_tokens, traffic.output_tokens
    if prompts is None or outputs is None:  # Traffic guarantees one shape or the other
        raise SpecError("traffic", "give prompt_tokens and output_tokens, or a trace")
    unit = PoissonWorkload(1.0, count, prompts, outputs).trace(seed)
    rng = np.random.Generator(np.random.PCG64([seed, 1]))  # a stream of its own
    return ProbeSample(
        unit_arrival_s=unit.arrival_s,
        prompt_tokens=unit.prompt_tokens,
        output_tokens=unit.output_tokens,
        mean_prompt_tokens=float(prompts.sample(rng, _MEAN_SAMPLE).mean()),
        mean_output_tokens=float(outputs.sample(rng, _MEAN_SAMPLE).mean()),
    )


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """One replica at `requests_per_s`: its p50/p99 latencies and whether the SLOs hold."""

    requests_per_s: float
    meets: bool
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    ttft_p99_ms_by_bucket: tuple[float | None, ...]
    """Per SLO bucket; None where the sample has no prompt in the bucket."""
    saturated: bool
    rejected_requests: int
    misses: tuple[str, ...]
    """Which objectives failed, in words; empty when `meets`."""


class StepBudget:
    """The simulated forward steps a plan may still spend, shared by all its probes."""

    def __init__(self, steps: int) -> None:
        if steps < 1:
            raise SpecError("max_simulated_steps", f"must be at least 1, got {steps}")
        self.limit = steps
        self.left = steps

    def exhausted(self, detail: str) -> SpecError:
        """The error a plan raises when a probe would overrun the budget."""
        return SpecError(
            "probe_requests",
            f"planning needs more than the {self.limit:,} simulated steps a plan may take "
            f"({detail}): plan fewer candidates (gpus, tp_candidates, formats, max_num_seqs, "
            "chunk_tokens), with fewer probe_requests, or without exhaustive",
        )


def _misses_above_p99(count: int) -> int:
    """How many of `count` values above a level put their p99 above it, with one to spare.

    `np.percentile` interpolates linearly between the sorted values at floor(0.99 (n - 1)) and
    the next, so its p99 is at least the value at j = floor(0.99 (n - 1)); n - j values above the
    level include that one. One more guards the rounding of 0.99 (n - 1)."""
    return count - math.floor(0.99 * (count - 1)) + 1


def _p(values: NDArray[np.float64], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


class ProbeRunner:
    """Simulates one candidate replica at any rate, memoised by rate; counts its simulations."""

    def __init__(
        self,
        sample: ProbeSample,
        timer: StepTimer,
        *,
        kv_capacity_tokens: int,
        block_tokens: int,
        scheduler: SchedulerConfig,
        slo: Slo,
        check_tpot: bool = True,
        budget: StepBudget | None = None,
        prefix_above_rps: float | None = None,
    ) -> None:
        self.sample = sample
        self.timer = timer
        self.kv_capacity_tokens = kv_capacity_tokens
        self.block_tokens = block_tokens
        self.scheduler = scheduler
        self.slo = slo
        self.check_tpot = check_tpot
        self.budget = budget
        self.prefix_above_rps = prefix_above_rps
        """Rates above this are expected to miss: `verdict` tries a prefix of the sample first."""
        self.simulations = 0
        self._outcomes: dict[float, ProbeOutcome] = {}
        self._verdicts: dict[float, ProbeOutcome] = {}
        prompts = sample.prompt_tokens
        self._bucket_masks: list[NDArray[np.bool_]] = []
        low = 0
        for bucket in slo.ttft_buckets:
            self._bucket_masks.append((prompts > low) & (prompts <= bucket.max_prompt_tokens))
            low = bucket.max_prompt_tokens

    def like(self, *, sample: ProbeSample | None = None, slo: Slo | None = None) -> ProbeRunner:
        """A runner like this one (timer, cache, scheduler, budget, checks) serving `sample`
        against `slo` (each this one's where None), with nothing simulated yet; the rate above
        which a prefix may settle a miss carries over only with the same SLOs."""
        return ProbeRunner(
            self.sample if sample is None else sample,
            self.timer,
            kv_capacity_tokens=self.kv_capacity_tokens,
            block_tokens=self.block_tokens,
            scheduler=self.scheduler,
            slo=self.slo if slo is None else slo,
            check_tpot=self.check_tpot,
            budget=self.budget,
            prefix_above_rps=self.prefix_above_rps if slo is None else None,
        )

    def run(self, requests_per_s: float) -> ProbeOutcome:
        """The outcome at `requests_per_s` per replica (simulated once per distinct rate)."""
        known = self._outcomes.get(requests_per_s)
        if known is not None:
            return known
        result = self._simulate(self.sample.trace(requests_per_s), requests_per_s)
        outcome = self._judge(requests_per_s, result)
        self._outcomes[requests_per_s] = outcome
        return outcome

    def verdict(self, requests_per_s: float) -> ProbeOutcome:
        """Whether the SLOs hold at `requests_per_s`, as `run` says; above `prefix_above_rps`
        a miss may be settled on the first 1 / `PREFIX_SHARE` of the requests (module
        docstring), and then only `meets` and `misses` are known (the latencies are NaN)."""
        known = self._outcomes.get(requests_per_s) or self._verdicts.get(requests_per_s)
        if known is not None:
            return known
        above = self.prefix_above_rps
        if above is not None and requests_per_s > above and len(self.sample) >= _PREFIX_LEAST:
            missed = self._prefix_miss(requests_per_s)
            if missed is not None:
                self._verdicts[requests_per_s] = missed
                return missed
        return self.run(requests_per_s)

    def _simulate(self, trace: Trace, requests_per_s: float) -> SimulationResult:
        """One simulation of `trace`, drawn from the budget."""
        self.simulations += 1
        budget = self.budget
        if budget is not None and budget.left < 1:
            raise budget.exhausted("none is left for another probe")
        try:
            result = simulate(
                trace,
                self.timer,
                kv_capacity_tokens=self.kv_capacity_tokens,
                block_tokens=self.block_tokens,
                scheduler=self.scheduler,
                max_steps=budget.left if budget is not None else None,
            )
        except SimulationTooLong as error:
            if budget is None:  # only a budget sets max_steps
                raise
            detail = f"a probe at {requests_per_s:.4g} requests/s: {error.message}"
            raise budget.exhausted(detail) from None
        if budget is not None:
            budget.left -= result.steps
        return result

    def _prefix_miss(self, requests_per_s: float) -> ProbeOutcome | None:
        """The full run's miss, proven on a prefix of the requests, or None (not proven)."""
        trace = self.sample.trace(requests_per_s)
        count = len(trace) // PREFIX_SHARE
        arrival_s = trace.arrival_s[:count]
        result = self._simulate(
            Trace(
                arrival_s=arrival_s,
                prompt_tokens=trace.prompt_tokens[:count],
                output_tokens=trace.output_tokens[:count],
            ),
            requests_per_s,
        )
        # Until `cutoff_s` the prefix run is the full run: a first token by then is the full
        # run's; a request without one then (still waiting, or never served: NaN) gets it
        # later in the full run, or never, so its TTFT exceeds cutoff_s - arrival (float
        # subtraction keeps the order).
        cutoff_s = float(trace.arrival_s[count])
        first_s = result.requests.first_token_s
        served = np.where(np.isnan(first_s), math.inf, first_s)
        at_least_s = np.minimum(served, cutoff_s) - arrival_s
        slo = self.slo
        misses: list[str] = []
        objectives = [(slo.ttft_p99_ms, np.ones(len(trace), dtype=bool), "")]
        objectives += [
            (bucket.ttft_p99_ms, mask, f" for prompts up to {bucket.max_prompt_tokens} tokens")
            for bucket, mask in zip(slo.ttft_buckets, self._bucket_masks, strict=True)
        ]
        for objective_ms, mask, scope in objectives:
            late = int(np.count_nonzero(mask[:count] & (at_least_s * MS_PER_S > objective_ms)))
            if late >= _misses_above_p99(int(np.count_nonzero(mask))):
                misses.append(
                    f"TTFT p99 > {objective_ms:g} ms{scope}: {late} of the first {count} "
                    "requests already take longer"
                )
        if not misses:
            return None
        nan = math.nan
        return ProbeOutcome(
            requests_per_s=requests_per_s,
            meets=False,
            ttft_p50_ms=nan,
            ttft_p99_ms=nan,
            tpot_p50_ms=nan,
            tpot_p99_ms=nan,
            ttft_p99_ms_by_bucket=tuple(None for _ in slo.ttft_buckets),
            saturated=False,
            rejected_requests=int(result.requests.rejected.sum()),
            misses=tuple(misses),
        )

    def _judge(self, requests_per_s: float, result: SimulationResult) -> ProbeOutcome:
        times = result.requests
        rejected = times.rejected
        ttft_s = np.where(rejected, _NEVER_S, times.ttft_s)
        tpot_s = times.tpot_s[~rejected]
        tpot_s = tpot_s[~np.isnan(tpot_s)]
        slo = self.slo
        ttft_p99 = _p(ttft_s, 99) * MS_PER_S
        tpot_p99 = _p(tpot_s, 99) * MS_PER_S
        misses: list[str] = []
        if result.saturated:
            misses.append("saturated: the queue grows without bound")
        if ttft_p99 > slo.ttft_p99_ms:
            misses.append(f"TTFT p99 {ttft_p99:.0f} ms > {slo.ttft_p99_ms:g} ms")
        if self.check_tpot and tpot_p99 > slo.tpot_p99_ms:
            misses.append(f"TPOT p99 {tpot_p99:.1f} ms > {slo.tpot_p99_ms:g} ms")
        by_bucket: list[float | None] = []
        for bucket, mask in zip(slo.ttft_buckets, self._bucket_masks, strict=True):
            if not mask.any():
                by_bucket.append(None)
                continue
            p99 = _p(ttft_s[mask], 99) * MS_PER_S
            by_bucket.append(p99)
            if p99 > bucket.ttft_p99_ms:
                misses.append(
                    f"TTFT p99 {p99:.0f} ms > {bucket.ttft_p99_ms:g} ms for prompts up to "
                    f"{bucket.max_prompt_tokens} tokens"
                )
        return ProbeOutcome(
            requests_per_s=requests_per_s,
            meets=not misses,
            ttft_p50_ms=_p(ttft_s, 50) * MS_PER_S,
            ttft_p99_ms=ttft_p99,
            tpot_p50_ms=_p(tpot_s, 50) * MS_PER_S,
            tpot_p99_ms=tpot_p99,
            ttft_p99_ms_by_bucket=tuple(by_bucket),
            saturated=result.saturated,
            rejected_requests=int(rejected.sum()),
            misses=tuple(misses),
        )
