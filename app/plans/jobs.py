"""Plan jobs: running one plan for the worker that holds it, and the in-process worker of SQLite.

Every plan is a row of `plans` (`app.plans.repository`), the record of its job. A worker holds a
plan under an owner name (`PlanRepository.start` or `claim`) and hands it to a `PlanRunner`,
which resolves it against the catalog and plans it in a heavy-work process (`app.web.heavy`), so
the CPU-bound search never blocks the event loop that serves requests, then stores the verdict.
Which worker gets which plan is `app.plans.queue`'s business: procrastinate's workers on
PostgreSQL, a `PlanWorker` here on SQLite.

- Progress: the planning process stores candidates done of candidates at most every
  `progress_interval_s` (`StoredProgress`); the same write checks that its worker still holds
  the plan, and stops the plan between candidates when not (cancelled by DELETE, or taken over).
- Attempts: a plan started more than `max_attempts` times (each worker died running it) fails.
- SQLite: a `PlanWorker` claims the oldest queued plan (or one whose lease expired: its worker
  died) and renews the leases of the plans it runs each `lease_s / 3`; stopped cleanly, it puts
  them back in the queue. A POST through this process wakes it; otherwise it looks every
  `poll_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from anyio import to_thread
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.catalog.spec_cache import SpecCache
from app.db.session import DatabaseLimits, make_engine, make_session_factory
from app.engine.planning.progress import PlanCancelled
from app.errors import DomainError
from app.plans import service as plans
from app.plans.repository import Claim, PlanRepository, PlanRow, PlanStatus
from app.plans.schemas import PlanRequest
from app.settings import Settings
from app.web.heavy import HeavyWork
from app.web.problems import ApiProblem

__all__ = [
    "Outcome",
    "PlanRunner",
    "PlanWorker",
    "ProgressTarget",
    "StoredProgress",
    "WorkerLimits",
    "run_plan_job",
    "wait_for_plan",
    "worker_limits",
    "worker_name",
]

_log = logging.getLogger("ridgeline.plans")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WorkerLimits:
    concurrency: int = 1
    """Plans one worker runs at once."""
    poll_s: float = 1.0
    """How often an idle worker looks for plans queued through other processes."""
    lease_s: float = 30.0
    """A worker silent this long (no lease renewed, no heartbeat) is presumed dead."""
    max_attempts: int = 3
    """Starts of one plan before it fails (a plan that kills its worker every time)."""
    progress_interval_s: float = 0.5
    """Least time between two progress writes of one job."""


def worker_limits(settings: Settings, concurrency: int | None = None) -> WorkerLimits:
    return WorkerLimits(
        concurrency=concurrency if concurrency is not None else settings.plan_workers,
        poll_s=settings.plan_poll_s,
        lease_s=settings.plan_lease_s,
        max_attempts=settings.plan_max_attempts,
        progress_interval_s=settings.plan_progress_interval_s,
    )


@dataclass(frozen=True, slots=True)
class ProgressTarget:
    """Where a planning process stores its progress: picklable, unlike an engine."""

    database_url: str
    plan_id: str
    owner: str
    interval_s: float
    attempt: int | None = None
    """The attempt writing (`Claim.attempts`): an earlier one under the same owner is fenced."""


class StoredProgress:
    """A `PlanProgress` that stores candidates done over candidates in the plan's row, at most
    every `interval_s` (and always the last), and raises `PlanCancelled` when the write finds
    that `owner` no longer holds the job. A write the database refuses (busy) is skipped."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        target: ProgressTarget,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions = sessions
        self._target = target
        self._clock = clock
        self._last_s = -float("inf")
        self.writes = 0

    def update(self, done: int, total: int) -> None:
        now = self._clock()
        if done < total and now - self._last_s < self._target.interval_s:
            return
        self._last_s = now
        share = done / total if total else 1.0
        try:
            with self._sessions.begin() as session:
                repository = PlanRepository(session)
                held = repository.report(
                    self._target.plan_id, self._target.owner, share, self._target.attempt
                )
        except SQLAlchemyError:  # busy or away: progress is news, not worth failing the plan
            _log.warning("plan %s: progress not stored", self._target.plan_id, exc_info=True)
            return
        self.writes += 1
        if not held:
            raise PlanCancelled(f"plan {self._target.plan_id} is no longer this worker's")


def run_plan_job(job: plans.PlanJob, target: ProgressTarget) -> plans.ComputedPlan:
    """Plan `job` storing its progress at `target` (in a heavy-work process)."""
    engine = make_engine(target.database_url, DatabaseLimits(pool_size=1, max_overflow=1))
    try:
        return plans.compute_plan(job, StoredProgress(make_session_factory(engine), target))
    finally:
        engine.dispose()


def worker_name() -> str:
    """A name for this process's worker, unique across hosts and restarts (at most 48
    characters: an owner adds an attempt to it)."""
    return f"{socket.gethostname()[:24]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Outcome(StrEnum):
    """How a run of a plan ended."""

    DONE = "done"  # the answer is stored
    FAILED = "failed"  # the problem is stored
    CANCELLED = "cancelled"  # stopped: cancelled, deleted, or no longer this worker's
    RELEASED = "released"  # put back in the queue untried (no heavy-work slot, or stopping)


class PlanRunner:
    """Runs the plans its worker holds, each in a heavy-work process, and stores their verdicts.
    Counts its `outcomes`; `running` holds the ids of the plans it runs now. Only its event
    loop touches its state."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        cache: SpecCache,
        heavy: HeavyWork,
        database_url: str,
        limits: WorkerLimits,
    ) -> None:
        self.sessions = sessions
        self.cache = cache
        self.heavy = heavy
        self.database_url = database_url
        self.limits = limits
        self.name = worker_name()
        self.running: set[str] = set()
        self.outcomes: dict[str, int] = dict.fromkeys(map(str, Outcome), 0)
        self._finished: dict[str, asyncio.Event] = {}

    async def finished(self, plan_id: str, timeout_s: float) -> None:
        """Returns when this runner finishes a run of `plan_id`, or after `timeout_s`."""
        event = self._finished.setdefault(plan_id, asyncio.Event())
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_s)
        finally:
            if self._finished.get(plan_id) is event:
                del self._finished[plan_id]

    def write(self, change: Callable[[PlanRepository], T]) -> T:
        """`change` in a transaction of its own (call it in a worker thread)."""
        with self.sessions.begin() as session:
            return change(PlanRepository(session))

    async def start(self, plan_id: str, owner: str) -> Claim | None:
        """Take `plan_id` for `owner` (its job was delivered to `owner`); None when there is
        nothing left to run (finished, cancelled or deleted)."""
        return await to_thread.run_sync(self.write, lambda r: r.start(plan_id, owner))

    async def release(self, plan_id: str, owner: str) -> None:
        """Put `owner`'s plan back in the queue, untried (this worker is stopping)."""
        await to_thread.run_sync(self.write, lambda r: r.release(plan_id, owner))
        self.outcomes[Outcome.RELEASED] += 1

    async def run(self, claim: Claim, owner: str) -> Outcome:
        """Plan `claim`'s plan, which `owner` holds, and store the verdict. `RELEASED`: every
        heavy-work slot was taken, the plan is back in the queue (retry it after
        `heavy.retry_after_s()`). Cancelling the call stops the plan's heavy-work process
        and leaves the plan as it is (the caller puts it back, or it was cancelled)."""
        plan_id = claim.plan_id
        self.running.add(plan_id)
        try:
            try:
                outcome = await self._plan(claim, owner)
            except Exception:
                _log.exception("plan worker: plan %s failed unexpectedly", plan_id)
                outcome = Outcome.FAILED
                with contextlib.suppress(Exception):  # the database is away: recovered later
                    await self._fail(
                        plan_id,
                        owner,
                        ApiProblem(
                            500, "internal-error", "The plan failed unexpectedly; the logs tell."
                        ),
                        claim.attempts,
                    )
        finally:
            self.running.discard(plan_id)
            event = self._finished.pop(plan_id, None)
            if event is not None:
                event.set()
        self.outcomes[outcome] += 1
        return outcome

    def _prepare(self, plan_id: str, owner: str) -> plans.PlanJob | None:
        """The job of a plan `owner` holds, resolved against the catalog now; None when it no
        longer holds it."""
        with self.sessions() as session:
            row = PlanRepository(session).get(plan_id)
            if row is None or row.status != PlanStatus.RUNNING or row.lease_owner != owner:
                return None
            query = PlanRequest.model_validate(row.request).query()
            return plans.prepare_plan(session, self.cache, query)

    async def _plan(self, claim: Claim, owner: str) -> Outcome:
        plan_id = claim.plan_id
        if claim.attempts > self.limits.max_attempts:
            await self._fail(
                plan_id,
                owner,
                ApiProblem(
                    503,
                    "busy",
                    f"The plan was started {claim.attempts - 1} times and its worker stopped "
                    "each time (out of memory, or its process ended): ask for less work.",
                ),
                claim.attempts,
            )
            return Outcome.FAILED
        try:
            job = await to_thread.run_sync(self._prepare, plan_id, owner)
            if job is None:
                return Outcome.CANCELLED
            target = ProgressTarget(
                self.database_url, plan_id, owner, self.limits.progress_interval_s, claim.attempts
            )
            computed = await self.heavy.run(None, run_plan_job, job, target)
        except PlanCancelled:
            return Outcome.CANCELLED
        except DomainError as error:
            if isinstance(error, ApiProblem) and error.status == 429:
                # Every heavy-work slot is taken: back in the queue, to retry shortly.
                await to_thread.run_sync(
                    self.write, lambda r: r.release(plan_id, owner, claim.attempts)
                )
                return Outcome.RELEASED
            await self._fail(plan_id, owner, error, claim.attempts)
            return Outcome.FAILED
        stored = await to_thread.run_sync(
            self.write,
            lambda r: plans.finish_plan(
                r.session, plan_id, owner, job, computed, attempt=claim.attempts
            ),
        )
        return Outcome.DONE if stored else Outcome.CANCELLED

    async def _fail(self, plan_id: str, owner: str, error: DomainError, attempt: int) -> None:
        await to_thread.run_sync(
            self.write,
            lambda r: plans.fail_plan(r.session, plan_id, owner, error, attempt=attempt),
        )


class PlanWorker:
    """SQLite's in-process worker: claims queued plans and runs them with `runner`,
    `limits.concurrency` at a time, until stopped. Only its event loop touches its state."""

    def __init__(self, runner: PlanRunner) -> None:
        self.runner = runner
        self.limits = runner.limits
        self.owner = runner.name
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start claiming plans (and renewing leases) in the running event loop."""
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="plan-worker"),
            asyncio.create_task(self._lease_loop(), name="plan-leases"),
        ]

    def wake(self) -> None:
        """Look for plans now (one was queued through this process)."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop claiming; stop the plans running here and put them back in the queue, where
        another worker takes them at once."""
        for task in self._loops:
            task.cancel()
        running = list(self.tasks.items())
        for _, task in running:
            task.cancel()
        await asyncio.gather(*self._loops, *(task for _, task in running), return_exceptions=True)
        for plan_id, _ in running:
            with contextlib.suppress(Exception):
                await self.runner.release(plan_id, self.owner)

    async def _claim_loop(self) -> None:
        while True:
            try:
                while len(self.tasks) < self.limits.concurrency:
                    claim = await to_thread.run_sync(
                        self.runner.write, lambda r: r.claim(self.owner, self.limits.lease_s)
                    )
                    if claim is None:
                        break
                    self.tasks[claim.plan_id] = asyncio.create_task(self._run(claim))
            except Exception:  # the database is away: try again at the next poll
                _log.exception("plan worker: claiming a plan failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.limits.poll_s)

    async def _lease_loop(self) -> None:
        while True:
            await asyncio.sleep(self.limits.lease_s / 3)
            if not self.tasks:
                continue
            ids = list(self.tasks)
            try:
                await to_thread.run_sync(
                    self.runner.write,
                    lambda r, ids=ids: r.renew(ids, self.owner, self.limits.lease_s),
                )
            except Exception:
                _log.exception("plan worker: renewing leases failed")

    async def _run(self, claim: Claim) -> None:
        try:
            if await self.runner.run(claim, self.owner) is Outcome.RELEASED:
                await asyncio.sleep(self.runner.heavy.retry_after_s())
        finally:
            self.tasks.pop(claim.plan_id, None)
            self._wake.set()  # a slot is free


async def wait_for_plan(
    sessions: sessionmaker[Session],
    runner: PlanRunner | None,
    plan_id: str,
    wait_s: float,
    poll_s: float = 0.25,
) -> PlanRow | None:
    """The plan once finished, waiting at most `wait_s`: woken by this process's runner when
    it runs the plan, else reading the row every `poll_s`; None when still queued or running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        remaining = deadline - loop.time()
        if remaining > 0:
            if runner is not None:
                await runner.finished(plan_id, min(poll_s, remaining))
            else:
                await asyncio.sleep(min(poll_s, remaining))

        def read() -> PlanRow | None:
            with sessions() as session:
                return PlanRepository(session).get(plan_id)

        row = await to_thread.run_sync(read)
        if row is None or PlanStatus(row.status).finished:
            return row
        if loop.time() >= deadline:
            return None
