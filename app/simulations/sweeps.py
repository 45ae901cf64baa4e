"""Load sweeps: one replica simulated at several loads, for latency against load up to saturation.

Open loop: the same requests (one seed, so the same lengths; common random numbers) arriving as
a Poisson process at each rate, the arrival times rescaled. Closed loop: the same requests sent
by each number of users. Rates may be given, or chosen: a geometric search finds the lowest
rate at which the replica's backlog grows (starting from the throughput of a closed loop at full
batch), and the rates are spread evenly from a tenth of it up to it: the last point saturates.

The work is bounded as one simulation's is, over the whole sweep: the forward steps of all its
points (and of the search's runs) together within the budget, refused before any runs when the
loads are given, before the points run when they are chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace as dc_replace
from enum import StrEnum

import numpy as np

from app.catalog.spec_cache import SpecCache
from app.engine.simulation import ClosedLoop, SchedulerConfig, closed_loop_steps, expected_steps
from app.engine.workload import Trace
from app.errors import InvalidInput, spec_errors
from app.simulations.service import (
    KEYED_BUDGET,
    MIN_REQUESTS_PER_S,
    STEP_LIMIT_FACTOR,
    SimulationJob,
    SimulationQuery,
    SimulationRun,
    WorkBudget,
    prepare_simulation,
    run_simulation_job,
)
from app.targets.service import Target

__all__ = [
    "CHOSEN_SPAN",
    "MAX_SWEEP_POINTS",
    "SweepAxis",
    "SweepJob",
    "SweepQuery",
    "SweepRun",
    "prepare_sweep",
    "run_sweep_job",
]

MAX_SWEEP_POINTS = 16
CHOSEN_SPAN = (0.1, 1.0)
"""Chosen rates run from these fractions of the saturating rate, evenly spaced."""


class SweepAxis(StrEnum):
    """What a sweep varies: the arrival rate (open loop) or the users (closed loop)."""

    REQUESTS_PER_S = "requests_per_s"
    CONCURRENCY = "concurrency"


@dataclass(frozen=True, slots=True)
class SweepQuery:
    """A simulation request whose load is the sweep's: the `rates` or `users` given along
    `axis`, or neither to choose `points` of them. `base.workload` carries the lengths (its
    load is ignored)."""

    base: SimulationQuery
    axis: SweepAxis
    points: int
    rates: tuple[float, ...] | None = None
    users: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class SweepJob:
    """A prepared sweep: the requests at one request per second (open loop) and the settings
    each point runs with; what a worker process executes."""

    job: SimulationJob
    axis: SweepAxis
    rates: tuple[float, ...] | None
    users: tuple[int, ...] | None
    points: int
    think_time_s: float
    max_steps: int
    work_field: str


@dataclass(frozen=True, slots=True)
class SweepRun:
    """The runs of a sweep, in the order of its loads."""

    resolved: Target
    scheduler: SchedulerConfig
    kv_capacity_tokens: int
    num_requests: int
    axis: SweepAxis
    saturation_requests_per_s: float | None
    """The lowest probed rate at which the backlog grew, when the rates were chosen."""
    runs: tuple[tuple[float, SimulationRun], ...]
    """(offered rate, run) pairs of an open-loop sweep; empty for a closed loop's."""
    user_runs: tuple[tuple[int, SimulationRun], ...] = ()
    """(users, run) pairs of a closed-loop sweep."""


def _scaled(trace: Trace, requests_per_s: float) -> Trace:
    """The unit-rate trace's requests arriving at `requests_per_s` (the gaps divided by it)."""
    return Trace(trace.arrival_s / requests_per_s, trace.prompt_tokens, trace.output_tokens)


def _at_rate(sweep: SweepJob, rate: float) -> SimulationJob:
    return dc_replace(sweep.job, trace=_scaled(sweep.job.trace, rate), closed_loop=None)


def _with_users(sweep: SweepJob, users: int) -> SimulationJob:
    return dc_replace(sweep.job, closed_loop=ClosedLoop(users, sweep.think_time_s))


def _points(
    sweep: SweepJob, rates: tuple[float, ...] = (), users: tuple[int, ...] = ()
) -> list[SimulationJob]:
    return [_at_rate(sweep, rate) for rate in rates] + [_with_users(sweep, n) for n in users]


def _steps(job: SimulationJob) -> int:
    scheduler = job.scheduler.for_ranks(job.target.deployment.scheduler_batches)
    with spec_errors():
        if job.closed_loop is not None:
            return closed_loop_steps(job.trace, scheduler, job.closed_loop)
        return expected_steps(job.trace, job.timer or job.target.cost, scheduler)


def _check_work(sweep: SweepJob, points: list[SimulationJob], spent: int = 0) -> None:
    """422 naming the work field when the points' steps and `spent` exceed the budget."""
    steps = spent + sum(_steps(point) for point in points)
    if steps > sweep.max_steps:
        raise InvalidInput.at(
            sweep.work_field,
            f"the sweep's {len(points)} points take about {steps:,} forward steps together, "
            f"over the {sweep.max_steps:,} one sweep may take: simulate fewer requests per "
            "point or fewer points",
        )


def prepare_sweep(
    cache: SpecCache, query: SweepQuery, budget: WorkBudget = KEYED_BUDGET
) -> SweepJob:
    """Resolve and check a sweep: the target, the KV cache and the requests once (at one
    request per second); given loads are checked against `budget` before anything runs."""
    workload = query.base.workload
    if workload is None:
        raise InvalidInput.at("workload", "a sweep draws its requests from a workload")
    if query.axis is SweepAxis.REQUESTS_PER_S:
        # Arrivals at one request per second, scaled to each point's rate.
        base = dc_replace(workload, requests_per_s=1.0, concurrency=None)
    else:  # each point's users send the same requests
        base = dc_replace(workload, requests_per_s=None, concurrency=1)
    # The steps of the base load say nothing of the sweep's: checked point by point.
    unbounded = WorkBudget(max_requests=budget.max_requests, max_steps=2**62)
    job = prepare_simulation(cache, dc_replace(query.base, workload=base), unbounded)
    sweep = SweepJob(
        job=job,
        axis=query.axis,
        rates=query.rates,
        users=query.users,
        points=query.points,
        think_time_s=workload.think_time_s,
        max_steps=budget.max_steps,
        work_field=job.work_field,
    )
    if query.rates is not None or query.users is not None:
        _check_work(sweep, _points(sweep, query.rates or (), query.users or ()))
    return sweep


def _saturation(sweep: SweepJob, limit: int) -> tuple[float, int]:
    """The lowest rate, of a geometric search, at which the replica saturates, and the steps
    spent finding it. The search starts from the throughput of a closed loop of as many users
    as the scheduler runs sequences (a lower bound: its last requests drain a shrinking batch)
    and grows by `_GROWTH` until a run's backlog grows, at most `_PROBES` times."""
    scheduler = sweep.job.scheduler.for_ranks(sweep.job.target.deployment.scheduler_batches)
    users = min(scheduler.max_num_seqs, len(sweep.job.trace))
    full = dc_replace(sweep.job, closed_loop=ClosedLoop(users, 0.0), max_steps=limit)
    spent = _steps(full)
    _check_work(sweep, [], spent)
    rate = max(float(run_simulation_job(full).result.requests_per_s), MIN_REQUESTS_PER_S)
    for _ in range(_PROBES):
        probe = dc_replace(_at_rate(sweep, rate), max_steps=limit)
        spent += _steps(probe)
        _check_work(sweep, [], spent)
        if run_simulation_job(probe).result.saturated:
            break
        rate *= _GROWTH
    return rate, spent


_GROWTH = 1.5
_PROBES = 12


def _chosen_rates(saturation: float, points: int) -> tuple[float, ...]:
    rates = np.linspace(*CHOSEN_SPAN, points) * saturation
    return tuple(max(float(rate), MIN_REQUESTS_PER_S) for rate in rates)


def _chosen_users(sweep: SweepJob) -> tuple[int, ...]:
    """Users from 1 to twice the scheduler's running sequences (capped by the requests),
    evenly on a log scale, as whole distinct numbers."""
    scheduler = sweep.job.scheduler.for_ranks(sweep.job.target.deployment.scheduler_batches)
    top = max(2, min(2 * scheduler.max_num_seqs, len(sweep.job.trace)))
    return tuple(int(u) for u in np.unique(np.rint(np.geomspace(1, top, sweep.points))))


def run_sweep_job(sweep: SweepJob) -> SweepRun:
    """Run a prepared sweep (in a heavy-work process; pure computation): the search for the
    saturating rate when the rates are to be chosen (`_saturation`), then each point."""
    saturation = None
    rates, users = sweep.rates, sweep.users
    limit = sweep.max_steps * STEP_LIMIT_FACTOR  # a run stops here; the check is an estimate
    if rates is None and users is None:
        spent = 0
        if sweep.axis is SweepAxis.REQUESTS_PER_S:
            saturation, spent = _saturation(sweep, limit)
            rates = _chosen_rates(saturation, sweep.points)
        else:
            users = _chosen_users(sweep)
        _check_work(sweep, _points(sweep, rates or (), users or ()), spent)

    def run(job: SimulationJob) -> SimulationRun:
        return run_simulation_job(dc_replace(job, max_steps=limit))

    job = sweep.job
    return SweepRun(
        resolved=job.target,
        scheduler=job.scheduler,
        kv_capacity_tokens=job.kv_capacity_tokens,
        num_requests=len(job.trace),
        axis=sweep.axis,
        saturation_requests_per_s=saturation,
        runs=tuple((rate, run(_at_rate(sweep, rate))) for rate in rates or ()),
        user_runs=tuple((n, run(_with_users(sweep, n))) for n in users or ()),
    )
